"""Issue 32, problem 6: every label, revision, skip, lead decision and note is kept append-only with
who and when; a lead's decision (or return to the pool) can be undone, restoring the state before it;
an annotator's skip can be taken back. Undo is refused, writing nothing, when it no longer applies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from annotate.models import Adjudication, Annotation, BatchItem, Item, ItemEvent, Lease, Project, Round, Skip
from annotate.selectors.items import item_history
from annotate.selectors.review import disagreements, skipped_items
from annotate.services.accounts import user_create
from annotate.services.exports import export_labels
from annotate.services.history import UndoRefused, decision_undo, skip_undo
from annotate.services.labeling import label_submit, next_item_for, skip_submit
from annotate.services.projects import LabelInput, project_create
from annotate.services.review import adjudicate, item_return_to_pool
from tests.integration.test_review import fast_passwords, label  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def project() -> Project:
    """Three labels and a labelling round of three items, the first needing two annotators."""
    labels = [LabelInput("sports", "S"), LabelInput("politics", "P"), LabelInput("science", "X")]
    project = project_create(name="history", labels=labels)
    items = Item.objects.bulk_create(
        Item(
            project=project,
            external_id=f"i{n}",
            text=f"text {n}",
            text_hash=f"h{n}",
            required_labels=2 if n == 0 else 1,
        )
        for n in range(3)
    )
    labeling = Round.objects.create(project=project, number=1, status=Round.Status.LABELING)
    BatchItem.objects.bulk_create(
        BatchItem(round=labeling, item=it, source="random", rank=r) for r, it in enumerate(items)
    )
    return project


@pytest.fixture
def people() -> dict[str, Any]:
    names = {"alice": "annotator", "bob": "annotator", "lena": "lead", "leo": "lead"}
    return {name: user_create(username=name, password="pw-12345678", roles=[role]) for name, role in names.items()}


def disputed(project: Project, people: dict[str, Any]) -> Item:
    """The two-annotator item, labelled sports by alice and politics by bob."""
    first = next_item_for(project=project, annotator=people["alice"])
    second = next_item_for(project=project, annotator=people["bob"])
    assert first is not None and second is not None and first.pk == second.pk
    label_submit(item=first, annotator=people["alice"], label=label(project, "sports"))
    label_submit(item=second, annotator=people["bob"], label=label(project, "politics"))
    return Item.objects.get(pk=first.pk)


def test_problem_6_a_second_relabel_keeps_the_first_decision_and_its_note(
    project: Project, people: dict[str, Any]
) -> None:
    item = disputed(project, people)
    adjudicate(item=item, label=label(project, "sports"), lead=people["lena"], note="the score decides")
    adjudicate(item=item, label=label(project, "science"), lead=people["leo"], note="it is about doping tests")

    _, events = item_history(project=project, item_id=item.pk)
    texts = [e.text for e in events if e.kind in ("label", "decision")]
    assert texts == [
        "alice labelled it sports in round 1",
        "bob labelled it politics in round 1",
        "lena decided sports — the score decides",
        "leo decided science — it is about doping tests",
    ]
    rows = [json.loads(line) for line in export_labels(project=project, fmt="jsonl")]
    history = next(r["history"] for r in rows if r["item_id"] == item.external_id)
    decisions = [(e["by"], e["label"], e["note"]) for e in history if e["kind"] == "decision"]
    assert decisions == [("lena", "sports", "the score decides"), ("leo", "science", "it is about doping tests")]


def test_undoing_a_relabel_restores_the_earlier_decision_then_the_disagreement(
    project: Project, people: dict[str, Any]
) -> None:
    item = disputed(project, people)
    first = adjudicate(item=item, label=label(project, "sports"), lead=people["lena"], note="the score decides")
    first_at = first.decided_at
    adjudicate(item=item, label=label(project, "science"), lead=people["leo"], note="second look")
    second, first_event = ItemEvent.objects.filter(item=item, kind="decision").order_by("-id")[:2]

    with pytest.raises(UndoRefused, match="changed since"):  # the earlier one: leo's relabel stands on it
        decision_undo(project=project, event_id=first_event.pk, lead=people["lena"])
    decision_undo(project=project, event_id=second.pk, lead=people["lena"])
    item.refresh_from_db()
    restored = Adjudication.objects.get(item=item)
    assert item.final_label == label(project, "sports")
    assert (restored.label, restored.decided_by, restored.note, restored.decided_at) == (
        label(project, "sports"),
        people["lena"],
        "the score decides",
        first_at,
    )

    decision_undo(project=project, event_id=first_event.pk, lead=people["leo"])
    item.refresh_from_db()
    assert item.final_label is None and item.finalized_at is None
    assert not Adjudication.objects.filter(item=item).exists()
    assert list(disagreements(project=project)) == [item]  # back in the lead's queue
    assert not BatchItem.objects.get(item=item).done
    assert Annotation.objects.filter(item=item).count() == 2  # nothing accepted was lost or added
    with pytest.raises(UndoRefused, match="undone already"):
        decision_undo(project=project, event_id=first_event.pk, lead=people["leo"])
    kinds = list(ItemEvent.objects.filter(item=item).order_by("id").values_list("kind", flat=True))
    assert kinds == ["label", "label", "decision", "decision", "undo", "undo"]


def test_undo_is_refused_once_an_annotator_relabelled_the_item(project: Project, people: dict[str, Any]) -> None:
    item = disputed(project, people)
    adjudicate(item=item, label=label(project, "sports"), lead=people["lena"])
    decision = ItemEvent.objects.get(item=item, kind="decision")
    label_submit(item=item, annotator=people["bob"], label=label(project, "science"), revise=True)
    with pytest.raises(UndoRefused, match="revision by bob"):
        decision_undo(project=project, event_id=decision.pk, lead=people["lena"])
    item.refresh_from_db()
    assert item.final_label == label(project, "sports")  # nothing written by the refusal
    assert not ItemEvent.objects.filter(kind="undo").exists()


def test_undoing_a_return_to_the_pool_puts_the_skip_back_in_the_leads_queue(
    project: Project, people: dict[str, Any]
) -> None:
    alice = people["alice"]
    held = next_item_for(project=project, annotator=alice)
    assert held is not None
    skip_submit(item=held, annotator=alice, reason="two topics")
    item_return_to_pool(item=held, lead=people["lena"])
    assert not skipped_items(project=project).exists()
    returned = ItemEvent.objects.get(item=held, kind="return")
    decision_undo(project=project, event_id=returned.pk, lead=people["lena"])
    assert list(skipped_items(project=project)) == [held]
    assert Skip.objects.get(item=held).reason == "two topics"


def test_an_annotator_takes_back_a_skip_and_labels_the_item(project: Project, people: dict[str, Any]) -> None:
    alice = people["alice"]
    held = next_item_for(project=project, annotator=alice)
    assert held is not None
    label_submit(item=held, annotator=alice, label=label(project, "sports"))
    skipped = next_item_for(project=project, annotator=alice)
    assert skipped is not None
    skip_submit(item=skipped, annotator=alice, reason="unsure")

    back = skip_undo(project=project, annotator=alice)
    assert back == skipped and not Skip.objects.filter(item=skipped).exists()
    assert Lease.objects.filter(annotator=alice).get().item == skipped  # it is theirs to label
    assert next_item_for(project=project, annotator=alice) == skipped
    label_submit(item=skipped, annotator=alice, label=label(project, "politics"))
    with pytest.raises(UndoRefused, match="not a skip"):  # the last action is a label now: u revises it
        skip_undo(project=project, annotator=alice)
    _, events = item_history(project=project, item_id=skipped.pk)
    assert [e.text for e in events if e.kind != "batch"] == [
        "alice skipped it: “unsure”",
        f"alice undid the skip of {events[1].at:%Y-%m-%d %H:%M}",
        "alice labelled it politics in round 1",
    ]


def test_a_skip_a_lead_decided_cannot_be_taken_back(project: Project, people: dict[str, Any]) -> None:
    alice = people["alice"]
    held = next_item_for(project=project, annotator=alice)
    assert held is not None
    skip_submit(item=held, annotator=alice)
    adjudicate(item=held, label=None, lead=people["lena"], note="not a topic text")
    with pytest.raises(UndoRefused, match="a lead has already decided"):
        skip_undo(project=project, annotator=alice)
    held.refresh_from_db()
    assert held.state == Item.State.UNLABELABLE and Skip.objects.filter(item=held, resolved=True).exists()
    assert not Lease.objects.filter(annotator=alice).exists()


def test_the_annotate_page_takes_a_skip_back_only_on_post(project: Project, people: dict[str, Any]) -> None:
    """A GET of the undo page writes nothing (a prefetch or a crawler must not take a skip back)."""
    from django.test import Client
    from django.urls import reverse

    alice = people["alice"]
    held = next_item_for(project=project, annotator=alice)
    assert held is not None
    skip_submit(item=held, annotator=alice, reason="unsure")
    client = Client()
    client.force_login(alice)
    url = reverse("annotate_undo", args=[project.pk])
    client.get(url, headers={"HX-Request": "true"})
    assert Skip.objects.filter(item=held).exists()
    page = client.post(url, {"queue": "batch"}, headers={"HX-Request": "true"}).content.decode()
    assert "Skip taken back" in page and f'data-item="{held.pk}"' in page
    assert not Skip.objects.filter(item=held).exists()
    refused = client.post(url, {"queue": "batch"}, headers={"HX-Request": "true"})  # nothing left to take back
    assert refused.status_code == 200 and "nothing to undo yet" in refused.content.decode()


def test_a_project_with_history_can_still_be_deleted(project: Project, people: dict[str, Any]) -> None:
    from annotate.services.projects import project_delete

    item = disputed(project, people)
    adjudicate(item=item, label=label(project, "sports"), lead=people["lena"], note="kept")
    assert ItemEvent.objects.filter(item__project=project).count() == 3
    project_delete(project=project, confirm_name="history")
    assert not ItemEvent.objects.exists() and not Project.objects.filter(name="history").exists()


def test_the_dataset_export_offers_the_history_column(project: Project, people: dict[str, Any]) -> None:
    from annotate.services.exports_dataset import DatasetFilter, export_dataset

    item = disputed(project, people)
    adjudicate(item=item, label=label(project, "sports"), lead=people["lena"], note="first")
    adjudicate(item=item, label=label(project, "science"), lead=people["leo"], note="second")
    spec = DatasetFilter(columns=("id", "label", "history"), metadata=False)
    (row,) = [json.loads(line) for line in export_dataset(project=project, fmt="jsonl", spec=spec)]
    assert row["label"] == "science"
    assert [(e["kind"], e["by"], e["note"]) for e in row["history"]] == [
        ("label", "alice", ""),
        ("label", "bob", ""),
        ("decision", "lena", "first"),
        ("decision", "leo", "second"),
    ]
