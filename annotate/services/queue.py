"""Sending a task from a service: by its stable name, once the current transaction commits. Services
never import annotate/tasks.py (the tasks import the services), so the import graph has no cycle."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)


def registered(task: str) -> Any:
    """The task registered under ``task``. A process that imported no task module yet (the web
    process, a test) has the app's autodiscovery import them first."""
    from celery import current_app

    if task not in current_app.tasks:
        current_app.loader.import_default_modules()  # fires autodiscovery (annotate.tasks, tasks_autolabel)
    return current_app.tasks[task]


def send_on_commit(task: str, *args: Any, best_effort: bool = False) -> None:
    """``task`` (a name in annotate/tasks.py) with ``args``, sent after commit. Honours
    CELERY_TASK_ALWAYS_EAGER (runs in this process) like ``Task.delay`` does. ``best_effort``: a
    failure to send (no broker) is logged, not raised, for work the caller must not fail for."""

    def send() -> None:
        try:
            registered(task).apply_async(args=args)
        except Exception:
            if not best_effort:
                raise
            log.exception("%s%s was not sent", task, args)

    transaction.on_commit(send)
