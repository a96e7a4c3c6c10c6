"""Team progress counts: stale-while-revalidate. Once counted, a request gets the cached counts at
once and a stale entry is recounted by one background thread, so the hot request never waits for the
recount (the tail of its latency on a 10,000-item batch)."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.test import override_settings

from annotate.models import Annotation, BatchItem, Item, Label, Project, Round
from annotate.selectors import labeling as selectors
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def setup() -> tuple[Project, Round, list[Item], User]:
    project = project_create(name="counts", labels=[LabelInput("yes", "A"), LabelInput("no", "B")])
    items = Item.objects.bulk_create(
        Item(project=project, external_id=f"i{i}", text=f"text {i}", text_hash=f"h{i}") for i in range(5)
    )
    labeling = Round.objects.create(project=project, number=1, status=Round.Status.LABELING)
    BatchItem.objects.bulk_create(
        BatchItem(round=labeling, item=it, source="random", rank=r) for r, it in enumerate(items)
    )
    user = User.objects.create_user("ann")
    user.groups.add(Group.objects.get_or_create(name="annotator")[0])
    cache.clear()
    return project, labeling, items, user


def label(item: Item, labeling: Round, user: User) -> None:
    """A label that finishes its item (one label needed), as label_submit stores it."""
    chosen = Label.objects.filter(project=item.project)[0]
    Annotation.objects.create(item=item, round=labeling, annotator=user, label=chosen)
    Item.objects.filter(pk=item.pk).update(final_label=chosen)


def age_entry(project: Project, seconds: float) -> None:
    key = f"alann:progress:{project.pk}:{project.created_at.timestamp()}"
    counts, at = cache.get(key)
    cache.set(key, (counts, at - seconds), None)


@override_settings(PROGRESS_RECOUNT_IN_BACKGROUND=True)
def test_stale_counts_are_served_then_recounted_in_the_background(setup: tuple) -> None:
    project, labeling, items, user = setup
    assert selectors.progress_for(project=project, annotator=user).round.done == 0  # first count: synchronous
    other = User.objects.create_user("bob")
    label(items[0], labeling, other)  # someone else's label: the team count may lag
    assert selectors.progress_for(project=project, annotator=user).round.done == 0  # fresh cache: no recount
    label(items[1], labeling, user)
    mine = selectors.progress_for(project=project, annotator=user)
    assert mine.mine == 1  # the annotator's own: live
    assert (mine.round.done, mine.batch.done) == (1, 1)  # the team bars never read less than my own work

    age_entry(project, 60)
    started = time.monotonic()
    stale = selectors.progress_for(project=project, annotator=user)
    assert stale.round.done == 1  # served at once (only my own label shows), not recounted in the request
    deadline = started + 10
    while selectors.progress_for(project=project, annotator=user).round.done != 2:
        assert time.monotonic() < deadline, "the background recount never stored the new counts"
        time.sleep(0.05)
    assert not selectors._REFRESHING  # the thread finished and released its key


@override_settings(PROGRESS_RECOUNT_IN_BACKGROUND=False)
def test_synchronous_mode_recounts_a_stale_entry_in_the_request(setup: tuple) -> None:
    project, labeling, items, user = setup
    selectors.progress_for(project=project, annotator=user)
    label(items[0], labeling, user)
    age_entry(project, 60)
    assert selectors.progress_for(project=project, annotator=user).round.done == 1


@override_settings(PROGRESS_RECOUNT_IN_BACKGROUND=True)
def test_problem_10_a_new_round_never_shows_the_previous_batch_counts(setup: tuple) -> None:
    """Issue 32, problem 10: the first item of a round read "Batch 0 / 0" (counts cached before the
    round opened) or the previous round's "5 / 5" (cached while it labelled)."""
    project, labeling, items, user = setup
    Round.objects.filter(pk=labeling.pk).update(status=Round.Status.SELECTING)
    assert selectors.progress_for(project=project, annotator=user).batch.total == 0  # no batch open: cached
    Round.objects.filter(pk=labeling.pk).update(status=Round.Status.LABELING)
    first = selectors.progress_for(project=project, annotator=user)  # the cache entry is seconds old
    assert (first.batch.done, first.batch.total) == (0, 5)
    assert first.batch_status is not None and first.batch_status.round_number == 1

    for item in items:
        label(item, labeling, user)
    assert (selectors.progress_for(project=project, annotator=user, fresh=True).batch.done) == 5
    Round.objects.filter(pk=labeling.pk).update(status=Round.Status.DONE)
    second = Round.objects.create(project=project, number=2, status=Round.Status.LABELING)
    new_items = Item.objects.bulk_create(
        Item(project=project, external_id=f"n{i}", text=f"new {i}", text_hash=f"n{i}") for i in range(3)
    )
    BatchItem.objects.bulk_create(
        BatchItem(round=second, item=it, source="random", rank=r) for r, it in enumerate(new_items)
    )
    shown = selectors.progress_for(project=project, annotator=user)
    assert (shown.batch.done, shown.batch.total, shown.mine_round) == (0, 3, 0)
    assert shown.batch_status is not None and shown.batch_status.round_number == 2


def test_problem_10_batch_bar_counts_what_the_lead_and_ml_pages_count(setup: tuple) -> None:
    """Issue 32, problem 10: "Batch: 5 / 5 items done" beside "3 of 5 … 2 wait for a lead": items whose
    annotators disagree, or that were skipped, are not done for the batch bar either."""
    from annotate.selectors.progress import batch_status
    from annotate.services.labeling import label_submit, next_item_for, skip_submit

    project, labeling, items, user = setup
    Item.objects.filter(pk=items[0].pk).update(required_labels=2)
    bob = User.objects.create_user("bob")
    yes, no = Label.objects.filter(project=project).order_by("order", "id")
    for n in range(len(items)):
        item = next_item_for(project=project, annotator=user)
        assert item is not None
        if n < len(items) - 1:
            label_submit(item=item, annotator=user, label=yes)
        else:
            skip_submit(item=item, annotator=user)
    disputed = next_item_for(project=project, annotator=bob)
    assert disputed is not None and disputed.pk == items[0].pk
    label_submit(item=disputed, annotator=bob, label=no)

    status = batch_status(round=labeling)
    assert (status.finished, status.disagreements, status.waiting_for_lead) == (3, 1, 2)
    shown = selectors.progress_for(project=project, annotator=user)
    assert (shown.batch.done, shown.batch.total) == (status.finished, status.size) == (3, 5)
    assert shown.batch_status == status
