"""Reads for the notifications a project sent (annotate/services/notify.py) and its export snapshots."""

from __future__ import annotations

from annotate.models import ExportSnapshot, NotificationDelivery, Project

RECENT = 20


def recent_deliveries(*, project: Project, limit: int = RECENT) -> list[NotificationDelivery]:
    """The newest deliveries first, failed and pending ones included (the setup page's table)."""
    return list(NotificationDelivery.objects.filter(project=project).select_related("round")[:limit])


def failed_deliveries(*, project: Project, limit: int = RECENT) -> int:
    """How many of the recent deliveries (the ones the setup page lists) failed for good."""
    return sum(d.status == NotificationDelivery.Status.FAILED for d in recent_deliveries(project=project, limit=limit))


def round_snapshots(*, project: Project) -> list[ExportSnapshot]:
    """Every export snapshot of the project, the latest round first (the export page's list)."""
    return list(ExportSnapshot.objects.filter(project=project).select_related("round").order_by("-round__number"))
