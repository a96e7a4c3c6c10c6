"""Sending a task from a service: by its stable name, once the current transaction commits. Services
never import annotate/tasks.py (the tasks import the services), so the import graph has no cycle."""

from __future__ import annotations

from typing import Any

from django.db import transaction


def send_on_commit(task: str, *args: Any) -> None:
    """``task`` (a name in annotate/tasks.py) with ``args``, sent after commit. Honours
    CELERY_TASK_ALWAYS_EAGER (runs in this process) like ``Task.delay`` does."""
    from celery import current_app

    transaction.on_commit(lambda: current_app.tasks[task].apply_async(args=args))
