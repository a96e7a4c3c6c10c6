"""Project reads."""

from __future__ import annotations

from annotate.models import Project


def project_by_ref(ref: str) -> Project | None:
    """A project by id (digits) or, failing that, by name: how the management commands name one."""
    project = Project.objects.filter(pk=int(ref)).first() if ref.isdigit() else None
    return project or Project.objects.filter(name=ref).first()
