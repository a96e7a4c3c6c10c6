"""Project reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from annotate.models import Project


def project_by_ref(ref: str) -> Project | None:
    """A project by id (digits) or, failing that, by name: how the management commands name one."""
    project = Project.objects.filter(pk=int(ref)).first() if ref.isdigit() else None
    return project or Project.objects.filter(name=ref).first()


def setup_progress(*, project: Project) -> dict[str, int]:
    from annotate.models import Item, ProjectMembership, Round

    items = Item.objects.filter(project=project)
    return {
        "items": items.count(),
        "test": items.filter(is_test=True).count(),
        "members": ProjectMembership.objects.filter(project=project).count(),
        "rounds": Round.objects.filter(project=project).count(),
    }


@dataclass(frozen=True)
class ProjectCard:
    project: Project
    roles: frozenset[str]
    items: int
    labelled: int  # pool items with a final label
    round_number: int | None
    round_status: str

    @property
    def percent(self) -> int:
        return round(100 * self.labelled / self.items) if self.items else 0


def project_cards(*, user: Any) -> list[ProjectCard]:
    """The projects the user may open (annotate.roles.project_roles), each with its progress."""
    from django.db.models import Count, Q

    from annotate.models import Round
    from annotate.roles import project_roles

    projects = Project.objects.annotate(
        n_items=Count("items", filter=Q(items__is_test=False)),
        n_final=Count("items", filter=Q(items__is_test=False, items__final_label__isnull=False)),
    ).order_by("name")
    latest: dict[int, tuple[int | None, str]] = {}
    for project_id, round_number, round_status in Round.objects.order_by("project_id", "number").values_list(
        "project_id", "number", "status"
    ):
        latest[project_id] = (round_number, round_status)
    cards = []
    for project in projects:
        roles = project_roles(user, project.pk)
        if not roles:
            continue
        number, status = latest.get(project.pk, (None, ""))
        cards.append(
            ProjectCard(project, frozenset(roles), project.n_items, project.n_final, number, status)  # type: ignore[attr-defined]
        )
    return cards
