"""Celery entry points: take ids, re-read rows, call one service. Names are stable; GPU work is
named ``annotate.gpu.*`` and routed to the ``gpu`` queue (config/celery.py).

Each round task runs one step service and then ``round_advance`` (annotate/services/rounds.py), which
dispatches what comes next. Round tasks are idempotent (every unit is claimed by one live worker,
guarded transitions, unique rows, checkpoints), so a redelivered or duplicated message is harmless.
Transient errors (a locked SQLite database, a dropped Redis or PostgreSQL connection) are retried; any
other error, or the last retry, fails the round with the reason (``round_fail``). Every worker, when
it starts, and each time it connects to the broker again, runs the job engine's resume
(``annotate.jobs_resume``, on its own queue: annotate/services/jobs.py): every job kind sends again what
its open rows still need. That is how a round, an import, a label-error scan or an auto-labelling job
continues after its worker was killed, or after the broker restarted and lost the messages.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_ready
from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError

TRANSIENT = (OperationalError, InterfaceError, BrokerError, ConnectionError)
log = logging.getLogger(__name__)
RETRY = {"autoretry_for": TRANSIENT, "max_retries": 3, "retry_backoff": 2, "retry_jitter": True}


class RoundTask(Task):  # type: ignore[misc]
    """Fails the round (first argument) once the task gives up."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        from annotate.services.round_state import round_fail
        from annotate.services.rounds import round_advance

        round_id = args[0] if args else kwargs.get("round_id")
        if round_id is None:
            return
        round_fail(round_id=int(round_id), reason=f"{self.name}: {type(exc).__name__}: {exc}")
        # A failed round's finish (its notifications). Never raise from here: an exception in on_failure
        # takes the worker's consumer down with it (CI, session 19: a message left from an earlier test
        # named a round its database no longer had, round_advance raised DoesNotExist, and the worker
        # stopped taking tasks, so the next test's import waited for ever).
        try:
            round_advance(int(round_id))
        except Exception:
            log.exception("round %s: its finish after %s failed was not dispatched", round_id, self.name)


@shared_task(name="annotate.import_run")
def import_run(job_id: int) -> str:
    from annotate.services.imports import import_run as run

    return run(job_id=job_id).status


def _then_advance(round_id: int, result: Any) -> Any:
    """After a step: let the round flow dispatch whatever comes next (it alone knows the order)."""
    from annotate.services.rounds import round_advance

    round_advance(round_id)
    return result


@shared_task(name="annotate.round_begin", base=RoundTask, **RETRY)
def round_begin(round_id: int) -> str:
    from annotate.services.planning import round_plan

    return str(_then_advance(round_id, round_plan(round_id=round_id).status))


@shared_task(name="annotate.gpu.score_shard", base=RoundTask, **RETRY)
def score_shard(round_id: int, shard: int) -> str:
    from annotate.services.scoring import score_shard_run

    return str(_then_advance(round_id, score_shard_run(round_id=round_id, shard=shard).status))


@shared_task(name="annotate.round_select", base=RoundTask, **RETRY)
def round_select(round_id: int) -> str:
    from annotate.services.selection import round_select as run

    return str(_then_advance(round_id, run(round_id=round_id).status))


@shared_task(name="annotate.round_plan_training", base=RoundTask, **RETRY)
def round_plan_training(round_id: int) -> str:
    from annotate.services.training import training_plan_run

    return str(_then_advance(round_id, training_plan_run(round_id=round_id).status))


@shared_task(name="annotate.gpu.train_adapter", base=RoundTask, **RETRY)
def train_adapter(round_id: int, arm: str, k: int) -> str:
    from annotate.services.training import train_adapter_run

    adapter = train_adapter_run(round_id=round_id, arm=arm, k=k)
    return str(_then_advance(round_id, adapter.content_hash if adapter is not None else ""))


@shared_task(name="annotate.gpu.eval_shard", base=RoundTask, **RETRY)
def eval_shard(round_id: int, shard: int) -> str:
    from annotate.services.evaluation import eval_shard_run

    return str(_then_advance(round_id, eval_shard_run(round_id=round_id, shard=shard).status))


@shared_task(name="annotate.gpu.round_evaluate", base=RoundTask, **RETRY)
def round_evaluate(round_id: int) -> str:
    from annotate.services.evaluation import round_evaluate_run

    return str(_then_advance(round_id, round_evaluate_run(round_id=round_id).status))


@shared_task(name="annotate.gpu.arms_evaluate", base=RoundTask, **RETRY)
def arms_evaluate(round_id: int) -> str:
    """A done round's deferred comparison arms on the test set (loop option arms_timing); the round's
    failure handler cannot fail a done round, and the unit's claims give the comparison up after its
    last attempt."""
    from annotate.services.evaluation import arms_evaluate_run

    return str(_then_advance(round_id, arms_evaluate_run(round_id=round_id).status))


@shared_task(name="annotate.jobs_resume", **RETRY)
def jobs_resume(started: str | None = None) -> dict[str, int | str]:
    """The job engine's resume (annotate/services/jobs.py) for a worker that started, or connected to
    the broker again, at ``started`` (ISO 8601; None: now): {job kind: units sent again}."""
    from datetime import datetime

    from annotate.services.jobs import resume_all

    return resume_all(started=datetime.fromisoformat(started) if started else None)


@shared_task(name="annotate.round_finished", **RETRY)
def round_finished(round_id: int) -> int:
    from annotate.services.notify import round_finished_run

    return len(round_finished_run(round_id=round_id))


@shared_task(name="annotate.notify_deliver", bind=True)
def notify_deliver(self: Task, delivery_id: int) -> str:
    """One notification; a failed send is retried NOTIFY_RETRIES times, waiting NOTIFY_BACKOFF_S,
    then twice as long each time; after the last the delivery is marked failed."""
    from django.conf import settings

    from annotate.services.notify import DeliveryFailed, notification_attempt

    retries = settings.NOTIFY_RETRIES
    try:
        return notification_attempt(delivery_id=delivery_id, last=self.request.retries >= retries).status
    except DeliveryFailed as exc:
        countdown = settings.NOTIFY_BACKOFF_S * 2**self.request.retries
        raise self.retry(exc=exc, countdown=countdown, max_retries=retries) from exc


class LabelErrorScanTask(Task):  # type: ignore[misc]
    """Records the scan (first argument) as failed once the task gives up: never "running" for ever."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        from annotate.services.label_errors import label_error_scan_fail

        scan_id = args[0] if args else kwargs.get("scan_id")
        if scan_id is not None:
            label_error_scan_fail(scan_id=int(scan_id), reason=f"{self.name}: {type(exc).__name__}: {exc}")


# The default queue: the scan embeds the labelled texts with the CPU encoder, like a round's selection.
@shared_task(name="annotate.label_error_scan", base=LabelErrorScanTask, **RETRY)
def label_error_scan(scan_id: int) -> str:
    from annotate.services.label_errors import label_error_scan_run

    return label_error_scan_run(scan_id=scan_id).status


@shared_task(name="annotate.gpu.engine_warm")
def engine_warm(kind: str) -> dict[str, Any]:
    from annotate.services.scoring import engine_warm as warm

    return warm(kind=kind)


@worker_ready.connect
def _warm_engine_on_start(sender: Any = None, **_: Any) -> None:
    """A gpu worker with ALANN_ENGINE_PREWARM starts its engine now, in its own pool process (its
    direct queue: config/celery.py), so its first round does not wait for the start."""
    from celery.utils import worker_direct
    from django.conf import settings

    if not settings.ENGINE_PREWARM or sender is None:
        return
    consumed = {q.name for q in sender.app.amqp.queues.consume_from.values()}
    if "gpu" in consumed:
        engine_warm.apply_async(args=[settings.ENGINE_PREWARM], queue=worker_direct(sender.hostname))
