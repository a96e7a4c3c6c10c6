"""Rounds: the state machine and the orchestration of one turn of the loop.

    pending → scoring → selecting → labeling → training → evaluating → done      (any → failed)
    pending → selecting             (cold-start, random and kcenter-only rounds: nothing to score)

A round is requested with a selection strategy (scoring.selection.STRATEGIES, stored in
Round.strategy): "active" in production, the ablations for comparisons (the simulation harness runs
them all through these services). A cold-start round ignores it: it becomes "cold-start".

Every move goes through ``round_transition``: one conditional UPDATE (``WHERE status = from``), so a
replayed or concurrent task can never step a round twice; the caller that wins enqueues the next
step (``transaction.on_commit``), the others do nothing. Steps are idempotent on their own too: a
round's batch is written once (BatchItem unique (round, item)), adapters once (AdapterVersion unique
(round, arm, k)), shards once (ScoreShard unique (round, shard) + status).

Entry points: the ML page (``round_request_start`` / ``round_request_retrain``), ``manage.py round``,
the REST endpoint (annotate/api.py), and ``maybe_auto_retrain`` (called by the labeling service).
``round_resume`` re-enqueues whatever a round still needs; every worker calls it for all active
rounds when it starts, so a round whose worker was killed carries on from its checkpoints.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from annotate.loopconfig import loop_config
from annotate.models import AdapterVersion, BatchItem, Project, Round
from annotate.selectors import loop as loop_sel
from scoring.selection import NEEDS_SCORES, STRATEGIES

ACTIVE_STATUSES = (
    Round.Status.PENDING,
    Round.Status.SCORING,
    Round.Status.SELECTING,
    Round.Status.LABELING,
    Round.Status.TRAINING,
    Round.Status.EVALUATING,
)
S = Round.Status
TRANSITIONS: dict[str, set[str]] = {
    S.PENDING: {S.SCORING, S.SELECTING},
    S.SCORING: {S.SELECTING},
    S.SELECTING: {S.LABELING},
    S.LABELING: {S.TRAINING},
    S.TRAINING: {S.EVALUATING},
    S.EVALUATING: {S.DONE},
}
MAX_REASON = 2000

_SYNC: contextvars.ContextVar[bool] = contextvars.ContextVar("rounds_sync", default=False)


class RoundError(ValueError):
    """A request the round cannot take now; the message is shown as is."""


class UnknownStrategyError(RoundError):
    """A strategy that is not one of scoring.selection.STRATEGIES (a bad request, not a busy round)."""


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise UnknownStrategyError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    return strategy


# -- state machine ------------------------------------------------------------------------------


def round_transition(round_id: int, from_status: str, to_status: str, **fields: Any) -> bool:
    """Move the round from ``from_status`` to ``to_status`` (and set ``fields``) if and only if it is
    still in ``from_status``. True for the one caller that moved it."""
    if to_status not in TRANSITIONS.get(from_status, set()):
        raise RoundError(f"a round cannot go from {from_status} to {to_status}")
    if to_status == S.DONE:
        fields.setdefault("finished_at", timezone.now())
    moved = Round.objects.filter(id=round_id, status=from_status).update(
        status=to_status, updated_at=timezone.now(), **fields
    )
    return moved == 1


def round_fail(*, round_id: int, reason: str) -> bool:
    """Mark an unfinished round failed with the reason (shown on the ML page). Idempotent."""
    moved = Round.objects.filter(id=round_id, status__in=ACTIVE_STATUSES).update(
        status=S.FAILED, failure_reason=reason[:MAX_REASON], finished_at=timezone.now(), updated_at=timezone.now()
    )
    return moved == 1


def dispatch(task: Any, *args: Any) -> None:
    """Enqueue ``task(*args)`` once the current transaction commits (never in sync mode: the sync
    driver runs the steps itself)."""
    if _SYNC.get():
        return
    transaction.on_commit(lambda: task.delay(*args))


@contextlib.contextmanager
def sync_mode() -> Iterator[None]:
    token = _SYNC.set(True)
    try:
        yield
    finally:
        _SYNC.reset(token)


def add_cost(*, round_id: int, step: str, seconds: float, device: str, **counts: float) -> None:
    """Accumulate a step's seconds (and counters) in Round.cost under a row lock."""
    with transaction.atomic():
        row = Round.objects.select_for_update().get(id=round_id)
        cost = dict(row.cost or {})
        steps = dict(cost.get("steps", {}))
        entry = dict(steps.get(step, {"seconds": 0.0, "device": device}))
        entry["seconds"] = round(float(entry.get("seconds", 0.0)) + seconds, 3)
        entry["device"] = device
        for key, value in counts.items():
            entry[key] = entry.get(key, 0) + value
        steps[step] = entry
        cost["steps"] = steps
        Round.objects.filter(id=round_id).update(cost=cost)


def device_name() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


# -- requests -------------------------------------------------------------------------------------


def round_request_start(*, project: Project, user: Any, strategy: str = "active") -> Round:
    """Create the next round (pending) with its selection strategy and enqueue its first step.
    Refused while another is active; an unknown strategy is refused before anything is written."""
    from annotate import tasks

    check_strategy(strategy)
    try:
        with transaction.atomic():
            active = Round.objects.filter(project=project, status__in=ACTIVE_STATUSES).order_by("-number").first()
            if active is not None:
                raise RoundError(f"round {active.number} is still {active.status}; wait until it is done")
            number = (Round.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0) + 1
            new = Round.objects.create(
                project=project,
                number=number,
                status=S.PENDING,
                requested_by=user,
                seed=project.seed + number,
                strategy=strategy,
            )
            dispatch(tasks.round_begin, new.id)
            return new
    except IntegrityError as exc:  # two clicks raced for the same number: the other one won
        raise RoundError("another request for this round was recorded at the same moment") from exc


round_start = round_request_start


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


# -- steps ----------------------------------------------------------------------------------------


def is_cold(row: Round) -> bool:
    """Cold start: the first ``cold_start_batches`` rounds, or any round before an adapter exists."""
    if row.number <= row.project.cold_start_batches:
        return True
    return not loop_sel.prod_adapters(project=row.project, before_number=row.number)


def round_begin(*, round_id: int) -> Round:
    """pending → selecting (cold start, or a strategy that reads no scores) or pending → scoring
    (shards planned and enqueued)."""
    from annotate import tasks
    from annotate.services import scoring

    row = Round.objects.select_related("project").get(id=round_id)
    if row.status != S.PENDING:
        return row
    cold = is_cold(row)
    if cold or row.strategy not in NEEDS_SCORES:
        fields = {"strategy": "cold-start"} if cold else {}
        with transaction.atomic():
            if round_transition(row.id, S.PENDING, S.SELECTING, **fields):
                dispatch(tasks.round_select, row.id)
    else:
        shards = scoring.scoring_plan(round=row)
        with transaction.atomic():
            if round_transition(row.id, S.PENDING, S.SCORING):
                for shard in shards:
                    dispatch(tasks.score_shard, row.id, shard)
        if not shards:
            scoring.maybe_finish_scoring(round_id=row.id)
    row.refresh_from_db()
    return row


def round_select(*, round_id: int) -> Round:
    """selecting → labeling: the batch the round's strategy picks (BatchItem rows, source
    cold/active/random), written once."""
    from annotate.services import scoring
    from annotate.services.labeling import batch_overlap_apply

    row = Round.objects.select_related("project").get(id=round_id)
    if row.status != S.SELECTING:
        return row
    if BatchItem.objects.filter(round=row).exists():  # a replay after the rows committed
        round_transition(row.id, S.SELECTING, S.LABELING)
        row.refresh_from_db()
        return row
    started = time.perf_counter()
    chosen = scoring.choose_batch(round=row)
    if not chosen:
        round_fail(round_id=row.id, reason="no eligible pool items left to select")
        row.refresh_from_db()
        return row
    with transaction.atomic():
        BatchItem.objects.bulk_create(
            [
                BatchItem(round=row, item_id=item_id, source=source, rank=rank, uncertainty=u)
                for rank, (item_id, source, u) in enumerate(chosen)
            ],
            ignore_conflicts=True,
        )
        batch_overlap_apply(round=row)  # the overlap share of the batch needs k distinct annotators
        round_transition(row.id, S.SELECTING, S.LABELING)
    add_cost(round_id=row.id, step="selecting", seconds=time.perf_counter() - started, device="cpu")
    row.refresh_from_db()
    return row


def round_dir(row: Round) -> Path:
    from annotate.services.scoring import run_key

    # the creation time makes the folder unique even where a database reuses ids (see round_score_dir)
    return Path(settings.ADAPTER_DIR) / f"project_{row.project_id}" / f"round_{row.number}-{run_key(row)}"


Plan = dict[str, list[list[int]]]  # "arm:k" -> [[item id, label index], ...]


def train_plan(row: Round, labeled: loop_sel.Labeled, k: int) -> Plan:
    """What each adapter of this round trains on, frozen when training starts (a label revised
    later cannot make a resumed member differ from an uninterrupted one): K prod members on every
    label, a from-scratch member every R rounds, and the equal-size active / random arms."""
    from annotate.loopconfig import loop_options
    from training.loop import arm_training_sets, is_scratch_round, step_rng

    pairs = [[i, y] for i, y in zip(labeled.item_ids, labeled.label_indices, strict=True)]
    plan: Plan = {f"prod:{i}": pairs for i in range(k)}
    # The simulation harness turns the in-round comparison arms off (its strategies are the arms).
    if not loop_options().get("arms", True):
        return plan
    if is_scratch_round(row.number, row.project.scratch_every):
        plan["scratch:0"] = pairs
    for arm, positions in arm_training_sets(labeled.sources, step_rng(row.seed, "arms")).items():
        plan[f"{arm}:0"] = [pairs[i] for i in positions]
    return plan


def write_json(path: Path, payload: Any) -> None:
    """Write via a temp file and one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def read_plan(row: Round) -> Plan:
    return dict(json.loads((round_dir(row) / "train_plan.json").read_text()))


def round_start_training(*, round_id: int) -> Round:
    """labeling → training: freeze the training sets (train_plan.json) and enqueue one task per adapter."""
    from annotate import tasks
    from training.lora import total_steps

    row = Round.objects.select_related("project").get(id=round_id)
    if row.status in (S.TRAINING, S.EVALUATING, S.DONE):
        return row
    if row.status != S.LABELING:
        raise RoundError(f"round {row.number} is {row.status}, not labeling")
    labeled = loop_sel.labeled_items(project=row.project)
    if not labeled.item_ids:
        raise RoundError("no labels yet: label some of the batch first")
    config = loop_config(row.project)
    plan = train_plan(row, labeled, config.k)
    steps = sum(total_steps(len(pairs), config.train) for pairs in plan.values())
    with transaction.atomic():
        if not round_transition(row.id, S.LABELING, S.TRAINING, train_steps_total=steps, train_steps_done=0):
            row.refresh_from_db()
            return row
        write_json(round_dir(row) / "train_plan.json", plan)  # the winner writes; nothing trains before commit
        for key in plan:
            arm, k = key.split(":")
            dispatch(tasks.train_adapter, row.id, arm, int(k))
    row.refresh_from_db()
    return row


def maybe_finish_training(*, round_id: int) -> bool:
    """training → evaluating once every planned adapter exists (the guard makes it happen once)."""
    from annotate import tasks

    row = Round.objects.select_related("project").get(id=round_id)
    if row.status != S.TRAINING:
        return False
    done = {f"{arm}:{k}" for arm, k in AdapterVersion.objects.filter(round=row).values_list("arm", "k")}
    if not set(read_plan(row)) <= done:
        return False
    with transaction.atomic():
        moved = round_transition(row.id, S.TRAINING, S.EVALUATING)
        if moved:
            dispatch(tasks.round_evaluate, row.id)
    return moved


# -- resuming and the synchronous driver --------------------------------------------------------------


def round_resume(*, round_id: int) -> list[str]:
    """Re-enqueue what an active round still needs (after a worker died). Safe to call any time:
    every step it enqueues is idempotent. Returns what it enqueued, for logs and tests."""
    from annotate import tasks
    from annotate.services import scoring

    row = Round.objects.select_related("project").get(id=round_id)
    sent: list[str] = []

    def send(task: Any, *args: Any) -> None:
        sent.append(f"{task.name}{args}")
        dispatch(task, *args)

    with transaction.atomic():
        if row.status == S.PENDING:
            send(tasks.round_begin, row.id)
        elif row.status == S.SCORING:
            for shard in scoring.shards_to_run(round=row):
                send(tasks.score_shard, row.id, shard)
            if not sent:
                scoring.maybe_finish_scoring(round_id=row.id)
        elif row.status == S.SELECTING:
            send(tasks.round_select, row.id)
        elif row.status == S.TRAINING:
            done = {f"{a}:{k}" for a, k in AdapterVersion.objects.filter(round=row).values_list("arm", "k")}
            for key in sorted(set(read_plan(row)) - done):
                arm, k = key.split(":")
                send(tasks.train_adapter, row.id, arm, int(k))
            if not sent:
                maybe_finish_training(round_id=row.id)
        elif row.status == S.EVALUATING:
            send(tasks.round_evaluate, row.id)
    return sent


def rounds_resume_all() -> int:
    ids = list(Round.objects.filter(status__in=ACTIVE_STATUSES).values_list("id", flat=True))
    for round_id in ids:
        round_resume(round_id=round_id)
    return len(ids)


def round_run_sync(*, round_id: int, until: tuple[str, ...] = (S.LABELING, S.DONE, S.FAILED)) -> Round:
    """Run the round's steps in this process (no broker) until it reaches a status in ``until``;
    the status it starts in never stops it (a round in labeling is trained and evaluated). Used by
    ``manage.py round run-sync``, the CPU bench and the service tests."""
    from annotate.services import scoring, training

    steps: dict[str, Callable[[Round], object]] = {
        S.PENDING: lambda r: round_begin(round_id=r.id),
        S.SCORING: lambda r: (
            [scoring.score_shard_run(round_id=r.id, shard=s) for s in scoring.shards_to_run(round=r)]
            or scoring.maybe_finish_scoring(round_id=r.id)
        ),
        S.SELECTING: lambda r: round_select(round_id=r.id),
        S.LABELING: lambda r: round_start_training(round_id=r.id),
        S.TRAINING: lambda r: (
            [training.train_adapter_run(round_id=r.id, arm=a, k=k) for a, k in _missing(r)]
            or maybe_finish_training(round_id=r.id)
        ),
        S.EVALUATING: lambda r: training.round_evaluate_run(round_id=r.id),
    }
    with sync_mode():
        row = Round.objects.get(id=round_id)
        while row.status in steps:
            before = row.status
            steps[row.status](row)
            row.refresh_from_db()
            if row.status == before:
                raise RoundError(f"round {row.number} made no progress in {before}")
            if row.status in until:
                break
    return row


def _missing(row: Round) -> list[tuple[str, int]]:
    done = {f"{a}:{k}" for a, k in AdapterVersion.objects.filter(round=row).values_list("arm", "k")}
    return [(key.split(":")[0], int(key.split(":")[1])) for key in read_plan(row) if key not in done]
