"""Project reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from annotate.models import Project


def project_by_ref(ref: str) -> Project | None:
    """A project by id (digits) or, failing that, by name: how the management commands name one."""
    project = Project.objects.filter(pk=int(ref)).first() if ref.isdigit() else None
    return project or Project.objects.filter(name=ref).first()


# The test set never takes more than this share of the texts: the rest is the pool the rounds
# select from. 0.3 leaves 70 % to label on a small upload (300 rows: 90 test items, 210 to label)
# and never binds on a real pool (500 of 5,000 texts is 10 %).
MAX_TEST_SHARE = 0.3


def test_set_capped(*, requested: int, n_items: int) -> int:
    """How many test items a draw over ``n_items`` texts makes when ``requested`` are asked for."""
    return max(0, min(requested, int(n_items * MAX_TEST_SHARE)))


def test_set_fixed(*, project: Project) -> str:
    """Why the test set can no longer be redrawn ("" while it can): once a round has trained, the
    learning curve has points measured on it, and a new test set would make them incomparable."""
    from annotate.models import AdapterVersion, Round

    trained = Round.objects.filter(
        project=project, status__in=[Round.Status.TRAINING, Round.Status.EVALUATING, Round.Status.DONE]
    )
    if trained.exists() or AdapterVersion.objects.filter(project=project).exists():
        return "the test set is fixed once round 1 has trained (the learning curve is measured on it)"
    return ""


@dataclass(frozen=True)
class TestSetState:
    __test__ = False  # not a pytest class

    requested: int
    drawn: int
    n_items: int  # texts in the project, test items included
    fixed: str  # why it can no longer be redrawn; "" while it can

    @property
    def cap(self) -> int:
        return int(self.n_items * MAX_TEST_SHARE)

    @property
    def capped(self) -> bool:
        return self.requested > self.cap

    @property
    def rows_for_full(self) -> int:
        """The fewest texts whose cap is the requested size."""
        return math.ceil(self.requested / MAX_TEST_SHARE)

    @property
    def share_percent(self) -> int:
        return round(100 * MAX_TEST_SHARE)


def test_set_state(*, project: Project) -> TestSetState:
    from annotate.models import Item

    items = Item.objects.filter(project=project)
    return TestSetState(
        requested=project.test_set_size,
        drawn=items.filter(is_test=True).count(),
        n_items=items.count(),
        fixed=test_set_fixed(project=project),
    )


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
    """The projects the user may open (annotate.roles.project_roles), each with its progress;
    archived projects are left out (``archived_projects``)."""
    from django.db.models import Count, Q

    from annotate.models import Round
    from annotate.roles import project_roles

    projects = (
        Project.objects.annotate(
            n_items=Count("items", filter=Q(items__is_test=False)),
            n_final=Count("items", filter=Q(items__is_test=False, items__final_label__isnull=False)),
        )
        .filter(archived_at__isnull=True)
        .order_by("name")
    )
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


def archived_projects(*, user: Any) -> list[Project]:
    """Archived projects the user is ML staff in (they may bring them back or delete them)."""
    from annotate.roles import ML, project_roles

    archived = Project.objects.filter(archived_at__isnull=False).order_by("name")
    return [project for project in archived if ML in project_roles(user, project.pk)]
