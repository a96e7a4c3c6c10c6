"""The job engine: every long job of the app — a round's units of work, an import, a label-error scan,
an auto-labelling calibration, run and shard — is a row with ``status``, ``worker`` (host:pid),
``attempts`` and ``sent_at``, and goes through this one module for:

- **claims** (one live process per unit): a round's score shards (ScoreShard) and its other steps
  (WorkClaim: plan, select, train_plan, train "arm:k", evaluate, finish, arms_eval — the deferred
  comparison arms' evaluation after the round — and drive for a synchronous driver); auto-labelling's
  calibrations and shards; label-error scans. The functions take a queryset
  selecting one row, so any table of that shape is claimed the same way:

    reserve(rows)          pending / failed / running on a dead process → queued; True for the one
                           caller that flipped it (it sends the one message); ``sent_at`` = now
    claim(rows, me=...)    pending / queued / failed → running by me, or running on a dead process →
                           running by me; attempts + 1. False: done, or a live process holds it
    finish(rows, me=...)   running by me → done (with the step's counters)
    fail(rows, me=..., error=...)   running by me → failed, with the error
    close(rows)            anything → done, once the unit's product exists (its holder died after)
    end(rows, status, ...) any open row → a final status (failed, refused) with its reason: a job that
                           gives up says why and never stays "running"

  Every update is one conditional UPDATE, so two workers (or a worker and a restart of itself) can
  never both hold a unit.
- **retries**: a unit claimed more than MAX_ATTEMPTS times (its worker died, or it failed, each time)
  stops: a round fails with the reason (a deferred comparison arm gives its comparison up instead: the
  round stays done), a calibration or scan fails, an auto-labelling shard gives its
  items to the dead letters. The tasks' own retry policy for transient errors is ``annotate.tasks.RETRY``.
- **resume after a kill**: every worker start runs ``resume_all`` once (``annotate.jobs_resume``, sent
  to the starting worker's own queue), and so does every reconnection of a worker to the broker (a
  restarted broker lost the queued messages: config/celery.py ``ResumeOnConnect``) and every
  ``ALANN_JOBS_SWEEP_S`` after it (a unit whose worker died while the others stay up); it asks each job
  kind in ``JOBS`` to send again what it still needs. A unit already queued is sent again when its
  last message went out before the worker started or reconnected (or before the broker's own start): a
  worker killed after it received the message and before it claimed the unit leaves the message
  unacknowledged in the broker for the visibility timeout (an hour), and nothing else can tell that
  message from one still waiting in a queue. Throttled per row (``resend_due`` moves ``sent_at`` to
  now): however many workers start at once, each such unit goes out once more — no storm; a
  duplicate message is harmless (the claim lets one process in).
- **status transitions**: a round's are ``round_state.round_transition`` (the moves on the model,
  ``Round.TRANSITIONS``); every other job's rows move only through the functions above.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from annotate import steppoints
from annotate.models import Round, WorkClaim, WorkStatus
from annotate.services.round_state import round_fail
from annotate.services.workers import worker_alive, worker_id

T = TypeVar("T")
log = logging.getLogger(__name__)

S = WorkStatus
CLAIMABLE = (S.PENDING, S.QUEUED, S.FAILED)
MAX_ATTEMPTS = 3  # a unit claimed this often fails its round instead of looping
MAX_ERROR = 2000


def held_by_live(worker: str) -> bool:
    return bool(worker) and worker_alive(worker)


def needs_worker(rows: QuerySet[Any], *, check_running: bool = True) -> QuerySet[Any]:
    """The rows no live process is on: everything but done, less running rows whose worker lives
    (``check_running=False``: less every running row, without asking whether its worker lives)."""
    if not check_running:
        return rows.exclude(status__in=[S.DONE, S.RUNNING])
    live = [r.pk for r in rows.filter(status=S.RUNNING).only("pk", "worker") if held_by_live(r.worker)]
    return rows.exclude(status=S.DONE).exclude(pk__in=live)


def reserve(rows: QuerySet[Any]) -> bool:
    """Mark the one row queued before its message is sent; False when someone else already did (or
    it is done, or held by a live process)."""
    if rows.filter(status__in=[S.PENDING, S.FAILED]).update(status=S.QUEUED, sent_at=timezone.now()):
        return True
    return requeue_dead(rows, to=S.QUEUED)


def requeue_dead(rows: QuerySet[Any], *, to: str) -> bool:
    """A row running on a dead process → ``to`` (queued, or pending for a table without a queued
    status), ``sent_at`` now; True for the one caller that moved it (it sends the one message)."""
    current = rows.filter(status=S.RUNNING).values_list("worker", flat=True).first()
    if current is None or held_by_live(current):
        return False
    return bool(rows.filter(status=S.RUNNING, worker=current).update(status=to, sent_at=timezone.now()))


def resend_due(rows: QuerySet[Any], *, waiting: tuple[str, ...] = (S.QUEUED,), since: datetime | None = None) -> bool:
    """Whether to send again a unit that waits (``waiting``: queued, or pending where the table has no
    queued status) for a worker: its message may be lost (a flushed or restarted broker, a worker that
    died holding it before it claimed the row). True for the one caller (of however many workers start
    at once) that finds its last message sent before ``since`` (the starting worker's start, or the
    broker's when later; None: now), or never sent; ``sent_at`` becomes now, so the others leave it."""
    now = timezone.now()
    cutoff = now if since is None else min(since, now)
    lost = Q(sent_at__isnull=True) | Q(sent_at__lt=cutoff)
    return bool(rows.filter(status__in=waiting).filter(lost).update(sent_at=now))


def mark_sent(rows: QuerySet[Any]) -> None:
    """Record that a message for the rows was sent now (a job's first message)."""
    rows.update(sent_at=timezone.now())


def claim(rows: QuerySet[Any], *, me: str) -> bool:
    """Take the one row for ``me``. True: it is mine now (attempts counts this claim)."""
    if rows.filter(status__in=CLAIMABLE).update(status=S.RUNNING, worker=me, attempts=F("attempts") + 1):
        return True
    current = rows.filter(status=S.RUNNING).values_list("worker", flat=True).first()
    if current is None or held_by_live(current):
        return False
    return bool(rows.filter(status=S.RUNNING, worker=current).update(worker=me, attempts=F("attempts") + 1))


def finish(rows: QuerySet[Any], *, me: str, **fields: Any) -> bool:
    return bool(rows.filter(status=S.RUNNING, worker=me).update(status=S.DONE, error="", **fields))


def fail(rows: QuerySet[Any], *, me: str, error: str) -> bool:
    return bool(rows.filter(status=S.RUNNING, worker=me).update(status=S.FAILED, error=error[:MAX_ERROR]))


def close(rows: QuerySet[Any]) -> bool:
    """Mark the unit done whoever holds it, once its product exists (an adapter saved by a process
    that died, or whose ``finish`` failed, before it closed the claim)."""
    return bool(rows.exclude(status=S.DONE).update(status=S.DONE, error=""))


def end(rows: QuerySet[Any], *, status: str, open_statuses: tuple[str, ...], **fields: Any) -> bool:
    """Move an open row (``open_statuses``) to a final ``status`` with ``fields`` (its reason, its
    finish time): whoever holds it, once; a row already final is left as it is."""
    return bool(rows.filter(status__in=open_statuses).update(status=status, **fields))


def release(rows: QuerySet[Any], *, me: str) -> bool:
    """Give a held row back (pending, no worker): the synchronous driver's claim when it stops."""
    return bool(rows.filter(status=S.RUNNING, worker=me).update(status=S.PENDING, worker=""))


def exhausted(rows: QuerySet[Any]) -> bool:
    """Claimed more than MAX_ATTEMPTS times: its worker died (or it failed) every time."""
    return rows.filter(attempts__gt=MAX_ATTEMPTS).exists()


def work_rows(round_id: int, kind: str, key: str = "") -> QuerySet[WorkClaim]:
    """The (created on first use) WorkClaim row of one unit of a round's work, as a queryset."""
    WorkClaim.objects.get_or_create(round_id=round_id, kind=kind, key=key)
    return WorkClaim.objects.filter(round_id=round_id, kind=kind, key=key)


def run_claimed(
    rows: QuerySet[Any],
    *,
    round_id: int,
    what: str,
    step: Callable[[], T],
    give_up: Callable[[str], object] | None = None,
    started: Callable[[], object] | None = None,
) -> T | None:
    """Run ``step`` holding the unit ``rows`` selects: None (and nothing run) when a live process holds
    it or it is done. A unit claimed more than MAX_ATTEMPTS times fails its round — or, with ``give_up``
    (a unit off the round's path: the deferred comparison arms), calls it with the reason instead; an
    error marks it failed (the task's retry or the next resume claims it again) and propagates.
    ``started``: called once the claim is held, before the step."""
    me = worker_id()
    steppoints.reached("claim", f"{round_id}-{what}")
    if not claim(rows, me=me):
        return None
    if exhausted(rows):
        error = rows.values_list("error", flat=True).first() or "its worker died each time"
        fail(rows, me=me, error=error)
        reason = f"{what} failed {MAX_ATTEMPTS} times: {error}"
        if give_up is not None:
            give_up(reason)
        else:
            round_fail(round_id=round_id, reason=reason)
        return None
    if started is not None:
        started()
    try:
        result = step()
    except Exception as exc:
        fail(rows, me=me, error=f"{type(exc).__name__}: {exc}")
        raise
    finish(rows, me=me)
    return result


def run_round_step(round_id: int, *, status: str, kind: str, what: str, step: Callable[[Round], object]) -> Round:
    """A round's one-unit step (plan, select, train plan, evaluate): ``step(row)`` while the round is
    in ``status``, holding the round's ``kind`` claim; the round as it is afterwards."""
    row = Round.objects.select_related("project").get(id=round_id)
    if row.status == status:
        run_claimed(work_rows(row.id, kind), round_id=row.id, what=what, step=lambda: step(row))
    row.refresh_from_db()
    return row


# -- resume -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A kind of job and the function (``module:function``, imported when called: this module imports
    no service) that sends again what its open rows still need, returning how many it sent. Each
    takes ``since`` (for ``resend_due``)."""

    name: str
    resume: str


JOBS: tuple[Job, ...] = (
    Job("rounds", "annotate.services.rounds:rounds_resume_all"),
    Job("imports", "annotate.services.imports:imports_resume_all"),
    Job("label-error scans", "annotate.services.label_errors:label_error_scans_resume_all"),
    Job("auto-labelling", "annotate.services.autolabel:autolabel_resume_all"),
)


def broker_started_at() -> datetime | None:
    """When the broker (Redis) last started, from its uptime; None when it cannot say (no Redis, an
    in-memory broker in a test): then only the age of a message decides."""
    url = str(getattr(settings, "CELERY_BROKER_URL", "") or "")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    try:
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            uptime = int(client.info("server")["uptime_in_seconds"])
        finally:
            client.close()
    except Exception:  # no broker now: the resume's sends will fail and be retried by the task
        log.warning("the broker's start time is unknown", exc_info=True)
        return None
    return timezone.now() - timedelta(seconds=uptime + 1)


def resume_all(*, started: datetime | None = None) -> dict[str, int | str]:
    """A worker start (``started``: when it started; None: now): every job kind sends again what its
    open rows still need, each waiting unit whose message went out before then (or before the broker's
    own start, when that is later). One kind's failure is logged and reported, never stops the others.
    Returns {kind: units sent, or "failed: ..."}."""
    since = started or timezone.now()
    broker = broker_started_at()
    if broker is not None and broker > since:
        since = broker
    report: dict[str, int | str] = {}
    for job in JOBS:
        module, _, function = job.resume.partition(":")
        try:
            report[job.name] = int(getattr(importlib.import_module(module), function)(since=since))
        except Exception as exc:
            log.exception("resuming %s failed", job.name)
            report[job.name] = f"failed: {type(exc).__name__}: {exc}"[:MAX_ERROR]
    return report
