"""Possible label errors (issue 31): a scan of a TREC project whose human labels are right except for a
score flipped ones queues suspects with evidence, finds flipped labels, never changes a label itself,
does not queue a judged label again; a lead's relabel is a decision in the item's history, a keep
leaves the label; annotators cannot reach the page. The scan as a job: the page's button records a
LabelErrorScan and sends the task (a second click gets the same scan), the task body records its counts
or the refusal, and the polled status stops once the scan is over (tests/integration/
test_label_error_worker.py runs it in a real worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import Adjudication, Item, ItemEvent, LabelErrorScan, LabelSuspect, ProjectMembership
from annotate.services.accounts import user_create
from annotate.services.label_errors import (
    LabelErrorError,
    label_error_scan,
    label_error_scan_request,
    label_error_scan_run,
    label_suspect_decide,
)
from tests.integration.round_helpers import labelled_with_flips, trec_project

pytestmark = pytest.mark.django_db


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
    # the other-label list left on "Choose…" decides nothing (it was read as "keep" before)
    client = Client()
    client.force_login(lead)
    url = reverse("label_errors_decide", kwargs={"project_id": project.pk, "suspect_id": second.pk})
    refused = client.post(url, {"label": "", "note": "n"}, follow=True).content.decode()
    assert "not decided: choose a label" in refused
    assert LabelSuspect.objects.get(pk=second.pk).decision == LabelSuspect.Decision.OPEN
    kept = label_suspect_decide(suspect=second, lead=lead, label=None)
    assert kept.decision == "kept" and Item.objects.get(pk=second.item_id).final_label_id == second.given_id
    # the page: the lead sees the decided ones; an annotator is refused
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


def lead_client(project: Any) -> tuple[Any, Client]:
    lead = user_create(username="lead", password="pw-12345678", roles=["lead"])
    ProjectMembership.objects.create(project=project, user=lead, role="lead")
    client = Client()
    client.force_login(lead)
    return lead, client


@pytest.mark.postgres  # the one-active-scan constraint is a partial unique index: PostgreSQL too (make test)
def test_the_button_records_one_scan_and_the_worker_body_fills_it(
    shared_data: Path, tmp_path: Path, smollm2_dir: Path, monkeypatch: Any
) -> None:
    project, flipped = labelled_with_flips(shared_data, tmp_path, smollm2_dir)
    lead, client = lead_client(project)
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr("annotate.services.queue.send_on_commit", lambda task, *args: sent.append((task, *args)))
    htmx: Any = {"HTTP_HX_REQUEST": "true"}
    page = client.post(f"/p/{project.pk}/lead/label-errors/scan/", **htmx).content.decode()
    scan = LabelErrorScan.objects.get(project=project)
    assert (scan.status, scan.requested_by_id) == ("pending", lead.pk) and sent == [
        ("annotate.label_error_scan", scan.pk)
    ]
    assert 'hx-trigger="every 2s"' in page and "Scan the labels now" not in page  # polling, no second button
    again = client.post(f"/p/{project.pk}/lead/label-errors/scan/", **htmx).content.decode()
    assert LabelErrorScan.objects.count() == 1 and len(sent) == 1  # a second click: the same scan, no second task
    assert f"Scan #{scan.pk} is already pending" in again
    polled = client.get(f"/p/{project.pk}/lead/label-errors/scan/status/", **htmx)
    assert polled.status_code == 200 and "Step 0 of 4" in polled.content.decode()

    done = label_error_scan_run(scan_id=scan.pk)  # what the worker runs
    assert done.status == "done" and done.labels_seen == 384 and done.finished_at is not None
    assert done.suspects_added == LabelSuspect.objects.filter(project=project).count() > 0
    assert done.suspects_found >= done.suspects_added and done.attempts == 1 and done.error == ""
    assert label_error_scan_run(scan_id=scan.pk).attempts == 1  # a redelivered message: left alone
    polled = client.get(f"/p/{project.pk}/lead/label-errors/scan/status/", **htmx)
    body = polled.content.decode()
    assert polled.status_code == 286 and "every 2s" not in body  # the polling stops
    assert 'id="label-suspects-section" hx-swap-oob="true"' in body and "Relabel to" in body  # the suspects swap in
    assert f"<b>{done.suspects_added}</b> new in the queue" in body
    second, new = label_error_scan_request(project=project, user=lead)  # after it ended, a new one may start
    assert new and second.pk != scan.pk


def test_a_refused_scan_ends_failed_with_the_reason(
    shared_data: Path, tmp_path: Path, smollm2_dir: Path, monkeypatch: Any
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=smollm2_dir, pool=40, test=16)
    monkeypatch.setattr("annotate.services.queue.send_on_commit", lambda task, *args: None)
    scan, _ = label_error_scan_request(project=project)
    done = label_error_scan_run(scan_id=scan.pk)
    assert done.status == "failed" and "at least 50 labelled items, this project has 0" in done.error
    assert done.finished_at is not None
    _, client = lead_client(project)
    page = client.get(f"/p/{project.pk}/lead/label-errors/").content.decode()
    assert "No scan: a scan needs at least 50 labelled items" in page and "every 2s" not in page
    assert "Scan the labels now" in page  # it may be asked again


def test_a_scan_on_a_dead_worker_is_taken_over_and_one_that_kills_every_worker_fails(
    shared_data: Path, tmp_path: Path, smollm2_dir: Path, monkeypatch: Any
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=smollm2_dir, pool=40, test=16)
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr("annotate.services.queue.send_on_commit", lambda task, *args: sent.append((task, *args)))
    scan, _ = label_error_scan_request(project=project)
    dead = "somehost-that-is-gone:1"
    monkeypatch.setattr("annotate.services.workers._celery_nodes", lambda: set())
    LabelErrorScan.objects.filter(id=scan.pk).update(status="running", worker=dead, attempts=1)
    from annotate.services.label_errors import label_error_scans_resume_all

    assert label_error_scans_resume_all() == 1 and sent[-1] == ("annotate.label_error_scan", scan.pk)
    done = label_error_scan_run(scan_id=scan.pk)  # taken over from the dead worker, then refused (40 items)
    assert done.status == "failed" and done.attempts == 2 and "at least 50" in done.error
    other, _ = label_error_scan_request(project=project)
    LabelErrorScan.objects.filter(id=other.pk).update(status="running", worker=dead, attempts=3)
    done = label_error_scan_run(scan_id=other.pk)
    assert done.status == "failed" and done.error == "3 workers died during this scan"
    assert label_error_scans_resume_all() == 0  # nothing left running
