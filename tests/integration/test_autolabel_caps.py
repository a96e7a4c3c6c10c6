"""The bulk job's in-flight cap per worker, against the real database: a Celery node holding its
share of running shards gets no other one; the shard goes back to the queue for another worker."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from annotate.models import AutolabelRun, AutolabelShard, Calibration
from annotate.services import autolabel as auto
from tests.integration.round_helpers import TEST_OPTIONS, trec_project

pytestmark = [pytest.mark.django_db, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)


def test_a_worker_at_its_cap_hands_the_shard_back(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibration = Calibration.objects.create(project=project, status="done")
    run = AutolabelRun.objects.create(
        project=project, calibration=calibration, status="running", n_shards=4, max_shards_per_worker=2
    )
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a live process
    try:
        live = f"{socket.gethostname()}:{holder.pid}"
        for shard in (0, 1):
            AutolabelShard.objects.create(run=run, shard=shard, status="running", worker=live, node="gpu-a")
        AutolabelShard.objects.create(run=run, shard=2, status="queued")
        AutolabelShard.objects.create(run=run, shard=3, status="pending")
        assert auto.node_load("gpu-a") == 2
        monkeypatch.setattr(auto, "_node", lambda: "gpu-a")
        sent = auto.InlineQueue()  # captures what the service enqueues
        auto.shard_run(run_id=run.id, shard=2, dispatch=sent)
        back = AutolabelShard.objects.get(run=run, shard=2)
        assert back.status == "queued" and back.attempts == 0 and back.worker == "" and back.node == ""
        assert ("shard", (run.id, 2)) in sent.pending  # offered again, later, to whichever worker has room
    finally:
        holder.kill()
        holder.wait()
    assert auto.node_load("gpu-a") == 0  # a dead holder's shards do not count against its node
