"""Celery entry points of the auto-labelling job (thin: ids in, one service call). Stable names;
``annotate.gpu.*`` run on the gpu queue. Every body is idempotent (guarded status updates, claims,
upserts keyed by (item, prompt hash, adapter set)), so redelivery is harmless. A worker start
re-enqueues what pending calibrations and running runs still need (the job engine's resume,
annotate/services/jobs.py, sent by annotate/tasks.py)."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from annotate.tasks import RETRY


class CalibrationTask(Task):  # type: ignore[misc]
    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        from annotate.services.autolabel import calibration_fail

        calibration_fail(calibration_id=int(args[0]), reason=f"{self.name}: {type(exc).__name__}: {exc}")


class RunTask(Task):  # type: ignore[misc]
    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        from annotate.services.autolabel import run_fail

        run_fail(run_id=int(args[0]), reason=f"{self.name}: {type(exc).__name__}: {exc}")


@shared_task(name="annotate.gpu.autolabel_calibrate", base=CalibrationTask, **RETRY)
def calibrate(calibration_id: int) -> str:
    from annotate.services.autolabel import calibration_run

    return calibration_run(calibration_id=calibration_id).status


@shared_task(name="annotate.gpu.autolabel_plan", base=RunTask, **RETRY)
def plan(run_id: int) -> str:
    from annotate.services.autolabel import run_plan

    return run_plan(run_id=run_id).status


# A shard that raises goes back to pending inside the service (attempts are counted by its claims),
# so a failing shard does not fail the run: after MAX_SHARD_ATTEMPTS its items become dead letters.
@shared_task(name="annotate.gpu.autolabel_shard", **RETRY)
def shard(run_id: int, shard: int) -> str:
    from annotate.services.autolabel import shard_run

    return shard_run(run_id=run_id, shard=shard).status


@shared_task(name="annotate.gpu.autolabel_retry", **RETRY)
def retry(dead_letter_ids: list[int]) -> int:
    from annotate.services.autolabel import dead_letter_retry_run

    return dead_letter_retry_run(dead_letter_ids=dead_letter_ids)
