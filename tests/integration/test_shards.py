"""Sharded pool scoring with TWO real Celery workers (hf engine, tiny model, CPU): every candidate is
scored exactly once, both workers take shards, a rerun rescores nothing, and a shard left RUNNING by
a dead worker is taken over and finished."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.models import Round, ScoreShard
from annotate.services import planning, round_state, rounds, scoring
from annotate.services.rounds import round_request_start, round_resume, round_run_sync
from annotate.tasks import score_shard
from tests.integration.round_helpers import (
    annotator,
    label_batch,
    live_loop,
    round_status,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(300)]

SHARD_OPTIONS = '{"max_context": 192, "n_shards": 6, "arms_every": 1, "train": {"max_steps": 2, "batch_size": 4}}'


def _trained_project(shared_data: Path, tmp_path: Path, model_dir: Path) -> Any:
    """Round 1 (cold start, labelled, trained) run in this process: round 2 has adapters to score with."""
    project = trec_project(shared_data, tmp_path, model_dir=model_dir, pool=120)
    first = round_request_start(project=project, user=None, run_here=True)
    round_run_sync(round_id=first.id)
    label_batch(project, annotator())
    assert round_run_sync(round_id=first.id).status == "done"
    return project


def test_two_workers_share_the_shards_and_score_each_item_once(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, SHARD_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = _trained_project(shared_data, tmp_path, tiny_llama_dir)
        workers.start("a")
        workers.start("b")
        wait_workers(["a", "b"])
        second = round_request_start(project=project, user=None)
        wait_for(lambda: round_status(second.id) in ("labeling", "failed"), 120, "round 2 selection", poll=0.2)
        second = Round.objects.get(id=second.id)
        assert second.status == "labeling", second.failure_reason + workers.logs()

        shards = list(ScoreShard.objects.filter(round=second).order_by("shard"))
        assert len(shards) == 6 and {s.status for s in shards} == {"done"}
        assert {s.attempts for s in shards} == {1}
        assert len({s.worker for s in shards}) == 2, [s.worker for s in shards]  # both workers took shards
        candidates = np.load(round_state.round_score_dir(second) / "candidates.npy")
        scored = np.concatenate([np.load(s.path)["ids"] for s in shards])
        assert sorted(scored.tolist()) == sorted(candidates.tolist())  # each candidate exactly once
        assert second.items_scored == len(candidates) == sum(s.n_items for s in shards)

        # Rerun of the scoring step (every shard task again): nothing is rescored.
        mtimes = [os.stat(s.path).st_mtime_ns for s in shards]
        cache_chunks = len(list((Path(settings.SCORE_DIR) / "cache").rglob("*.npz")))
        results = [score_shard.delay(second.id, s.shard) for s in shards]
        assert [r.get(timeout=60) for r in results] == ["done"] * 6
        assert [os.stat(s.path).st_mtime_ns for s in shards] == mtimes
        assert len(list((Path(settings.SCORE_DIR) / "cache").rglob("*.npz"))) == cache_chunks
        assert set(ScoreShard.objects.filter(round=second).values_list("attempts", flat=True)) == {1}


def test_a_running_shard_of_a_dead_worker_is_rerun(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, SHARD_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = _trained_project(shared_data, tmp_path, tiny_llama_dir)
        second = round_request_start(project=project, user=None, run_here=True)
        with rounds.driving(second.id):
            planning.round_plan(round_id=second.id)  # planned, nothing enqueued
        # A worker claimed shard 0 and died (its pid no longer exists); shard 1 is done by a live one.
        dead = f"{socket.gethostname()}:{2**22 + 12345}"
        ScoreShard.objects.filter(round=second, shard=0).update(status="running", worker=dead, attempts=1)
        assert 0 in scoring.shards_to_run(round=Round.objects.get(id=second.id))
        workers.start("w")  # its startup resumes the round: the dead worker's shard and the pending ones
        wait_for(lambda: round_status(second.id) in ("labeling", "failed"), 120, "the resumed round", poll=0.2)
        assert round_status(second.id) == "labeling", workers.logs()
        shard0 = ScoreShard.objects.get(round=second, shard=0)
        assert shard0.status == "done" and shard0.attempts == 2 and shard0.worker != dead
        assert round_resume(round_id=second.id) == []  # nothing left to do
