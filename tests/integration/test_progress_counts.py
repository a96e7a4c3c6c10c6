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
    Annotation.objects.create(
        item=item, round=labeling, annotator=user, label=Label.objects.filter(project=item.project)[0]
    )


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
