"""The item browser's saved filters: a user's named query strings, per project."""

from __future__ import annotations

from typing import Any

from annotate.models import Project, SavedFilter


def saved_filter_save(*, project: Project, user: Any, name: str, query: str) -> SavedFilter:
    """Save (or, under a name already used, replace) the browser's query string; the page number is
    not part of a filter."""
    kept = "&".join(part for part in query.lstrip("?").split("&") if part and not part.startswith("page="))
    saved, _ = SavedFilter.objects.update_or_create(
        project=project, user=user, name=name.strip(), defaults={"query": kept}
    )
    return saved


def saved_filter_delete(*, project: Project, user: Any, filter_id: int) -> None:
    SavedFilter.objects.filter(project=project, user=user, pk=filter_id).delete()


__all__ = ["saved_filter_delete", "saved_filter_save"]
