"""A shard's chunks commit only while their worker holds the shard (``autolabel.hold_shard``):

- a holder counted dead while it still runs (a node that missed a ping) and whose shard another worker
  took over writes nothing more: its next chunk is rolled back and the shard stays the new holder's;
- on PostgreSQL, a takeover's claim waits for the dead holder's open chunk transaction to end, so the
  chunk is either committed before the new holder reads what is decided or not at all (the CI failure
  of the job-engine scale bench: a worker SIGKILLed while its commit was still in the server wrote its
  shard's result after the new holder had found none, and the shard was done twice)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from django.db.models import F

from annotate.models import AutoLabel, AutolabelRun, AutolabelShard, Calibration, Project
from annotate.services import autolabel as auto
from annotate.services import jobs
from tests.integration.round_helpers import TEST_OPTIONS, trec_project
from tests.integration.test_autolabel import calibrated

MOVED: dict[str, str] = {}  # the live process the hook hands the shard to


def take_over_after_first_chunk(point: str, key: object) -> None:
    """Step hook: after the shard's first chunk committed, another (live) worker takes the shard."""
    if point == "autolabel" and MOVED.get("to"):
        AutolabelShard.objects.filter(shard=int(str(key)), status="running").update(worker=MOVED.pop("to"))


@pytest.mark.django_db
@pytest.mark.slow
@pytest.mark.data
@pytest.mark.postgres
def test_a_holder_whose_shard_was_taken_over_writes_nothing_more(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibrated(project, cascade="none")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the new holder, alive
    try:
        MOVED["to"] = f"{socket.gethostname()}:{other.pid}"
        settings.STEP_HOOK = "tests.integration.test_autolabel_fence.take_over_after_first_chunk"
        holder: list[AutolabelRun] = []
        auto.run_inline(lambda send: holder.append(auto.run_request(project=project, dispatch=send, chunk_size=10)))
        row = AutolabelRun.objects.get(id=holder[0].id)
        shard = AutolabelShard.objects.get(run=row)
        assert not MOVED  # the hook ran
        assert shard.status == "running" and shard.worker == f"{socket.gethostname()}:{other.pid}"
        assert row.n_items == 44 and row.items_done == 10 and row.status == "running"
        assert AutoLabel.objects.filter(run=row).count() == 10  # the first chunk only: nothing after the takeover
    finally:
        other.kill()
        other.wait()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_takeover_waits_for_the_dead_holders_open_chunk() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time: no commit can land behind a takeover")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid is dead to worker_alive
    dead = f"{socket.gethostname()}:{gone.pid}"
    project = Project.objects.create(name="fence")
    run = AutolabelRun.objects.create(
        project=project, calibration=Calibration.objects.create(project=project, status="done"), status="running"
    )
    shard = AutolabelShard.objects.create(run=run, shard=0, status="running", worker=dead)
    locked, commit = threading.Event(), threading.Event()

    def dead_holders_last_chunk() -> None:  # its own connection: the holder's session still in the server
        try:
            with transaction.atomic():
                auto.hold_shard(shard.id, dead)
                AutolabelRun.objects.filter(id=run.id).update(items_done=F("items_done") + 7)
                locked.set()
                commit.wait(10)
                time.sleep(0.5)  # the commit lands well after the takeover asked
        finally:
            connections.close_all()

    thread = threading.Thread(target=dead_holders_last_chunk)
    thread.start()
    try:
        assert locked.wait(10)
        commit.set()
        started = time.monotonic()
        assert jobs.claim(AutolabelShard.objects.filter(id=shard.id), me="new-holder:1")
        waited = time.monotonic() - started
        done = AutolabelRun.objects.get(id=run.id).items_done
    finally:
        commit.set()
        thread.join(15)
    assert waited >= 0.4, f"the claim did not wait for the open chunk ({waited:.2f} s)"
    assert done == 7  # what the new holder reads after its claim includes the dead holder's commit
    with pytest.raises(auto.ClaimLost), transaction.atomic():
        auto.hold_shard(shard.id, dead)  # and the dead holder's claim is gone
