"""Celery entry points: take ids, re-read rows, call one service. Names are stable; GPU work is
named ``annotate.gpu.*`` and routed to the ``gpu`` queue (config/celery.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="annotate.import_run")
def import_run(job_id: int) -> str:
    from annotate.services.imports import import_run as run

    return run(job_id=job_id).status
