"""A round's batch finishes by itself: when every batch item is labelled, decided by a lead (also
'unlabelable') or returned to the pool after a skip, the round leaves labelling for training without
anyone pressing "Retrain now"; until then the ML page says what is left and what to press, and the
annotator's empty queue says who the rest waits for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from annotate.models import Annotation, BatchItem, Item, Label, Project, Round
from annotate.selectors.labeling import empty_queue_reason
from annotate.selectors.progress import batch_items_finished, batch_status
from annotate.services.labeling import label_submit, next_item_for, skip_submit
from annotate.services.projects import LabelInput, project_create
from annotate.services.review import ReviewError, adjudicate, item_return_to_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _user(name: str, role: str) -> User:
    user = User.objects.create_user(name, password="pw-12345678")
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def setup(tiny_llama_dir: Path) -> dict[str, Any]:
    project = project_create(
        name="finish",
        labels=[LabelInput("yes", "A"), LabelInput("no", "B")],
        model_dir=str(tiny_llama_dir),
        auto_retrain_share=1.0,
        ensemble_k=1,
    )
    items = Item.objects.bulk_create(
        Item(
            project=project,
            external_id=f"i{i}",
            text=f"text {i}",
            text_hash=f"h{i}",
            required_labels=2 if i == 2 else 1,
        )
        for i in range(4)
    )
    labeling = Round.objects.create(project=project, number=1, status=Round.Status.LABELING, strategy="cold-start")
    BatchItem.objects.bulk_create(
        BatchItem(round=labeling, item=it, source="cold", rank=r) for r, it in enumerate(items)
    )
    return {
        "project": project,
        "round": labeling,
        "items": items,
        "alice": _user("alice", "annotator"),
        "bob": _user("bob", "annotator"),
        "lena": _user("lena", "lead"),
        "mia": _user("mia", "ml"),
    }


def _label(project: Project, name: str) -> Label:
    return project.labels.get(name=name)


def _status(labeling: Round) -> str:
    return Round.objects.get(pk=labeling.pk).status


def _take_and_label(project: Project, user: User, name: str) -> Item:
    item = next_item_for(project=project, annotator=user)
    assert item is not None
    label_submit(item=item, annotator=user, label=_label(project, name))
    return item


def test_a_batch_with_skips_and_a_disagreement_finishes_by_itself(setup: dict[str, Any]) -> None:
    project, labeling, items = setup["project"], setup["round"], setup["items"]
    alice, bob, lena, mia = setup["alice"], setup["bob"], setup["lena"], setup["mia"]
    assert _take_and_label(project, alice, "yes") == items[0]
    skipped = next_item_for(project=project, annotator=alice)
    assert skipped is not None and skipped == items[1]
    skip_submit(item=skipped, annotator=alice, reason="two topics")
    assert _take_and_label(project, alice, "yes") == items[2]  # overlap item: needs a second annotator
    assert _take_and_label(project, alice, "no") == items[3]
    assert _take_and_label(project, bob, "yes") == items[1]  # bob labels the item alice skipped
    assert next_item_for(project=project, annotator=alice) is None

    status = batch_status(round=labeling)
    assert (status.finished, status.need_labels, status.skipped, status.disagreements) == (3, 1, 0, 0)
    reason = empty_queue_reason(project=project, annotator=alice, queue="batch")
    assert "3 of 4 batch items are done" in reason and "second annotator" in reason

    # The ML page says what is left and what to press; the refusal survives the live refresh.
    ml = Client()
    ml.force_login(mia)
    refusal = ml.post(reverse("ml_round_start", args=[project.pk]), headers={"HX-Request": "true"})
    text = refusal.content.decode()
    assert 'id="round-message" hx-swap-oob="outerHTML"' in text
    assert "round 1 is still labeling" in text and "3 of 4 batch items are done" in text
    assert "1 still needs annotators" in text and "Retrain now" in text
    polled = ml.get(reverse("ml_rounds", args=[project.pk]), headers={"HX-Request": "true"}).content.decode()
    assert 'id="round-message"' not in polled  # the refresh never touches the message

    assert _take_and_label(project, bob, "no") == items[2]  # a disagreement: waits for a lead
    status = batch_status(round=labeling)
    assert (status.finished, status.disagreements) == (3, 1) and _status(labeling) == "labeling"
    adjudicate(item=items[2], label=_label(project, "no"), lead=lena)
    assert _status(labeling) == "training"  # nobody pressed "Retrain now"
    assert batch_items_finished(round=labeling) == 4


def test_decided_unlabelable_and_returned_items_count_as_finished(setup: dict[str, Any]) -> None:
    project, labeling, items = setup["project"], setup["round"], setup["items"]
    alice, lena = setup["alice"], setup["lena"]
    Item.objects.filter(pk=items[2].pk).update(required_labels=1)
    _take_and_label(project, alice, "yes")
    for _ in range(2):
        item = next_item_for(project=project, annotator=alice)
        assert item is not None
        skip_submit(item=item, annotator=alice)
    _take_and_label(project, alice, "no")
    assert next_item_for(project=project, annotator=alice) is None  # the only annotator skipped two
    status = batch_status(round=labeling)
    assert (status.finished, status.skipped) == (2, 2) and _status(labeling) == "labeling"
    assert "2 wait for a lead" in empty_queue_reason(project=project, annotator=alice, queue="batch")
    adjudicate(item=items[1], label=None, lead=lena)  # unlabelable
    assert _status(labeling) == "labeling"
    item_return_to_pool(item=items[2], lead=lena)  # back to the pool: the round does not wait for it
    assert _status(labeling) == "training"


def test_auto_retrain_off_waits_for_the_button_and_says_so(setup: dict[str, Any]) -> None:
    project, labeling = setup["project"], setup["round"]
    Project.objects.filter(pk=project.pk).update(auto_retrain_share=0.0)
    project.refresh_from_db()
    Item.objects.filter(project=project).update(required_labels=1)
    for _ in range(4):
        _take_and_label(project, setup["alice"], "yes")
    assert _status(labeling) == "labeling" and batch_status(round=labeling).complete
    ml = Client()
    ml.force_login(setup["mia"])
    page = ml.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert "Every batch item is done." in page
    refusal = ml.post(reverse("ml_round_start", args=[project.pk]), headers={"HX-Request": "true"}).content.decode()
    assert "press “Retrain now” to train on it" in refusal


def test_a_lead_does_not_decide_an_item_they_labelled_unless_the_project_allows_it(setup: dict[str, Any]) -> None:
    project, items, lena = setup["project"], setup["items"], setup["lena"]
    Annotation.objects.create(item=items[0], annotator=lena, label=_label(project, "yes"))
    with pytest.raises(ReviewError, match="you labelled this item yourself"):
        adjudicate(item=items[0], label=_label(project, "no"), lead=lena)
    Project.objects.filter(pk=project.pk).update(lead_adjudicates_own=True)
    adjudicate(item=items[0], label=_label(project, "no"), lead=lena)
    items[0].refresh_from_db()
    assert items[0].final_label == _label(project, "no")


def test_batch_overlap_items_go_to_k_distinct_annotators(setup: dict[str, Any]) -> None:
    """Training batches, not only the test set: the overlap share of a batch is labelled by k people."""
    from annotate.services.selection import batch_overlap_apply

    project, labeling = setup["project"], setup["round"]
    Item.objects.filter(project=project).update(required_labels=1)
    Project.objects.filter(pk=project.pk).update(overlap_share=0.5, overlap_annotators=2)
    labeling.refresh_from_db()
    assert batch_overlap_apply(round=labeling) == 2
    assert batch_overlap_apply(round=labeling) == 2  # idempotent
    needs = dict(Item.objects.filter(project=project).values_list("external_id", "required_labels"))
    assert needs == {"i0": 2, "i1": 1, "i2": 2, "i3": 1}  # spread over the rank order
    carol = _user("carol", "annotator")
    seen: dict[str, list[str]] = {}
    for user in (setup["alice"], setup["bob"], carol):
        while (item := next_item_for(project=project, annotator=user)) is not None:
            label_submit(item=item, annotator=user, label=_label(project, "yes"))
            seen.setdefault(item.external_id, []).append(user.username)
    # alice takes every item first; bob then gets exactly the overlap items; carol finds nothing left
    assert seen == {"i0": ["alice", "bob"], "i1": ["alice"], "i2": ["alice", "bob"], "i3": ["alice"]}


def test_a_failed_task_of_a_round_that_no_longer_exists_does_not_raise() -> None:
    """A message left in the broker from another database (an earlier test, a project deleted since) names
    a round that is not there. Its task's on_failure must not raise: an exception there takes the
    worker's consumer down, and the worker stops taking tasks (CI, session 19)."""
    from annotate.models import Round
    from annotate.tasks import RoundTask

    missing = (Round.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1000
    RoundTask().on_failure(RuntimeError("boom"), "task-id", (missing,), {}, None)  # no exception
    assert not Round.objects.filter(id=missing).exists()
