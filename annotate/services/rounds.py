"""Rounds: the requests that start and retrain them, and the round flow — the one place that knows the
order of a round's steps.

    pending  ─plan→  scoring  ─score every shard→  selecting  ─select→  labeling  ─(request)→  training
    ─train plan, then every adapter→  evaluating  ─(every eval shard, then) evaluate→  done   (any active → failed)
    done or failed  ─finish→  (the export snapshot and the notifications: annotate/services/notify.py)

With loop option ``arms_timing`` "deferred" (the CPU profile) the round's path trains and evaluates its
prod members only; its comparison adapters (scratch, active, random: the same plan and seeds) are
trained and evaluated after it is done, as units of their own (``train`` "arm:k", then ``arms_eval``),
once no round of the project is on the path people wait on and a later round has chosen its batch
(or none can come: the pool's end, a final model) — while people label, so they take no worker from
a round that is scoring, selecting, training or evaluating. Their points then join the round's metrics
(annotate/services/evaluation.py ``arms_evaluate_run``); failing every attempt, the comparison is given
up with its reason and the round stays done.

A round whose selection finds the pool fully labelled goes selecting → training with no batch
(``pool_exhausted``: the final model, from scratch; the project's last round until more items are
imported), as does a requested final-model round (``round_request_final``).

``round_advance(round_id)`` reads the database and dispatches exactly the units of work the round is
missing in its status, after moving it on where a join is complete (every shard scored → selecting;
every planned adapter trained → evaluating). Every task calls it after its step (annotate/tasks.py);
every worker start calls it for all active rounds with ``resend=True`` (``rounds_resume_all``: a
message a dead worker held is sent again); the synchronous driver ``round_run_sync`` (``manage.py
round run-sync``, the service tests, the simulation) calls it with its own dispatcher and runs the
units in its process.

The step services — planning.round_plan, scoring.score_shard_run, selection.round_select,
training.training_plan_run / train_adapter_run, evaluation.eval_shard_run / round_evaluate_run — do one
step and return;
they import neither tasks nor each other nor this module. Each unit of work is claimed by one live
process (annotate/services/jobs.py), so a duplicated message, a second worker or a restart never does
it twice; a round whose ``drive`` claim a live synchronous process holds gets nothing from the workers.

Requests: the ML page (``round_request_start`` / ``round_request_retrain``), ``manage.py round``, the
REST endpoint (annotate/api.py), and ``maybe_auto_retrain`` (called by the labeling service). They
write a row or one guarded move and call ``round_advance``; the heavy work runs in the tasks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from acquisition.strategies import STRATEGIES
from annotate.loopconfig import config_fingerprint, freeze_config, round_eval_shards
from annotate.models import Item, Project, Round, ScoreShard, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.selectors import rounds as rounds_sel
from annotate.services import evaluation, jobs, notify, people_queue, planning, scoring, selection, training
from annotate.services.queue import send_on_commit
from annotate.services.round_state import RoundError, S, round_transition
from annotate.services.workers import on_this_host, worker_alive, worker_id

ACTIVE_STATUSES = Round.ACTIVE_STATUSES
log = logging.getLogger(__name__)
K = WorkClaim.Kind

__all__ = [
    "ACTIVE_STATUSES",
    "RoundError",
    "UnknownStrategyError",
    "Work",
    "driving",
    "maybe_auto_retrain",
    "round_advance",
    "round_compare_sync",
    "round_request_final",
    "round_request_retrain",
    "round_request_start",
    "round_resume",
    "round_run_sync",
    "round_start_training",
    "rounds_resume_all",
]


class UnknownStrategyError(RoundError):
    """A strategy that is not one of acquisition.strategies.STRATEGIES (a bad request, not a busy round)."""


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise UnknownStrategyError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    return strategy


# -- requests -------------------------------------------------------------------------------------


def round_request_start(*, project: Project, user: Any, strategy: str = "active", run_here: bool = False) -> Round:
    """Create the next round (pending) with its selection strategy and dispatch its first step.
    Refused while another is active, and once the pool is fully labelled (until more is imported); an
    unknown strategy is refused before anything is written. ``run_here``: this process drives the
    round (``round_run_sync``): it is created with its drive claim held here, in the same
    transaction, and nothing goes to the workers."""
    check_strategy(strategy)
    return _request_round(project=project, user=user, strategy=strategy, run_here=run_here)


def round_request_final(*, project: Project, user: Any, run_here: bool = False) -> Round:
    """A final-model round: it selects nothing and retrains the K adapters from scratch on every label
    (so the model depends on the labelled set, not on the order it arrived in), then evaluates.
    Refused while another round is active, before any label, and once the pool's end trained one."""
    if not Item.objects.filter(project=project, is_test=False, final_label__isnull=False).exists():
        raise RoundError("no labels yet: label a batch before asking for the final model")
    return _request_round(project=project, user=user, strategy=FINAL_STRATEGY, run_here=run_here, final=True)


FINAL_STRATEGY = "final-model"  # Round.strategy of a requested final-model round (it selects nothing)
PEOPLE_STRATEGY = "autolabel"  # Round.strategy of a round opened for items people label outside selection


def _request_round(*, project: Project, user: Any, strategy: str, run_here: bool, final: bool = False) -> Round:
    try:
        with transaction.atomic():
            active = Round.objects.filter(project=project, status__in=ACTIVE_STATUSES).order_by("-number").first()
            if active is not None:
                raise RoundError(f"round {active.number} is still {active.status}; wait until it is done")
            ended = rounds_sel.pool_end_round(project=project)
            if ended is not None:
                raise RoundError(rounds_sel.pool_end_sentence(ended))
            new = _create_round(project, strategy=strategy, requested_by=user, final_requested=final)
            if run_here:
                _take_drive(jobs.work_rows(new.id, K.DRIVE), holder=None)
            else:
                round_advance(new.id)
            return new
    except IntegrityError as exc:  # two clicks raced for the same number: the other one won
        raise RoundError("another request for this round was recorded at the same moment") from exc


round_start = round_request_start


def round_open_for_people(*, project: Project) -> Round | None:
    """The round in labelling that items for people join (annotate/services/people_queue.py): the
    project's active round when it is labelling; with no active round, a new one opened for them —
    created pending with the frozen configuration any round has, moved pending → selecting →
    labelling through the round transitions, and the items waiting for people absorbed into its
    batch; None while the active round is busy (the items wait for it). From labelling on it is a
    round like any other: people label it, it is retrained (by a request or ``auto_retrain_share``)
    and evaluated. Raises RoundError when the deployment's loop options are invalid."""
    for _ in range(3):
        try:
            with transaction.atomic():
                active = Round.objects.filter(project=project, status__in=ACTIVE_STATUSES).order_by("-number").first()
                if active is not None:
                    return active if active.status == S.LABELING else None
                new = _create_round(project, strategy=PEOPLE_STRATEGY)
                round_transition(new.id, S.PENDING, S.SELECTING)
                round_transition(new.id, S.SELECTING, S.LABELING)
                new.refresh_from_db()
                people_queue.absorb(round=new)
                return new
        except IntegrityError:  # a round request took this number at the same moment: look again
            continue
    raise RoundError("rounds were requested too fast to open one for the items people must label")


def _create_round(project: Project, *, strategy: str, **fields: Any) -> Round:
    """The project's next round, pending, with its configuration frozen (inside the caller's
    transaction; a round requested at the same moment raises IntegrityError on the number)."""
    number = (Round.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0) + 1
    frozen = _frozen_config(project, number)
    return Round.objects.create(
        config=frozen,
        config_fingerprint=config_fingerprint(frozen),
        project=project,
        number=number,
        status=S.PENDING,
        seed=project.seed + number,
        strategy=strategy,
        **fields,
    )


def _frozen_config(project: Project, number: int) -> dict[str, Any]:
    """The configuration round ``number`` of ``project`` will run with, frozen here, in the requesting
    process, for every process that works on it (annotate.loopconfig); a bad deployment option is
    refused now, by name, before any row is written."""
    try:
        return freeze_config(project, adapter_set=loop_sel.prod_set_hash(project=project, before_number=number))
    except ValueError as exc:
        raise RoundError(f"the deployment's loop options are invalid: {exc}") from exc


def round_request_retrain(*, project: Project, user: Any) -> Round:
    """Retrain on the labels collected so far: the latest round leaves labeling for training.
    Idempotent (a second click on a round already training changes nothing)."""
    current = Round.objects.filter(project=project).order_by("-number").first()
    if current is None:
        raise RoundError("there is no round to retrain yet; start a round first")
    if current.status in (S.TRAINING, S.EVALUATING):
        return current
    if current.status != S.LABELING:
        raise RoundError(f"round {current.number} is {current.status}; retrain once its batch is being labeled")
    Round.objects.filter(id=current.id).update(retrain_requested=True)
    return round_start_training(round_id=current.id)


def round_start_training(*, round_id: int) -> Round:
    """labeling → training (one guarded move); the training plan is frozen by a task (training_plan_run),
    never inside the request."""
    row = Round.objects.select_related("project").get(id=round_id)
    if row.status in (S.TRAINING, S.EVALUATING, S.DONE):
        return row
    if row.status != S.LABELING:
        raise RoundError(f"round {row.number} is {row.status}, not labeling")
    if not Item.objects.filter(project=row.project, is_test=False, final_label__isnull=False).exists():
        raise RoundError("no labels yet: label some of the batch first")
    with transaction.atomic():
        if round_transition(row.id, S.LABELING, S.TRAINING, train_steps_total=0, train_steps_done=0):
            round_advance(row.id)
    row.refresh_from_db()
    return row


def maybe_auto_retrain(round_id: int) -> bool:
    """Called by the labeling and review services after each label or lead decision: start training
    once the project's ``auto_retrain_share`` of the round's batch is finished (labelled, decided or
    returned: annotate.selectors.progress). True when it started it."""
    from annotate.selectors.progress import batch_items_finished

    row = Round.objects.select_related("project").filter(id=round_id, status=S.LABELING).first()
    if row is None or row.project.auto_retrain_share <= 0:
        return False
    size = loop_sel.batch_size(round=row)
    if size == 0 or batch_items_finished(round=row) < row.project.auto_retrain_share * size:
        return False
    try:
        round_start_training(round_id=row.id)
    except RoundError:
        return False
    return True


# -- the round flow -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """One unit of a round's work: the task that does it and its arguments."""

    task: str
    args: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.task}{self.args}"


Dispatch = Callable[[Work], None]

# What each unit runs: the tasks (annotate/tasks.py) call these same services, then round_advance.
STEPS: dict[str, Callable[..., object]] = {
    "annotate.round_begin": lambda r: planning.round_plan(round_id=r),
    "annotate.gpu.score_shard": lambda r, shard: scoring.score_shard_run(round_id=r, shard=shard),
    "annotate.round_select": lambda r: selection.round_select(round_id=r),
    "annotate.round_plan_training": lambda r: training.training_plan_run(round_id=r),
    "annotate.gpu.train_adapter": lambda r, arm, k: training.train_adapter_run(round_id=r, arm=arm, k=k),
    "annotate.gpu.eval_shard": lambda r, shard: evaluation.eval_shard_run(round_id=r, shard=shard),
    "annotate.gpu.round_evaluate": lambda r: evaluation.round_evaluate_run(round_id=r),
    "annotate.gpu.arms_evaluate": lambda r: evaluation.arms_evaluate_run(round_id=r),
    "annotate.round_finished": lambda r: notify.round_finished_run(round_id=r),
}


def enqueue(work: Work) -> None:
    """Send the unit to the workers once the current transaction commits (``annotate.gpu.*`` is
    routed to the gpu queue)."""
    send_on_commit(work.task, *work.args)


def _units(row: Round) -> list[tuple[Work, QuerySet[Any]]]:
    """Every unit of the round's current status with the claim row that tracks it."""
    rid = row.id
    if row.status == S.PENDING:
        return [(Work("annotate.round_begin", (rid,)), jobs.work_rows(rid, K.PLAN))]
    if row.status == S.SCORING:
        return [
            (Work("annotate.gpu.score_shard", (rid, shard)), scoring.shard_rows(rid, shard))
            for shard in ScoreShard.objects.filter(round=row).order_by("shard").values_list("shard", flat=True)
        ]
    if row.status == S.SELECTING:
        return [(Work("annotate.round_select", (rid,)), jobs.work_rows(rid, K.SELECT))]
    if row.status == S.TRAINING and not training.has_plan(row):
        return [(Work("annotate.round_plan_training", (rid,)), jobs.work_rows(rid, K.TRAIN_PLAN))]
    if row.status == S.TRAINING:
        return [
            (Work("annotate.gpu.train_adapter", (rid, arm, k)), jobs.work_rows(rid, K.TRAIN, f"{arm}:{k}"))
            for arm, k in training.adapters_to_train(round=row)
        ]
    if row.status == S.EVALUATING:
        # With eval shards (loop option eval_shards) the gpu workers first score the evaluation side by side;
        # the evaluate unit, which reads their scores, once every shard is done.
        shards = [
            (Work("annotate.gpu.eval_shard", (rid, i)), jobs.work_rows(rid, K.EVAL_SHARD, str(i)))
            for i in range(round_eval_shards(row))
        ]
        if any(rows.exclude(status=jobs.S.DONE).exists() for _, rows in shards):
            return shards
        return [(Work("annotate.gpu.round_evaluate", (rid,)), jobs.work_rows(rid, K.EVALUATE))]
    if row.status in (S.DONE, S.FAILED):  # a done round's deferred comparison: _send_comparisons
        return [(Work("annotate.round_finished", (rid,)), jobs.work_rows(rid, K.FINISH))]
    return []  # labeling waits for people


# Statuses of a round on the path people wait on: deferred comparison arms never start beside one.
PATH_STATUSES = (S.PENDING, S.SCORING, S.SELECTING, S.TRAINING, S.EVALUATING)


def comparison_units(row: Round) -> list[tuple[Work, QuerySet[Any]]]:
    """A done round's deferred comparison (loop option arms_timing): its adapters not trained yet,
    then, once every one is, their evaluation; nothing once it is measured or given up."""
    if row.status != S.DONE or not training.comparison_owed(row):
        return []
    rid, keys = row.id, training.comparison_keys(row)
    if not training.training_done(round=row, keys=keys):
        return [
            (Work("annotate.gpu.train_adapter", (rid, arm, k)), jobs.work_rows(rid, K.TRAIN, f"{arm}:{k}"))
            for arm, k in training.adapters_to_train(round=row, keys=keys)
        ]
    return [(Work("annotate.gpu.arms_evaluate", (rid,)), jobs.work_rows(rid, K.ARMS_EVAL))]


def comparison_due(row: Round) -> bool:
    """Whether the workers may take a done round's deferred comparison now: no round of the project is
    on the path people wait on, and a later round has chosen its batch (so it is not waiting for a worker
    either) — or no later round can come (the pool's end, a final model)."""
    rounds = Round.objects.filter(project_id=row.project_id)
    if rounds.filter(status__in=PATH_STATUSES).exists():
        return False
    return row.pool_exhausted or row.final_requested or rounds.filter(number__gt=row.number).exists()


def _settle(row: Round) -> None:
    """Move the round past a completed join: every shard scored, every planned adapter trained."""
    if row.status == S.SCORING and scoring.scoring_done(round=row):
        scoring.scoring_finish(round_id=row.id)
        row.refresh_from_db()
    if row.status == S.TRAINING and training.training_done(round=row):
        training.training_finish(round_id=row.id)
        row.refresh_from_db()


def missing_work(row: Round, *, check_running: bool = True) -> list[tuple[Work, QuerySet[Any]]]:
    """The units of the round's status that no live process holds and that are not done
    (``check_running=False``: every running unit counts as held, no liveness check)."""
    return [(work, rows) for work, rows in _units(row) if jobs.needs_worker(rows, check_running=check_running).exists()]


def round_advance(
    round_id: int, *, dispatch: Dispatch | None = None, resend: bool = False, since: datetime | None = None
) -> list[Work]:
    """Dispatch what the round is missing now, and return it.

    Without ``dispatch`` the units go to the workers: each is reserved first (marked queued by one
    conditional UPDATE), so callers racing after their steps never send one twice; ``resend`` (the
    worker-start resume) also sends units already queued whose message a dead worker or a restarted
    broker may have lost: those sent before ``since`` (the starting worker's start; None: now), once
    however many workers start at once (``jobs.resend_due``). A task's follow-up (no ``resend``) takes a
    running unit as held without asking whether its worker lives (that can cost a Celery ping per
    unit): a dead worker's units are found by the next worker start. A round driven by a live
    synchronous process gets nothing. With a ``dispatch`` (the synchronous driver) every missing unit
    is handed to it and nothing is reserved."""
    row = Round.objects.select_related("project").get(id=round_id)
    if dispatch is None and driven(row):
        return []
    _settle(row)
    if row.status in (S.DONE, S.FAILED):
        _open_for_waiting(row.project)
    sent = _send(row, missing_work(row, check_running=resend or dispatch is not None), dispatch, resend, since)
    if dispatch is None:  # the synchronous driver runs a comparison itself (_compare_here)
        sent += _send_comparisons(row, resend=resend, since=since)
    return sent


def _send(
    row: Round,
    units: list[tuple[Work, QuerySet[Any]]],
    dispatch: Dispatch | None,
    resend: bool,
    since: datetime | None,
) -> list[Work]:
    sent = []
    for work, rows in units:
        if dispatch is not None:
            dispatch(work)
        elif jobs.reserve(rows) or (resend and jobs.resend_due(rows, since=since)):
            enqueue(work)
        else:
            continue
        sent.append(work)
    return sent


def _send_comparisons(row: Round, *, resend: bool, since: datetime | None) -> list[Work]:
    """Once ``row`` is off the path people wait on (its batch is out, or it ended), the deferred
    comparisons of the project's done rounds (``row`` too) that are due now, as ``round_advance`` sends."""
    if row.status in PATH_STATUSES:
        return []
    owed = WorkClaim.objects.filter(kind=K.ARMS_EVAL, round__project_id=row.project_id).exclude(
        status=WorkClaim.Status.DONE
    )
    sent: list[Work] = []
    for other in Round.objects.filter(id__in=owed.values("round_id")).order_by("number"):
        if comparison_due(other) and not driven(other):
            units = [(w, r) for w, r in comparison_units(other) if jobs.needs_worker(r, check_running=resend).exists()]
            sent += _send(other, units, None, resend, since)
    return sent


def _open_for_waiting(project: Project) -> None:
    """Once a round has ended, items that waited for people while it was busy get a round (it was a
    final-model round, or they arrived after its batch was chosen). Never fails the caller."""
    if not people_queue.waiting(project_id=project.id):
        return
    try:
        round_open_for_people(project=project)
    except RoundError:
        log.exception("project %s: no round could be opened for the items waiting for people", project.id)


def round_resume(*, round_id: int, since: datetime | None = None) -> list[Work]:
    """Send again what an active round still needs (after a worker died): units held by a dead process,
    and queued ones whose message went out before ``since`` (None: now). Safe any time: every unit is
    claimed before it runs. Returns what it sent, for logs and tests."""
    return round_advance(round_id, resend=True, since=since)


def rounds_resume_all(*, since: datetime | None = None) -> int:
    """Resume every active round, and every finished one whose finish (snapshot, notifications) or
    deferred comparison is not done (the job engine's worker-start resume, annotate/services/jobs.py).
    Returns the units sent."""
    unfinished = WorkClaim.objects.filter(kind__in=[K.FINISH, K.ARMS_EVAL]).exclude(status=WorkClaim.Status.DONE)
    ids = list(
        Round.objects.filter(Q(status__in=ACTIVE_STATUSES) | Q(id__in=unfinished.values("round_id"))).values_list(
            "id", flat=True
        )
    )
    return sum(len(round_resume(round_id=round_id, since=since)) for round_id in ids)


# -- the synchronous driver -------------------------------------------------------------------------


DRIVE_HEARTBEAT_S = 15.0  # the driver refreshes its claim this often ...
DRIVE_STALE_S = 60.0  # ... and one silent for this long is dead (4 missed beats: a busy host, not a hang)


def _driver(rows: QuerySet[WorkClaim]) -> tuple[str, Any] | None:
    """(worker, heartbeat) of the process holding the drive claim, or None."""
    return rows.filter(status=WorkClaim.Status.RUNNING).values_list("worker", "heartbeat_at").first()


def _driver_alive(worker: str, heartbeat: Any) -> bool:
    """Same host: the pid decides. Another host (run-sync in the web container, workers elsewhere):
    a heartbeat within DRIVE_STALE_S."""
    if on_this_host(worker):
        return worker == worker_id() or worker_alive(worker)
    return heartbeat is not None and (timezone.now() - heartbeat).total_seconds() < DRIVE_STALE_S


def driven(row: Round) -> bool:
    """Whether a live synchronous process (this one included) holds the round's drive claim."""
    holder = _driver(WorkClaim.objects.filter(round=row, kind=K.DRIVE))
    return holder is not None and _driver_alive(*holder)


def _take_drive(rows: QuerySet[WorkClaim], *, holder: tuple[str, Any] | None) -> bool:
    """The drive claim for this process: free, or held by ``holder`` (mine, or found dead)."""
    fields = {"status": WorkClaim.Status.RUNNING, "worker": worker_id(), "heartbeat_at": timezone.now()}
    if holder is None:
        return bool(rows.exclude(status=WorkClaim.Status.RUNNING).update(**fields))
    return bool(rows.filter(status=WorkClaim.Status.RUNNING, worker=holder[0]).update(**fields))


@contextlib.contextmanager
def driving(round_id: int) -> Iterator[None]:
    """Hold the round's drive claim in this process for the duration (its heartbeat refreshed by a
    thread): workers leave the round alone, here or on another host."""
    rows = jobs.work_rows(round_id, K.DRIVE)
    holder = _driver(rows)
    if holder is not None and holder[0] != worker_id() and _driver_alive(*holder):
        raise RoundError(f"round id {round_id} is being run by another live process ({holder[0]})")
    if not _take_drive(rows, holder=holder):
        raise RoundError(f"round id {round_id}: another process took it at the same moment")
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(rows, worker_id(), stop), daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        jobs.release(rows, me=worker_id())


def _heartbeat(rows: QuerySet[WorkClaim], me: str, stop: threading.Event) -> None:
    from django.db import DatabaseError, connection

    try:
        while not stop.wait(DRIVE_HEARTBEAT_S):
            with contextlib.suppress(DatabaseError):  # a locked SQLite file: the next beat will do
                rows.filter(status=WorkClaim.Status.RUNNING, worker=me).update(heartbeat_at=timezone.now())
    finally:
        connection.close()  # this thread's own connection


def _run_here(unit: Work) -> None:
    STEPS[unit.task](*unit.args)


def round_run_sync(
    *, round_id: int, until: tuple[str, ...] = (S.LABELING, S.DONE, S.FAILED), comparison: bool = True
) -> Round:
    """Run the round's steps in this process (no broker) until it reaches a status in ``until``; the
    status it starts in never stops it (a round in labeling is trained and evaluated). The driver
    holds the round's drive claim and runs the units ``round_advance`` hands it, then asks again. A
    round it brings to done then gets its deferred comparison here too, unless ``comparison`` is False
    (a bench timing the round alone: ``round_compare_sync`` runs it after)."""
    with driving(round_id):
        row = Round.objects.get(id=round_id)
        last: list[Work] | None = None
        while row.status in ACTIVE_STATUSES:
            before = row.status
            if before == S.LABELING:
                round_start_training(round_id=row.id)
            else:
                units: list[Work] = []
                round_advance(row.id, dispatch=units.append)
                row.refresh_from_db()
                if row.status == before:
                    if not units or units == last:
                        raise RoundError(f"round {row.number} made no progress in {before}")
                    for unit in units:
                        STEPS[unit.task](*unit.args)
                    last = units
            row.refresh_from_db()
            if row.status != before:
                last = None
                if row.status in until:
                    break
        if row.status in (S.DONE, S.FAILED):  # its export snapshot and notifications, here too
            round_advance(row.id, dispatch=_run_here)
        if comparison and row.status == S.DONE:
            _compare_here(row.id)
            row.refresh_from_db()
    return row


def round_compare_sync(*, round_id: int) -> Round:
    """Train and evaluate a done round's deferred comparison arms in this process, whatever the project's
    next round is doing (the simulation, the benches, ``round run-sync``); nothing when none is owed."""
    with driving(round_id):
        _compare_here(round_id)
    return Round.objects.get(id=round_id)


def _compare_here(round_id: int) -> None:
    """Run the comparison's units until none is left: measured, or given up after MAX_ATTEMPTS (a failing
    unit is logged and claimed again, as a worker's retry would; the round stays done)."""
    row = Round.objects.get(id=round_id)
    # each pass trains what is left (or evaluates), and a failing unit is given up after MAX_ATTEMPTS + 1 claims
    for _ in range(2 * (jobs.MAX_ATTEMPTS + 1)):
        units = [work for work, rows in comparison_units(row) if jobs.needs_worker(rows).exists()]
        if not units:
            return
        for unit in units:
            try:
                STEPS[unit.task](*unit.args)
            except Exception:
                log.exception("round %s: %s failed (the comparison only; the round stays done)", row.number, unit)
        row.refresh_from_db()
    raise RoundError(f"round {row.number}: its comparison arms made no progress")
