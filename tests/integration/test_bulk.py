"""Issue 32, problem 8: the item browser's bulk actions. Send to review, assign to an annotator (the
items are served to them first and kept for them) and relabel, each drafted (the count and what it
leaves alone), applied with one history event per item, and undone exactly (every item as it was),
all or none. An annotator cannot act in bulk."""

from __future__ import annotations

from typing import Any

import pytest

from annotate.models import Adjudication, BulkAction, Item, ItemEvent, Lease, Project, Skip
from annotate.selectors.items import browse_items
from annotate.services.accounts import user_create
from annotate.services.bulk import BulkRefused, UndoRefused, bulk_apply, bulk_draft, bulk_undo
from annotate.services.labeling import label_submit, next_item_for, skip_submit
from annotate.services.review import adjudicate
from tests.integration import test_history
from tests.integration.test_review import fast_passwords, label  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db
project, people = test_history.project, test_history.people  # the fixtures: three items, two annotators, two leads


def _state(project: Project) -> dict[int, Any]:
    """Everything a bulk action may change, per item: outcome columns, adjudication, skips, leases."""
    rows = {}
    for item in Item.objects.filter(project=project).order_by("id"):
        adjudication = Adjudication.objects.filter(item=item).values_list("label_id", "decided_by_id", "note").first()
        rows[item.pk] = (
            item.final_label_id,
            item.state,
            item.review_reason,
            item.finalized_at,
            adjudication,
            sorted(Skip.objects.filter(item=item).values_list("annotator_id", "resolved")),
            sorted(Lease.objects.filter(item=item).values_list("annotator_id", "expires_at", "assigned")),
        )
    return rows


def _all(project: Project) -> list[int]:
    return list(browse_items(project=project, filters={}).values_list("id", flat=True))


def test_problem_8_bulk_relabel_then_undo_restores_exactly(project: Project, people: dict[str, Any]) -> None:
    alice, lena = people["alice"], people["lena"]
    first = next_item_for(project=project, annotator=alice)
    assert first is not None
    label_submit(item=first, annotator=alice, label=label(project, "sports"))  # needs 2 labels: still open
    held = next_item_for(project=project, annotator=alice)
    assert held is not None
    skip_submit(item=held, annotator=alice, reason="unclear")
    decided = Item.objects.filter(project=project).exclude(pk__in=[first.pk, held.pk]).get()
    adjudicate(item=decided, label=label(project, "politics"), lead=people["leo"], note="leo's call")
    before = _state(project)

    draft = bulk_draft(
        project=project, actor=lena, kind="relabel", item_ids=_all(project), label=label(project, "science")
    )
    assert len(draft.item_ids) == 3 and draft.left_out == {}
    assert _state(project) == before  # a draft changes nothing
    applied = bulk_apply(project=project, action_id=draft.pk, actor=lena)
    assert applied.status == "applied" and len(applied.event_ids) == 3
    assert set(Item.objects.filter(project=project).values_list("final_label__name", flat=True)) == {"science"}
    assert ItemEvent.objects.filter(pk__in=applied.event_ids, kind="decision", actor=lena).count() == 3

    undone = bulk_undo(project=project, action_id=draft.pk, actor=lena)
    assert undone.status == "undone"
    assert _state(project) == before
    assert ItemEvent.objects.filter(undoes_id__in=applied.event_ids, kind="undo").count() == 3
    with pytest.raises(BulkRefused, match="undone already"):
        bulk_undo(project=project, action_id=draft.pk, actor=lena)


def test_problem_8_bulk_send_to_review_leaves_decided_items_and_undoes(
    project: Project, people: dict[str, Any]
) -> None:
    lena = people["lena"]
    decided = Item.objects.filter(project=project).order_by("id").last()
    assert decided is not None
    adjudicate(item=decided, label=label(project, "sports"), lead=lena)
    before = _state(project)
    draft = bulk_draft(project=project, actor=lena, kind="review", item_ids=_all(project), note="check the wording")
    assert len(draft.item_ids) == 2 and draft.left_out == {"have a final label": 1}
    bulk_apply(project=project, action_id=draft.pk, actor=lena)
    review = Item.objects.filter(project=project, state="review")
    assert review.count() == 2 and set(review.values_list("review_reason", flat=True)) == {"check the wording"}
    assert next_item_for(project=project, annotator=people["alice"]) is None  # out of the annotators' queue
    bulk_undo(project=project, action_id=draft.pk, actor=lena)
    assert _state(project) == before


def test_problem_8_assigned_items_are_served_first_and_kept(project: Project, people: dict[str, Any]) -> None:
    alice, bob, lena = people["alice"], people["bob"], people["lena"]
    held = next_item_for(project=project, annotator=alice)  # alice holds the first item (rank 0)
    assert held is not None
    last = Item.objects.filter(project=project).order_by("id").last()
    assert last is not None
    before = _state(project)
    draft = bulk_draft(project=project, actor=lena, kind="assign", item_ids=[held.pk, last.pk], assignee=bob)
    bulk_apply(project=project, action_id=draft.pk, actor=lena)
    # Bob gets the assigned items first, oldest assignment first (then by id), and keeps them.
    served = next_item_for(project=project, annotator=bob)
    assert served is not None and served.pk == held.pk
    label_submit(item=served, annotator=bob, label=label(project, "sports"))
    assert next_item_for(project=project, annotator=bob).pk == last.pk  # type: ignore[union-attr]
    # Alice lost the item she held; the one kept for bob is not handed to her either.
    mine = next_item_for(project=project, annotator=alice)
    assert mine is not None and mine.pk not in (last.pk,)
    assert Lease.objects.filter(item=last, annotator=bob, assigned=True).exists()  # alice taking one kept it
    with pytest.raises(UndoRefused, match="1 of the 2 items changed since"):
        bulk_undo(project=project, action_id=draft.pk, actor=lena)  # bob labelled one: all or none

    fresh = bulk_draft(project=project, actor=lena, kind="assign", item_ids=[last.pk], assignee=alice)
    state = _state(project)
    bulk_apply(project=project, action_id=fresh.pk, actor=lena)
    bulk_undo(project=project, action_id=fresh.pk, actor=lena)
    assert _state(project) == state and state != before


def test_problem_8_an_annotator_cannot_act_in_bulk(project: Project, people: dict[str, Any]) -> None:
    alice = people["alice"]
    for kind, to in (("relabel", label(project, "sports")), ("review", None)):
        with pytest.raises(BulkRefused, match="only leads and ML staff"):
            bulk_draft(project=project, actor=alice, kind=kind, item_ids=_all(project), label=to)
    draft = bulk_draft(
        project=project, actor=people["lena"], kind="relabel", item_ids=_all(project), label=label(project, "sports")
    )
    with pytest.raises(BulkRefused, match="only leads and ML staff"):
        bulk_apply(project=project, action_id=draft.pk, actor=alice)
    assert BulkAction.objects.get(pk=draft.pk).status == "draft"
    assert not Item.objects.filter(project=project, final_label__isnull=False).exists()


def test_problem_8_an_ml_user_may_relabel_and_a_lead_may_not_decide_own_items(
    project: Project, people: dict[str, Any]
) -> None:
    ml = user_create(username="mia", password="pw-12345678", roles=["ml"])
    lena = people["lena"]
    item = next_item_for(project=project, annotator=lena)
    assert item is not None
    label_submit(item=item, annotator=lena, label=label(project, "sports"))
    draft = bulk_draft(
        project=project, actor=lena, kind="relabel", item_ids=_all(project), label=label(project, "science")
    )
    assert item.pk not in draft.item_ids and draft.left_out == {"were labelled by you (another lead decides them)": 1}
    by_ml = bulk_draft(
        project=project, actor=ml, kind="relabel", item_ids=_all(project), label=label(project, "science")
    )
    bulk_apply(project=project, action_id=by_ml.pk, actor=ml)
    assert Item.objects.filter(project=project, final_label__name="science").count() == 3


def test_problem_8_saved_filters_are_per_user_and_replace_by_name(project: Project, people: dict[str, Any]) -> None:
    from annotate.selectors.items import saved_filters
    from annotate.services.saved_filters import saved_filter_delete, saved_filter_save

    lena, leo = people["lena"], people["leo"]
    saved_filter_save(project=project, user=lena, name="unsure", query="?sort=confidence&page=3&state=open")
    saved_filter_save(project=project, user=lena, name="unsure", query="sort=uncertainty")
    theirs = saved_filter_save(project=project, user=leo, name="unsure", query="sort=recent")
    assert [(f.name, f.query) for f in saved_filters(project=project, user=lena)] == [("unsure", "sort=uncertainty")]
    saved_filter_delete(project=project, user=lena, filter_id=theirs.pk)  # not hers: nothing happens
    assert saved_filters(project=project, user=leo).get().query == "sort=recent"
    first = saved_filter_save(project=project, user=leo, name="paged", query="?sort=confidence&page=3&state=open")
    assert first.query == "sort=confidence&state=open"  # the page is not part of a filter


def test_problem_8_browser_sorts_by_disagreement_and_by_date(project: Project, people: dict[str, Any]) -> None:
    from annotate.selectors.items import ordered_ids

    alice, bob = people["alice"], people["bob"]
    split = next_item_for(project=project, annotator=alice)  # the two-annotator item
    assert split is not None and next_item_for(project=project, annotator=bob) == split
    label_submit(item=split, annotator=alice, label=label(project, "sports"))
    label_submit(item=split, annotator=bob, label=label(project, "politics"))
    one = next_item_for(project=project, annotator=alice)
    assert one is not None
    label_submit(item=one, annotator=alice, label=label(project, "science"))
    untouched = Item.objects.filter(project=project).exclude(pk__in=[split.pk, one.pk]).get()
    assert list(ordered_ids(project=project, filters={"sort": "disagreement"})) == [split.pk, one.pk, untouched.pk]
    assert list(ordered_ids(project=project, filters={"sort": "recent"})) == [one.pk, split.pk, untouched.pk]
    assert list(ordered_ids(project=project, filters={})) == sorted([split.pk, one.pk, untouched.pk])


def test_a_bulk_relabel_of_test_set_items_is_warned_about(project: Project, people: dict[str, Any]) -> None:
    """Found with the README tour: a bulk relabel changed test-set items without a word. The confirmation
    now says how many of the items are in the fixed test set; without any, it says nothing."""
    from django.test import Client
    from django.urls import reverse

    ids = _all(project)
    Item.objects.filter(pk=ids[0]).update(is_test=True)
    client = Client()
    client.force_login(people["lena"])

    def confirm(item_ids: list[int]) -> str:
        draft = bulk_draft(project=project, actor=people["lena"], kind="relabel", item_ids=item_ids,
                           label=label(project, "science"))  # fmt: skip
        return client.get(reverse("item_bulk_confirm", args=[project.pk, draft.pk])).content.decode()

    page = confirm(ids)
    assert 'id="bulk-test-warning"' in page and "1 of them is a test-set item" in page
    assert 'id="bulk-test-warning"' not in confirm(ids[1:])
