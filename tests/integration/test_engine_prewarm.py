"""A gpu worker with ALANN_ENGINE_PREWARM starts its engine as soon as it is up, in its own pool process
(its direct queue), and its first round uses that engine instead of starting one: on the H200 a vLLM
start took 89 s in a round's evaluation before this (bench/RESULTS.md, session 16). Here with the hf
engine on the tiny model, a real Celery worker and this run's Redis database."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from annotate.services.rounds import round_request_retrain, round_request_start
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    annotator,
    label_batch,
    live_loop,
    round_status,
    trec_project,
    use_loop_options,
    wait_for,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(300)]

STARTED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+): INFO/ForkPoolWorker-\d+\] hf engine started in", re.M)


def engine_starts(log: str) -> list[float]:
    """When the worker's pool process started an hf engine (epoch seconds, the log's clock: UTC)."""
    return [
        datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() + int(ms) / 1000
        for day, ms in STARTED.findall(log)
    ]


def test_a_prewarmed_gpu_worker_serves_its_first_round_from_the_engine_it_started(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    monkeypatch.setenv("ALANN_ENGINE_PREWARM", "hf")
    monkeypatch.setenv("LLM_DIR", str(tiny_llama_dir))  # the default model: the project below uses it too
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("w1")
        log = tmp_path / "worker-w1.log"
        wait_for(lambda: bool(engine_starts(log.read_text())), 120, "the prewarmed engine", poll=0.3)
        prewarmed = engine_starts(log.read_text())[0]
        requested = time.time()
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        user = annotator()
        first = round_request_start(project=project, user=user)
        wait_for(lambda: round_status(first.id) in ("labeling", "failed"), 120, "round 1 selection")
        assert label_batch(project, user) == 8
        round_request_retrain(project=project, user=user)
        wait_for(lambda: round_status(first.id) in ("done", "failed"), 180, "round 1 training and evaluation")
        first.refresh_from_db()
        text = log.read_text()
    assert first.status == "done", first.failure_reason + workers.logs()
    assert "accuracy" in first.metrics  # evaluated: the engine scored the test set
    # one engine in the worker's life, started before any round was asked for: the evaluation used it
    assert engine_starts(text) == [prewarmed], workers.logs()
    assert prewarmed < requested
    assert re.search(r"Task annotate\.gpu\.engine_warm\[[^\]]+\] succeeded", text)
