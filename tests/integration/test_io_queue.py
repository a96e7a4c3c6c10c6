"""Issue 32, problem 4: an upload made while a round trains used to sit at "pending · 0 bytes read"
until the training ended, because the one worker took imports from the queue training kept busy.
Imports now go to their own queue (``io``, config/celery.py), read by the io-worker role: here a real
worker that does not read ``io`` is held mid-training (the ``train`` crash-test hook keeps it busy)
and a second upload still completes, through the io worker, while the round is training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotate.models import ImportJob, Item, Round
from annotate.services.imports import import_create
from annotate.services.rounds import round_request_retrain, round_request_start
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    annotator,
    label_batch,
    live_loop,
    round_status,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(400)]


def test_an_upload_completes_while_the_round_trains(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("train", stall_dir).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ALANN_TEST_STALL_S", "300")  # longer than the test: the round is still training at its end
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("busy", queues="default,gpu")  # the round's worker: never takes an import
        workers.start("io", queues="io")
        wait_workers(["busy", "io"])
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        user = annotator()
        first = round_request_start(project=project, user=user)
        wait_for(lambda: round_status(first.id) == "labeling", 120, "round 1's batch", poll=0.3)
        assert label_batch(project, user) == 8
        round_request_retrain(project=project, user=user)
        try:
            wait_for(lambda: any(stall_dir.glob("train-*")), 120, "the training to stall halfway", poll=0.1)
        except AssertionError:
            raise AssertionError(workers.logs()) from None

        upload = tmp_path / "second.csv"
        upload.write_text("id,text\n" + "".join(f"u{n},a second upload's row {n}\n" for n in range(50)))
        job = import_create(project=project, path=upload, filename="second.csv", user=user)
        done = lambda: ImportJob.objects.get(id=job.id).status in ("done", "failed")  # noqa: E731
        try:
            wait_for(done, 60, "the second upload", poll=0.2)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        job.refresh_from_db()
        assert (job.status, job.rows_created) == ("done", 50), job.error
        assert Item.objects.filter(project=project, external_id__startswith="u").count() == 50
        assert Round.objects.get(id=first.id).status == "training"  # it did not wait for the round
