"""The bulk job on real Celery workers and real Redis: calibration and a run through the gpu queue,
a worker SIGKILLed mid-run whose shard another worker reclaims — the rows come out identical to a
clean in-process scoring of the same items — and a re-run that finds nothing to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.models import AutoLabel, AutolabelRun, AutolabelShard, Calibration
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    live_loop,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data]


def expected_rows(project: Any, item_ids: list[int]) -> dict[int, tuple[int, float]]:
    """(label id, calibrated confidence) of each item, scored in this process from scratch."""
    from predictor import calibrate as cal

    ctx = auto._context(project)
    calibration = Calibration.objects.filter(project=project, status="done").latest("id")
    texts = dict(project.items.filter(id__in=item_ids).values_list("id", "text"))
    scores = auto._score(ctx.engine, ctx.renderer, [texts[i] for i in item_ids], ctx.refs, 64)
    pred, conf = cal.model_tier(scores.p.mean(axis=0), cal.Calibrator.from_json(calibration.calibrator))
    labels = list(auto.loop_sel.label_index(project=project))
    return {i: (labels[int(pred[n])], float(conf[n])) for n, i in enumerate(item_ids)}


def test_a_killed_worker_resumes_to_identical_rows_and_a_rerun_is_a_no_op(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    # The worker stalls in the second shard after its first chunk (annotate/steppoints.py, devtools/stall.py): the kill
    # lands mid-shard however fast the machine is (every other chunk and shard runs through).
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("autolabel", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, pool=136)
        workers.start("a")
        wait_workers(["a"], timeout=120)
        calibration = auto.calibration_request(project=project, cascade="agreement")
        wait_for(lambda: Calibration.objects.get(id=calibration.id).status == "done", 240, "the calibration")

        for shard in (0, *range(2, 64)):  # only shard 1 stalls (a marker says "already passed")
            (stall_dir / f"autolabel-{shard}").touch()
        run = auto.run_request(project=project, max_shards_in_flight=1, chunk_size=4, shard_items=20)

        def items_done() -> int:
            return int(AutolabelRun.objects.values_list("items_done", flat=True).get(id=run.id))

        wait_for(lambda: (stall_dir / "autolabel-1").exists(), 240, "the worker to stall in shard 1")
        first = AutolabelShard.objects.get(run=run, shard=0)
        assert first.status == "done" and items_done() == first.n_items + 4  # shard 0, then one chunk of 1
        workers.kill("a")
        frozen = AutolabelRun.objects.get(id=run.id)
        assert frozen.status == "running" and frozen.items_done < frozen.n_items == 120
        assert AutolabelShard.objects.filter(run=run, status="done").count() < frozen.n_shards

        workers.start("b")  # its start re-enqueues the running run's shards; the dead worker's is reclaimed
        wait_for(lambda: AutolabelRun.objects.get(id=run.id).status == "done", 300, "the run to finish")
        finished = AutolabelRun.objects.get(id=run.id)
        assert finished.items_done == finished.n_items == 120  # chunks commit with their count: none twice
        shards = list(AutolabelShard.objects.filter(run=run))
        assert {s.status for s in shards} == {"done"} and max(s.attempts for s in shards) <= 2

        rows = {r.item_id: r for r in AutoLabel.objects.filter(run=run)}
        assert len(rows) == 120 == AutoLabel.objects.count()  # one row per item: no duplicates
        expected = expected_rows(project, sorted(rows))
        for item_id, (label_id, confidence) in expected.items():
            assert rows[item_id].label_id == label_id
            assert rows[item_id].confidence == pytest.approx(confidence, abs=1e-4)
        assert {r.decision for r in rows.values()} == {"escalated"}  # 16 eval items: no class auto-accepted
        tiers = auto_sel.tier_counts(run=finished)
        assert tiers[0]["tried"] == 120 and tiers[1]["tier"] == "agreement"

        again = auto.run_request(project=project)
        wait_for(lambda: AutolabelRun.objects.get(id=again.id).status == "done", 120, "the re-run")
        assert AutolabelRun.objects.get(id=again.id).n_items == 0
        assert AutoLabel.objects.count() == 120
        assert np.isfinite([r.confidence for r in rows.values()]).all()


def test_a_calibration_killed_mid_fit_resumes_on_the_next_worker(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    """The worker stalls after scoring the calibration's items, before writing anything; SIGKILLed
    there, the calibration stays running on a dead worker until the next worker's start takes it over
    (the claim) and fits it from the start."""
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)  # this process fits the same way as the workers
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("calibrate", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
        workers.start("a")
        wait_workers(["a"], timeout=120)
        calibration = auto.calibration_request(project=project, cascade="none")
        marker = stall_dir / f"calibrate-{calibration.id}"
        wait_for(
            lambda: marker.exists() or Calibration.objects.get(id=calibration.id).status in ("done", "failed"),
            240,
            "the calibration to stall",
        )
        assert marker.exists(), Calibration.objects.get(id=calibration.id).status
        held = Calibration.objects.get(id=calibration.id)
        assert held.status == "running" and held.attempts == 1 and held.worker
        workers.kill("a")
        assert Calibration.objects.get(id=calibration.id).status == "running"  # nobody else fits it yet

        workers.start("b")  # its start finds the calibration running on a dead worker and re-enqueues it
        wait_for(lambda: Calibration.objects.get(id=calibration.id).status == "done", 240, "the resumed calibration")
        done = Calibration.objects.get(id=calibration.id)
        assert done.attempts == 2 and done.worker != held.worker
        assert done.n_items == 16 and len(done.thresholds["model"]) == 6 and not done.error
        # The same result as a fit that was never killed: the same inputs fitted again in this process.
        clean = auto._fit(done)
        for field in ("calibrator", "thresholds", "model_version", "n_items", "n_calibration"):
            assert getattr(done, field) == clean[field], field
