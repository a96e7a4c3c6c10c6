"""Possible label errors (issue 31): a scan of a TREC project whose human labels are right except for a
score flipped ones queues suspects with evidence, finds flipped labels, never changes a label itself,
does not queue a judged label again; a lead's relabel is a decision in the item's history, a keep
leaves the label; annotators cannot reach the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client

from annotate.models import Adjudication, Item, ItemEvent, Label, ProjectMembership
from annotate.services.accounts import user_create
from annotate.services.label_errors import LabelErrorError, label_error_scan, label_suspect_decide
from tests.integration.round_helpers import trec_project

pytestmark = pytest.mark.django_db


def labelled_with_flips(shared_data: Path, tmp_path: Path, smollm2_dir: Path, flips: int = 20) -> tuple[Any, set[int]]:
    project = trec_project(shared_data, tmp_path, model_dir=smollm2_dir, pool=400, test=16)
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    pool = list(Item.objects.filter(project=project, is_test=False).order_by("id"))
    rng = np.random.default_rng(3)
    flipped = set(rng.choice([i.pk for i in pool], size=flips, replace=False).tolist())
    for item in pool:
        label = item.gold_label
        if item.pk in flipped:
            right = labels.index(item.gold_label)  # type: ignore[arg-type]  # TREC rows all have one
            label = labels[(right + 1 + int(rng.integers(0, len(labels) - 1))) % len(labels)]
        item.final_label = label
        item.save(update_fields=["final_label"])
    return project, flipped


def test_a_scan_queues_flipped_labels_with_evidence_and_changes_nothing(
    shared_data: Path, tmp_path: Path, smollm2_dir: Path
) -> None:
    project, flipped = labelled_with_flips(shared_data, tmp_path, smollm2_dir)
    before = dict(Item.objects.filter(project=project).values_list("id", "final_label_id"))
    added = label_error_scan(project=project)
    found = {s.item_id for s in added}
    assert added and found & flipped, "the scan finds flipped labels"
    precision, recall = len(found & flipped) / len(found), len(found & flipped) / len(flipped)
    print(f"suspects {len(found)}, precision {precision:.2f}, recall {recall:.2f}")
    # the queue is rich in errors: 20 of 384 labels are flipped (5 %); the weak TREC proxy at 384 labels
    # (bench/label_errors.py measures the precision per set) still queues them several times that often
    assert precision >= 3 * len(flipped) / 384
    for s in added:
        assert s.given_id == before[s.item_id] and s.suggested_id != s.given_id
        assert s.p_suggested >= 3 * s.p_given and s.labels_seen == 384
    assert dict(Item.objects.filter(project=project).values_list("id", "final_label_id")) == before
    assert label_error_scan(project=project) == []  # a judged label is not queued twice


def test_a_lead_relabels_or_keeps_and_the_history_says_so(shared_data: Path, tmp_path: Path, smollm2_dir: Path) -> None:
    project, _ = labelled_with_flips(shared_data, tmp_path, smollm2_dir)
    lead = user_create(username="lead", password="pw-12345678", roles=["lead"])
    ProjectMembership.objects.create(project=project, user=lead, role="lead")
    first, second = label_error_scan(project=project)[:2]
    done = label_suspect_decide(suspect=first, lead=lead, label=first.suggested)
    item = Item.objects.get(pk=first.item_id)
    assert done.decision == "relabelled" and item.final_label_id == first.suggested_id
    assert Adjudication.objects.get(item=item).label_id == first.suggested_id
    assert ItemEvent.objects.filter(item=item, kind="decision").count() == 1
    with pytest.raises(LabelErrorError, match="already decided"):
        label_suspect_decide(suspect=first, lead=lead, label=None)
    kept = label_suspect_decide(suspect=second, lead=lead, label=None)
    assert kept.decision == "kept" and Item.objects.get(pk=second.item_id).final_label_id == second.given_id
    # the page: the lead sees the decided ones; an annotator is refused
    client = Client()
    client.force_login(lead)
    page = client.get(f"/p/{project.pk}/lead/label-errors/").content.decode()
    assert "relabelled" in page and "kept" in page and "Scan the labels now" in page
    annotator = user_create(username="ann", password="pw-12345678", roles=["annotator"])
    ProjectMembership.objects.create(project=project, user=annotator, role="annotator")
    client.force_login(annotator)
    assert client.get(f"/p/{project.pk}/lead/label-errors/").status_code == 403


def test_a_scan_refuses_a_project_with_too_few_labels(shared_data: Path, tmp_path: Path, smollm2_dir: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=smollm2_dir, pool=40, test=16)
    with pytest.raises(LabelErrorError, match="at least 50 labelled items"):
        label_error_scan(project=project)
