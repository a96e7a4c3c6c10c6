"""Project writes: creation with its label set, the fixed random test set and the fixed stop set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import transaction

from annotate.models import Item, Label, Project, StopSetItem


@dataclass(frozen=True)
class LabelInput:
    name: str
    code: str
    description: str = ""


class ProjectError(ValueError):
    pass


@transaction.atomic
def project_create(*, name: str, labels: Sequence[LabelInput], created_by: Any = None, **settings: Any) -> Project:
    """Create a project and its closed label set (codes must already be checked against the tokenizer)."""
    if not labels:
        raise ProjectError("a project needs at least one label")
    names = [label.name for label in labels]
    if len(set(names)) != len(names):
        raise ProjectError(f"label names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    project = Project.objects.create(name=name, created_by=created_by, **settings)
    Label.objects.bulk_create(
        Label(project=project, name=lab.name, code=lab.code, description=lab.description, order=i)
        for i, lab in enumerate(labels)
    )
    return project


@transaction.atomic
def test_set_draw(*, project: Project, size: int | None = None, seed: int | None = None) -> int:
    """Mark a fixed uniform random sample of the pool as the test set. Idempotent: once a project has a
    test set it is never redrawn (it must stay fixed for the learning curves to mean anything).
    Returns the test-set size."""
    existing = Item.objects.filter(project=project, is_test=True).count()
    if existing:
        return existing
    ids = np.array(sorted(Item.objects.filter(project=project).values_list("id", flat=True)), dtype=np.int64)
    n = min(size if size is not None else project.test_set_size, len(ids))
    if n == 0:
        return 0
    rng = np.random.default_rng(project.seed if seed is None else seed)
    chosen = rng.choice(ids, size=n, replace=False)
    for start in range(0, n, 5000):  # SQLite caps bound parameters per statement
        Item.objects.filter(id__in=chosen[start : start + 5000].tolist()).update(is_test=True)
    return n


# The stop set's own random stream: the same project seed draws a test set and a stop set that
# do not depend on each other.
STOP_SET_STREAM = "stop_set"


@transaction.atomic
def stop_set_draw(*, project: Project, size: int) -> list[int]:
    """The project's stop set (item ids, ascending), drawn on the first call: a uniform sample of
    ``size`` non-test items (capped by their number), seeded by the project. Never redrawn, whatever
    is imported or labelled later, and whatever ``size`` says then: κ between rounds' predictions only
    means something on a fixed set (Bloodgood & Vijay-Shanker 2009). ``size`` 0 (the criterion off)
    returns [] and draws nothing."""
    from scoring.pipeline import step_rng

    if size <= 0:
        return []
    Project.objects.select_for_update().filter(pk=project.pk).first()  # one drawer at a time per project
    existing = sorted(StopSetItem.objects.filter(project=project).values_list("item_id", flat=True))
    if existing:
        return existing
    ids = np.array(
        sorted(Item.objects.filter(project=project, is_test=False).values_list("id", flat=True)), dtype=np.int64
    )
    if len(ids) == 0:
        return []
    chosen = np.sort(step_rng(project.seed, STOP_SET_STREAM).choice(ids, size=min(size, len(ids)), replace=False))
    # ignore_conflicts: where the lock is a no-op (SQLite serialises writers anyway), a second drawer
    # draws the same ids from the same pool.
    StopSetItem.objects.bulk_create(
        [StopSetItem(project=project, item_id=int(i)) for i in chosen], ignore_conflicts=True, batch_size=2000
    )
    return [int(i) for i in chosen]
