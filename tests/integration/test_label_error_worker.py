"""The possible-label-errors scan in a real Celery worker (issue 31): the lead's request only records a
LabelErrorScan; a worker on the default queue claims it, embeds and judges the labels and queues the
suspects. A project with too few labels ends failed with the reason; a worker SIGKILLed mid-scan leaves
the scan running on a dead process, and the next worker's start takes it over and finishes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotate.models import LabelErrorScan, LabelSuspect
from annotate.services.label_errors import label_error_scan_request
from annotate.services.workers import worker_id
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    labelled_with_flips,
    live_loop,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(400)]


def scan_over(scan_id: int) -> bool:
    return LabelErrorScan.objects.get(id=scan_id).status in ("done", "failed")


def test_the_scan_runs_in_the_worker_and_a_small_project_is_refused(
    shared_data: Path, smollm2_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("w1", queues="default")  # the scan's queue: no io or gpu worker needed
        wait_workers(["w1"])
        project, flipped = labelled_with_flips(shared_data, tmp_path, smollm2_dir)
        scan, new = label_error_scan_request(project=project)
        assert new and scan.status == "pending" and not LabelSuspect.objects.exists()  # the request scans nothing
        try:
            wait_for(lambda: scan_over(scan.id), 180, "the scan", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        scan.refresh_from_db()
        assert scan.status == "done", scan.error
        assert scan.worker and scan.worker != worker_id()  # a worker ran it, not this process
        suspects = set(LabelSuspect.objects.filter(project=project).values_list("item_id", flat=True))
        assert scan.suspects_added == len(suspects) > 0 and suspects & flipped and scan.labels_seen == 384

        (tmp_path / "small").mkdir()
        small = trec_project(shared_data, tmp_path / "small", model_dir=smollm2_dir, pool=40, test=16)
        refused, _ = label_error_scan_request(project=small)
        wait_for(lambda: scan_over(refused.id), 60, "the refusal", poll=0.3)
        refused.refresh_from_db()
        assert refused.status == "failed" and "at least 50 labelled items" in refused.error, workers.logs()


def test_a_worker_killed_mid_scan_is_taken_over_at_the_next_start(
    shared_data: Path, smollm2_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("label_error_scan", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("first", queues="default")
        wait_workers(["first"])
        project, _ = labelled_with_flips(shared_data, tmp_path, smollm2_dir)
        scan, _ = label_error_scan_request(project=project)
        wait_for(lambda: any(stall_dir.glob("label_error_scan-*")), 120, "the scan to stall", poll=0.1)
        held = LabelErrorScan.objects.get(id=scan.id)
        assert (held.status, held.attempts, held.step) == ("running", 1, LabelErrorScan.Step.JUDGING)
        workers.kill("first")
        assert LabelErrorScan.objects.get(id=scan.id).status == "running"  # on a dead process now
        workers.start("second", queues="default")  # its start sends the scan again (jobs_resume)
        try:
            wait_for(lambda: scan_over(scan.id), 180, "the resumed scan", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        done = LabelErrorScan.objects.get(id=scan.id)
        assert (done.status, done.attempts) == ("done", 2), done.error
        assert done.worker != held.worker and done.suspects_added == LabelSuspect.objects.count() > 0
