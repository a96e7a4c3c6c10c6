"""One live process per unit of round work: a score shard (ScoreShard) or any other step of a round
(WorkClaim: plan, select, train_plan, train "arm:k", evaluate, and drive for a synchronous driver).

Both tables carry ``status`` (annotate.models.WorkStatus), ``worker`` and ``attempts``; these functions
take a queryset selecting one such row, so any later table of that shape (a bulk scoring job's shards)
is claimed the same way:

    reserve(rows)          pending / failed / running on a dead process → queued; True for the one
                           caller that flipped it (it sends the one message)
    claim(rows, me=...)    pending / queued / failed → running by me, or running on a dead process →
                           running by me; attempts + 1. False: done, or a live process holds it
    finish(rows, me=...)   running by me → done (with the step's counters)
    fail(rows, me=..., error=...)   running by me → failed, with the error
    close(rows)            anything → done, once the unit's product exists (its holder died after)

Every update is one conditional UPDATE, so two workers (or a worker and a restart of itself) can
never both hold a unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import F, QuerySet

from annotate.models import Round, WorkClaim, WorkStatus
from annotate.services.round_state import round_fail
from annotate.services.workers import worker_alive, worker_id

T = TypeVar("T")

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
    if rows.filter(status__in=[S.PENDING, S.FAILED]).update(status=S.QUEUED):
        return True
    current = rows.filter(status=S.RUNNING).values_list("worker", flat=True).first()
    if current is None or held_by_live(current):
        return False
    return bool(rows.filter(status=S.RUNNING, worker=current).update(status=S.QUEUED))


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


def run_claimed(rows: QuerySet[Any], *, round_id: int, what: str, step: Callable[[], T]) -> T | None:
    """Run ``step`` holding the unit ``rows`` selects: None (and nothing run) when a live process holds
    it or it is done. A unit claimed more than MAX_ATTEMPTS times fails its round; an error marks it
    failed (the task's retry or the next resume claims it again) and propagates."""
    me = worker_id()
    if not claim(rows, me=me):
        return None
    if exhausted(rows):
        error = rows.values_list("error", flat=True).first() or "its worker died each time"
        fail(rows, me=me, error=error)
        round_fail(round_id=round_id, reason=f"{what} failed {MAX_ATTEMPTS} times: {error}")
        return None
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
