"""A label saved or deleted bumps its project's ``updated_at``: the version under which the web
processes cache the project's label set (annotate.selectors.labeling.project_labels)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from annotate.models import Label, Project


def _bump_project(sender: type[Label], instance: Label, **kwargs: Any) -> None:
    Project.objects.filter(pk=instance.project_id).update(updated_at=timezone.now())


def connect() -> None:
    post_save.connect(_bump_project, sender=Label, dispatch_uid="alann-label-saved")
    post_delete.connect(_bump_project, sender=Label, dispatch_uid="alann-label-deleted")
