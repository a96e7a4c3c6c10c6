"""Project writes: creation with its label set, the fixed random test set (capped against the pool,
redrawn on request until round 1 trains) and the fixed stop set."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.db import transaction

from annotate.models import Item, Label, Project, StopSetItem
from annotate.selectors.projects import test_set_capped, test_set_fixed


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
    """Mark a fixed uniform random sample of the pool as the test set: ``size`` (the project's
    test-set size) items, never more than MAX_TEST_SHARE of them (selectors.projects.test_set_capped),
    so a small upload still leaves a pool to label. Idempotent: once a project has a test set this
    leaves it as it is (only ``test_set_redraw`` changes it, before round 1 trains). Returns its size."""
    existing = Item.objects.filter(project=project, is_test=True).count()
    if existing:
        return existing
    ids = Item.objects.filter(project=project).values_list("id", flat=True)
    return _mark_test_sample(project, ids, size if size is not None else project.test_set_size, seed)


def _mark_test_sample(project: Project, candidates: Iterable[int], size: int, seed: int | None) -> int:
    ids = np.array(sorted(candidates), dtype=np.int64)
    n = test_set_capped(requested=size, n_items=len(ids))
    if n == 0:
        return 0
    rng = np.random.default_rng(project.seed if seed is None else seed)
    chosen = rng.choice(ids, size=n, replace=False)
    for start in range(0, n, 5000):  # SQLite caps bound parameters per statement
        Item.objects.filter(id__in=chosen[start : start + 5000].tolist()).update(is_test=True)
    return n


@dataclass(frozen=True)
class TestSetRedraw:
    __test__ = False  # not a pytest class

    before: int
    after: int
    labelled_returned: int  # labelled test items that went back to the pool (their labels kept)


@transaction.atomic
def test_set_redraw(*, project: Project) -> TestSetRedraw:
    """Draw the test set again at the project's current size, while nothing has been measured on it
    (no round has trained: selectors.projects.test_set_fixed). Items already in a batch or in the
    stop set are never drawn, so no annotator's batch item turns into a test item under them."""
    from annotate.models import BatchItem

    Project.objects.select_for_update().filter(pk=project.pk).first()  # one redraw at a time per project
    fixed = test_set_fixed(project=project)
    if fixed:
        raise ProjectError(fixed)
    old = Item.objects.filter(project=project, is_test=True)
    before = old.count()
    labelled = old.filter(final_label__isnull=False).count()
    old.update(is_test=False)
    taken = set(BatchItem.objects.filter(round__project=project).values_list("item_id", flat=True))
    taken |= set(StopSetItem.objects.filter(project=project).values_list("item_id", flat=True))
    candidates = (i for i in Item.objects.filter(project=project).values_list("id", flat=True) if i not in taken)
    after = _mark_test_sample(project, candidates, project.test_set_size, None)
    returned = labelled - Item.objects.filter(project=project, is_test=True, final_label__isnull=False).count()
    return TestSetRedraw(before=before, after=after, labelled_returned=max(returned, 0))


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


@transaction.atomic
def project_archive(*, project: Project, archived: bool) -> Project:
    """Archive (off the home page's list; nothing deleted, nothing stops) or bring back a project."""
    from django.utils import timezone

    project.archived_at = timezone.now() if archived else None
    project.save(update_fields=["archived_at", "updated_at"])
    return project


def _busy_work(project: Project) -> str:
    """What a worker may be doing for the project right now ("" when nothing): deleting its rows under
    a running task would fail that task halfway."""
    from annotate.models import AutolabelRun, Calibration, ImportJob, Round

    running = Round.objects.filter(project=project, status__in=Round.ACTIVE_STATUSES).exclude(
        status=Round.Status.LABELING
    )
    if running.exists():
        return f"round {running.first().number} is {running.first().status}"  # type: ignore[union-attr]
    busy = ("pending", "running")
    if ImportJob.objects.filter(project=project, status__in=busy).exists():
        return "an import is running"
    if Calibration.objects.filter(project=project, status__in=busy).exists():
        return "a calibration is running"
    if AutolabelRun.objects.filter(project=project, status__in=busy).exists():
        return "an auto-labelling run is running"
    return ""


def project_delete(*, project: Project, confirm_name: str) -> str:
    """Delete a project with everything in it (items, labels, rounds, adapters and score files on
    disk), once ``confirm_name`` is exactly its name. Refused, deleting nothing, while a worker
    works for it. Returns the deleted project's name."""
    from django.conf import settings

    from annotate.models import AutolabelRun, Calibration, Round
    from annotate.services.round_state import autolabel_run_dir, round_dir, round_score_dir

    if confirm_name.strip() != project.name:
        raise ProjectError(f"type the project's name exactly ({project.name!r}) to delete it")
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        busy = _busy_work(project)
        if busy:
            raise ProjectError(f"{busy}; wait until it has finished (or archive the project), then delete it")
        folders = [round_dir(r) for r in Round.objects.filter(project=project)]
        folders += [round_score_dir(r) for r in Round.objects.filter(project=project)]
        folders += [autolabel_run_dir(r) for r in AutolabelRun.objects.filter(project=project)]
        folders += [Path(settings.UPLOAD_DIR) / f"p{project.pk}", Path(settings.ADAPTER_DIR) / f"project_{project.pk}"]
        # Labels are PROTECTed against the rows that use them: those go first, the project last.
        AutolabelRun.objects.filter(project=project).delete()
        Calibration.objects.filter(project=project).delete()
        Item.objects.filter(project=project).delete()
        name = project.name
        project.delete()
        transaction.on_commit(lambda: _remove_folders(folders))
    return name


def _remove_folders(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
