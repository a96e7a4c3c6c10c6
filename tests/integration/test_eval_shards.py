"""The evaluation in shards (loop option ``eval_shards``, the GPU profile's 4): the gpu workers score slices of
the evaluation side by side, then the one evaluate unit reads their scores. Two projects alike but for the
option go through the same round (the tiny model, the synchronous driver, the same seed): the same metrics; in
the sharded one every shard's unit is done before the evaluate unit, the shards scored every prompt and the
evaluate step scored none of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.models import Round, WorkClaim
from annotate.services import evaluation
from annotate.services.rounds import round_advance, round_request_start, round_run_sync
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]


def _round_to_done(shared_data: Path, tmp_path: Path, model_dir: Path, name: str) -> Round:
    (tmp_path / name).mkdir()
    project = trec_project(shared_data, tmp_path / name, model_dir=model_dir)
    row = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert label_batch(project, annotator(f"a-{name}")) > 0
    return round_run_sync(round_id=row.id)


def test_a_sharded_evaluation_gives_the_unsharded_metrics_and_the_evaluate_step_scores_nothing(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    options = json.loads(TEST_OPTIONS)
    use_loop_options(monkeypatch, settings, json.dumps({**options, "eval_shards": 0}))
    plain = _round_to_done(shared_data, tmp_path, tiny_llama_dir, "plain")
    assert plain.status == "done", plain.failure_reason
    assert not WorkClaim.objects.filter(round=plain, kind="eval_shard").exists()

    use_loop_options(monkeypatch, settings, json.dumps({**options, "eval_shards": 3}))
    scored_by: list[str] = []  # which unit each engine call of the evaluation came from
    make_engine = evaluation.ensemble.make_engine

    class Watched:
        def __init__(self, engine: Any, unit: str) -> None:
            self.engine, self.unit = engine, unit

        def score(self, renderer: Any, texts: Any, adapters: Any) -> Any:
            scored_by.append(self.unit)
            return self.engine.score(renderer, texts, adapters)

    real_shard, real_evaluate = evaluation._eval_shard, evaluation._evaluate

    def shard(row: Round, i: int) -> None:
        monkeypatch.setattr(evaluation.ensemble, "make_engine", lambda config: Watched(make_engine(config), f"s{i}"))
        real_shard(row, i)

    def evaluate(row: Round) -> None:
        monkeypatch.setattr(evaluation.ensemble, "make_engine", lambda config: Watched(make_engine(config), "e"))
        assert set(WorkClaim.objects.filter(round=row, kind="eval_shard").values_list("status", flat=True)) == {"done"}
        real_evaluate(row)

    monkeypatch.setattr(evaluation, "_eval_shard", shard)
    monkeypatch.setattr(evaluation, "_evaluate", evaluate)
    sharded = _round_to_done(shared_data, tmp_path, tiny_llama_dir, "sharded")
    assert sharded.status == "done", sharded.failure_reason
    shards = WorkClaim.objects.filter(round=sharded, kind="eval_shard").order_by("key")
    assert [(c.key, c.status) for c in shards] == [("0", "done"), ("1", "done"), ("2", "done")]
    assert {"s0", "s1", "s2"} <= set(scored_by) and "e" not in scored_by  # every prompt came from the shards
    assert sharded.eval_items_done == sharded.eval_items_total > 0

    for key in ("accuracy", "macro_f1", "test_n", "labels"):
        assert sharded.metrics[key] == plain.metrics[key], key
    assert np.allclose(sharded.metrics["ece"], plain.metrics["ece"], atol=1e-6)
    assert sharded.metrics["prod"]["confusion"] == plain.metrics["prod"]["confusion"]
    assert sharded.metrics.get("arms", {}).keys() == plain.metrics.get("arms", {}).keys()
    assert round_advance(sharded.id) == [] or sharded.status == "done"


@pytest.mark.celery
@pytest.mark.timeout(400)
def test_two_gpu_workers_take_the_evaluation_shards_through_the_broker(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    """The deployed path: the shards are ``annotate.gpu.eval_shard`` tasks on the gpu queue, two gpu workers
    take them, and the last shard's follow-up sends the evaluate task."""
    from annotate.services.rounds import round_request_retrain
    from tests.integration.round_helpers import live_loop, round_status, wait_for

    use_loop_options(monkeypatch, settings, json.dumps({**json.loads(TEST_OPTIONS), "eval_shards": 4}))
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.start("cpu", queues="default,io")
        workers.start("g1", queues="gpu")
        workers.start("g2", queues="gpu")
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        first = round_request_start(project=project, user=None)
        try:
            wait_for(lambda: round_status(first.id) in ("labeling", "failed"), 180, "the cold start", poll=0.3)
            assert label_batch(project, annotator("g")) > 0
            round_request_retrain(project=project, user=None)
            wait_for(lambda: round_status(first.id) in ("done", "failed"), 240, "the round's end", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        first.refresh_from_db()
        assert first.status == "done", first.failure_reason + workers.logs()
        shards = WorkClaim.objects.filter(round=first, kind="eval_shard")
        assert sorted(shards.values_list("key", "status")) == [(str(i), "done") for i in range(4)]
        assert WorkClaim.objects.get(round=first, kind="evaluate").status == "done"
        assert first.eval_items_done == first.eval_items_total > 0 and "accuracy" in first.metrics
