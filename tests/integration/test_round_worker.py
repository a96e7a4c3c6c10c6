"""Rounds through real Redis and a real Celery worker (prefork, -c 1) on a file SQLite database:
cold start → labels through the labeling service → retrain → evaluation → a scored round 2; a
worker SIGKILLed mid-training whose round, resumed by a fresh worker, ends exactly like an
uninterrupted run of the same seed; and one SIGKILLed holding a unit's message it had received but
not yet claimed (the message stays unacknowledged in the broker for its visibility timeout, an
hour): the next worker's start sends the unit again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from annotate.models import AdapterVersion, BatchItem, Prediction, Round, ScoreShard, WorkClaim
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
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(300)]

# Slower training for the kill test: 24 steps of 4 prompts, a checkpoint after every step.
CRASH_OPTIONS = (
    '{"max_context": 192, "n_shards": 2, "arms_every": 1,'
    ' "train": {"max_steps": 24, "batch_size": 4, "checkpoint_every": 1}}'
)


def _done(round_id: int, workers: Any, timeout: float = 120.0) -> Round:
    try:
        wait_for(lambda: round_status(round_id) in ("done", "failed", "labeling"), timeout, f"round {round_id}")
    except AssertionError:
        raise AssertionError(workers.logs()) from None
    return Round.objects.get(id=round_id)


def test_round_through_celery_worker(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("w1")
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        user = annotator()
        first = _done(round_request_start(project=project, user=user).id, workers)
        assert first.status == "labeling" and BatchItem.objects.filter(round=first, source="cold").count() == 8

        assert label_batch(project, user) == 8
        round_request_retrain(project=project, user=user)
        wait_for(lambda: round_status(first.id) in ("done", "failed"), 120, "round 1 training", poll=0.3)
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason + workers.logs()
        assert AdapterVersion.objects.filter(round=first, arm="prod").count() == 2
        assert first.metrics["test_n"] == 16 and "accuracy" in first.metrics and "kappa_model_human" in first.metrics
        assert first.cost["steps"]["training"]["seconds"] > 0 and first.cost["labels"] == 8

        second = _done(round_request_start(project=project, user=user).id, workers)
        assert second.status == "labeling", second.failure_reason + workers.logs()
        assert ScoreShard.objects.filter(round=second, status="done").count() == 2
        assert second.items_scored == second.items_to_score > 0
        assert set(BatchItem.objects.filter(round=second).values_list("source", flat=True)) == {"active", "random"}
        assert Prediction.objects.filter(round=second, adapter_set_hash=second.adapter_set_hash).exists()
        assert second.cost["steps"]["scoring"]["items"] == second.items_to_score


def _rows(project: Any) -> tuple[list[tuple[int, str, str, int]], dict[tuple[int, str, int], str]]:
    batch = [
        (n, ext, src, rank)
        for n, ext, src, rank in BatchItem.objects.filter(round__project=project)
        .order_by("round__number", "rank")
        .values_list("round__number", "item__external_id", "source", "rank")
    ]
    adapters = {
        (n, arm, k): h
        for n, arm, k, h in AdapterVersion.objects.filter(project=project).values_list(
            "round__number", "arm", "k", "content_hash"
        )
    }
    return batch, adapters


def test_killed_worker_resumes_from_checkpoints(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, CRASH_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("w1")
        # The uninterrupted reference: the same data and seed through the same kind of worker.
        (tmp_path / "ref").mkdir()
        reference = trec_project(shared_data, tmp_path / "ref", model_dir=tiny_llama_dir)
        ref_round = _done(round_request_start(project=reference, user=None).id, workers)
        label_batch(reference, annotator("ref"))
        round_request_retrain(project=reference, user=None)
        wait_for(lambda: round_status(ref_round.id) in ("done", "failed"), 120, "the reference round", poll=0.3)
        assert round_status(ref_round.id) == "done", workers.logs()

        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        first = _done(round_request_start(project=project, user=None).id, workers)
        label_batch(project, annotator("crash"))
        round_request_retrain(project=project, user=None)
        # Kill once the first adapter is published and the second is mid-way (checkpointed).
        wait_for(lambda: AdapterVersion.objects.filter(round=first).exists(), 120, "the first adapter", poll=0.05)
        workers.kill("w1")
        first.refresh_from_db()
        assert first.status == "training", "the round finished before the kill; the test proves nothing"
        assert AdapterVersion.objects.filter(round=first).count() < 2
        time.sleep(0.5)
        workers.start("w2")  # its startup re-enqueues what the round still needs
        try:
            wait_for(lambda: round_status(first.id) in ("done", "failed"), 120, "the resumed round", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason + workers.logs()

        ref_batch, ref_adapters = _rows(reference)
        batch, adapters = _rows(project)
        assert [b[1:] for b in batch] == [b[1:] for b in ref_batch]
        assert adapters == ref_adapters
        assert first.train_steps_done == first.train_steps_total


def test_a_unit_a_killed_worker_received_but_never_claimed_is_sent_again(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    """CI caught the kill test above hanging when the kill landed between a worker's receipt of the
    next adapter's message and its claim: the unit stayed queued, its message young, and the next
    worker's start did not send it again. Here the worker is held exactly there."""
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        first = round_request_start(project=project, user=None)  # its message waits for the worker
        key = f"{first.id}-adapter prod:1"
        (tmp_path / "stall").mkdir()
        workers.env.update(stall_env(f"claim={key}", tmp_path / "stall"))
        workers.start("w1")
        _done(first.id, workers)
        label_batch(project, annotator("a"))
        round_request_retrain(project=project, user=None)
        try:
            wait_for((tmp_path / "stall" / f"claim-{key}").exists, 120, "the worker to receive prod:1", poll=0.05)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        workers.kill("w1")
        unit = WorkClaim.objects.get(round=first, kind="train", key="prod:1")
        assert unit.status == "queued" and unit.attempts == 0, "the worker claimed it: the test proves nothing"
        workers.start("w2")  # the marker stays: w2 passes the point
        try:
            wait_for(lambda: round_status(first.id) in ("done", "failed"), 120, "the round after the kill", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason + workers.logs()
        assert AdapterVersion.objects.filter(round=first, arm="prod").count() == 2
