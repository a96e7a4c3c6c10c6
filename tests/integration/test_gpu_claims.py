"""Claims with real Celery workers (hf engine, tiny model, CPU, a file SQLite database both sides see):
two gpu workers, duplicated training messages and a worker SIGKILLed mid-training then restarted —
each adapter is trained by exactly one process (once, or resumed once from its checkpoint after the
kill) and ends with the hashes of an uninterrupted run; and a worker that starts while ``manage.py
round run-sync`` drives a round leaves that round alone."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from annotate.models import AdapterVersion, Round, ScoreShard, WorkClaim
from annotate.services.rounds import round_request_retrain, round_request_start, round_run_sync
from annotate.tasks import train_adapter
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    ROOT,
    annotator,
    label_batch,
    live_loop,
    round_status,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(420)]

# Members of 30 steps (20 for the three of the kill test), a checkpoint after every step: long enough
# to kill one mid-way, and for a worker to start while run-sync trains.
SLOW_OPTIONS = (
    '{"max_context": 192, "n_shards": 2, "arms_every": 1,'
    ' "train": {"max_steps": 30, "batch_size": 4, "checkpoint_every": 1}}'
)
KILL_OPTIONS = (
    '{"max_context": 192, "n_shards": 2, "arms_every": 1,'
    ' "train": {"max_steps": 20, "batch_size": 4, "checkpoint_every": 1}}'
)
KEYS = {"prod:0", "prod:1", "prod:2"}


def _hashes(project: Any) -> dict[tuple[str, int], str]:
    return {
        (a, k): h for a, k, h in AdapterVersion.objects.filter(project=project).values_list("arm", "k", "content_hash")
    }


def _to_training(shared_data: Path, tmp_path: Path, model_dir: Path, name: str) -> Round:
    """A 3-member project whose round 1 (cold start, run here) is labelled and sent to training."""
    (tmp_path / name).mkdir()
    project = trec_project(shared_data, tmp_path / name, model_dir=model_dir, ensemble_k=3)
    first = round_request_start(project=project, user=None, run_here=True)
    assert round_run_sync(round_id=first.id).status == "labeling"
    label_batch(project, annotator(name))
    return round_request_retrain(project=project, user=None)


def _owner(workers: Any, claim_worker: str) -> str:
    """The name of the worker whose prefork child is ``host:pid``."""
    pid = int(claim_worker.rpartition(":")[2])
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return next(name for name, proc in workers.procs.items() if proc.pid == parent)


def test_two_gpu_workers_and_a_restart_train_each_adapter_exactly_once(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, KILL_OPTIONS)
    # The worker that trains the trec-crash project's prod:0 stalls halfway through it (devtools/stall.py),
    # so the kill lands mid-adapter however fast the machine is; every other adapter runs through
    # (a marker says "already passed").
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for key in ("trec-ref-prod:0", "trec-ref-prod:1", "trec-ref-prod:2", "trec-crash-prod:1", "trec-crash-prod:2"):
        (stall_dir / f"train-{key}").touch()
    for name, value in stall_env("train", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("a")
        workers.start("b")
        wait_workers(["a", "b"])
        reference = _to_training(shared_data, tmp_path, tiny_llama_dir, "ref")
        wait_for(lambda: round_status(reference.id) in ("done", "failed"), 240, "the reference round", poll=0.3)
        assert round_status(reference.id) == "done", workers.logs()

        first = _to_training(shared_data, tmp_path, tiny_llama_dir, "crash")
        running = WorkClaim.objects.filter(round=first, kind="train", status="running")
        wait_for(lambda: running.count() == 2, 120, "both workers training", poll=0.05)
        for key in sorted(KEYS):  # every adapter's message, twice more
            arm, k = key.split(":")
            train_adapter.delay(first.id, arm, int(k))
            train_adapter.delay(first.id, arm, int(k))
        first.refresh_from_db()
        assert first.project.name == "trec-crash"
        wait_for(lambda: (stall_dir / "train-trec-crash-prod:0").exists(), 120, "prod:0 halfway", poll=0.05)
        victim = running.filter(key="prod:0").first()
        assert victim is not None, "no adapter was training at the kill; the test proves nothing"
        workers.kill(_owner(workers, victim.worker))
        victim.refresh_from_db()
        assert victim.status == "running", "the adapter finished before the kill; the test proves nothing"
        assert round_status(first.id) == "training"
        time.sleep(0.5)
        workers.start("a2")  # its startup sends again what the round still needs
        wait_for(lambda: round_status(first.id) in ("done", "failed"), 240, "the resumed round", poll=0.3)
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason + workers.logs()

        assert _hashes(first.project) == _hashes(reference.project)  # identical to the uninterrupted run
        train = {c.key: c for c in WorkClaim.objects.filter(round=first, kind="train")}
        assert set(train) == KEYS and {c.status for c in train.values()} == {"done"}
        assert train[victim.key].attempts == 2 and train[victim.key].worker != victim.worker  # resumed once
        assert {key: c.attempts for key, c in train.items() if key != victim.key} == {
            key: 1 for key in train if key != victim.key
        }  # duplicates and the second worker never trained one twice
        assert AdapterVersion.objects.filter(round=first).count() == 3
        assert first.train_steps_done == first.train_steps_total


def test_a_worker_started_during_run_sync_leaves_the_round_alone(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, SLOW_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, ensemble_k=2)
        first = round_request_start(project=project, user=None, run_here=True)
        assert round_run_sync(round_id=first.id).status == "labeling"
        label_batch(project, annotator())
        log = (tmp_path / "run-sync.log").open("wb")
        driver = subprocess.Popen(
            [sys.executable, "manage.py", "round", "run-sync", project.name],
            cwd=ROOT,
            env=workers.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            me = f"{socket.gethostname()}:{driver.pid}"
            training = WorkClaim.objects.filter(round=first, kind="train", status="running", worker=me)
            wait_for(lambda: training.exists() or driver.poll() is not None, 120, "run-sync training", poll=0.05)
            assert driver.poll() is None, (tmp_path / "run-sync.log").read_text()
            workers.start("w")  # its startup resumes every active round — but not this one
            wait_for(
                lambda: "annotate.jobs_resume" in workers.logs() and "succeeded" in workers.logs(),
                60,
                "the worker's resume",
            )
            assert round_status(first.id) == "training", "run-sync finished before the worker's resume"
            assert driver.wait(timeout=240) == 0, (tmp_path / "run-sync.log").read_text()
        finally:
            if driver.poll() is None:
                driver.kill()
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason
        steps = WorkClaim.objects.filter(round=first, kind__in=["train_plan", "train", "evaluate"])
        held = set(steps.values_list("worker", flat=True))
        assert steps.count() == 4 and held == {me}, held  # every step after labeling ran in run-sync
        assert not ScoreShard.objects.filter(round=first).exists()
        logs = workers.logs()
        for task in ("annotate.round_plan_training", "annotate.gpu.train_adapter", "annotate.gpu.round_evaluate"):
            assert f"Task {task}[" not in logs, logs  # the worker received none of the round's steps
        assert WorkClaim.objects.get(round=first, kind="drive").status == "pending"  # released at the end
