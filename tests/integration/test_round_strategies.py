"""Each selection strategy through the round service (synchronous driver, real DB, tiny model): a
cold start whatever was asked for, then a random round that never scores, an uncertainty-only round
that takes the top of its own scores, and a k-center-only round picked from the whole pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acquisition.batch import select_cold_start
from acquisition.strategies import Inputs, strategy
from annotate.models import BatchItem, Item, Prediction, Project, Round, ScoreShard
from annotate.selectors import loop as loop_sel
from annotate.services import proxy, selection
from annotate.services.rounds import round_request_start, round_run_sync
from scoring.pipeline import step_rng
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)


def _to_selecting(project: Project, strategy: str) -> Round:
    row = round_request_start(project=project, user=None, strategy=strategy, run_here=True)
    assert row.strategy == strategy
    return round_run_sync(round_id=row.id, until=("selecting", "labeling", "failed"))


def _finish(row: Round) -> Round:
    row = round_run_sync(round_id=row.id)
    assert row.status == "labeling", row.failure_reason
    label_batch(row.project, annotator())
    row = round_run_sync(round_id=row.id)
    assert row.status == "done", row.failure_reason
    return row


def _batch(row: Round) -> list[tuple[int, str, float | None]]:
    return list(BatchItem.objects.filter(round=row).order_by("rank").values_list("item_id", "source", "uncertainty"))


def test_each_strategy_selects_through_the_round_service(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = _to_selecting(project, "uncertainty-only")
    assert first.strategy == "cold-start"  # no adapter yet: nothing to be uncertain about
    _finish(first)

    random_round = _to_selecting(project, "random")
    assert random_round.status == "selecting" and random_round.strategy == "random"
    assert not ScoreShard.objects.filter(round=random_round).exists()  # never scored
    random_round = _finish(random_round)
    assert random_round.items_to_score == 0 and not Prediction.objects.filter(round=random_round).exists()
    assert {(s, u) for _, s, u in _batch(random_round)} == {("random", None)}

    unc = _to_selecting(project, "uncertainty-only")
    assert unc.items_scored == unc.items_to_score > 0
    eligible = set(loop_sel.eligible_ids(project=project).tolist())
    unc = _finish(unc)  # the selection writes the round's predictions, then picks
    scores = dict(Prediction.objects.filter(round=unc, item_id__in=eligible).values_list("item_id", "uncertainty"))
    batch = _batch(unc)
    top = sorted((u for u in scores.values() if u is not None), reverse=True)[: len(batch)]
    assert [u for _, _, u in batch] == pytest.approx(top)  # the most uncertain eligible items, in order
    assert {s for _, s, _ in batch} == {"active"}

    kc = _to_selecting(project, "kcenter-only")
    assert kc.status == "selecting" and not ScoreShard.objects.filter(round=kc).exists()
    ids = loop_sel.eligible_ids(project=project)
    labeled = loop_sel.labeled_items(project=project)
    emb, labeled_emb = proxy.embeddings(*selection._texts(ids)), proxy.embeddings(labeled.texts, labeled.hashes)
    inputs = Inputs(n=len(ids), emb=emb, labeled_emb=labeled_emb, random_share=0.25)
    expected = strategy("kcenter-only").choose(inputs, b=8, rng=step_rng(kc.seed, "select"))
    kc = _finish(kc)
    assert [i for i, _, _ in _batch(kc)] == ids[expected.indices].tolist()
    assert {(s, u) for _, s, u in _batch(kc)} == {("active", None)}

    picked = [i for r in (first, random_round, unc, kc) for i, _, _ in _batch(r)]
    assert len(picked) == len(set(picked)) == 32  # four batches of 8, never an item twice
    assert not Item.objects.filter(id__in=picked, is_test=True).exists()


def test_choose_batch_only_reads_and_selection_record_writes(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    """Choosing a scored round's batch writes nothing (no prediction, no review move, no metric, no
    batch row); selection_record then writes all of it and moves the round to labeling."""
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    _finish(_to_selecting(project, "active"))  # the cold round
    row = _to_selecting(project, "uncertainty-only")
    assert row.status == "selecting"

    def state() -> tuple[Any, ...]:
        items = list(Item.objects.filter(project=project).order_by("id").values_list("state", flat=True))
        metrics = Round.objects.get(id=row.id).metrics
        return Prediction.objects.count(), items, metrics, BatchItem.objects.filter(round=row).count()

    before = state()
    batch = selection.choose_batch(round=row)
    assert state() == before
    assert len(batch.rows) == 8 and batch.explanation.startswith("the 8 most uncertain")
    assert batch.scored is not None and {s for _, s, _ in batch.rows} == {"active"}

    selection.selection_record(round=row, batch=batch)
    row.refresh_from_db()
    assert row.status == "labeling" and _batch(row) == batch.rows
    assert Prediction.objects.filter(round=row).count() == len(batch.scored.ids)
    assert row.metrics["choice"] == batch.explanation
    assert row.metrics["eligible_scored"] == batch.metrics["eligible_scored"] and "review_bucket" in row.metrics


@pytest.mark.parametrize("asked", ["active", "random"])
def test_a_cold_round_picks_typical_items_unless_the_project_runs_random(
    asked: str, shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    import json

    use_loop_options(monkeypatch, settings, json.dumps({**json.loads(TEST_OPTIONS), "cold_mode": "typical"}))
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    ids = loop_sel.eligible_ids(project=project)
    emb = proxy.embeddings(*selection._texts(ids))
    row = _to_selecting(project, asked)
    assert row.strategy == "cold-start"
    mode = "random" if asked == "random" else "typical"  # the baseline's seed set stays uniform
    assert row.metrics["cold_mode"] == mode
    expected = select_cold_start(emb, emb[:0], b=8, rng=step_rng(row.seed, "select"), mode=mode)  # type: ignore[arg-type]
    row = _finish(row)
    assert [i for i, _, _ in _batch(row)] == ids[expected.indices].tolist()
    assert {s for _, s, _ in _batch(row)} == {"cold"}


def test_a_typical_cold_round_embeds_a_seeded_sample_of_a_large_pool(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    import json

    import numpy as np

    import acquisition.batch

    monkeypatch.setattr(acquisition.batch, "TYPICAL_MAX_POINTS", 20)  # the pool has 44 eligible items
    use_loop_options(monkeypatch, settings, json.dumps({**json.loads(TEST_OPTIONS), "cold_mode": "typical"}))
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    eligible = loop_sel.eligible_ids(project=project)
    row = _to_selecting(project, "active")
    sample = eligible[np.sort(step_rng(row.seed, "cold-sample").choice(len(eligible), size=20, replace=False))]
    expected = select_cold_start(
        proxy.embeddings(*selection._texts(sample)),
        np.zeros((0, 384), np.float32),
        b=8,
        rng=step_rng(row.seed, "select"),
        mode="typical",
    )
    row = _finish(row)
    assert [i for i, _, _ in _batch(row)] == sample[expected.indices].tolist()


@pytest.mark.parametrize(
    ("deployment", "project_mode", "expected"),
    [("typical", "random", "random"), ("random", "typical", "typical"), ("random", "", "random")],
)
def test_a_project_may_choose_its_own_cold_mode(
    deployment: str,
    project_mode: str,
    expected: str,
    shared_data: Path,
    tiny_llama_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    import json

    use_loop_options(monkeypatch, settings, json.dumps({**json.loads(TEST_OPTIONS), "cold_mode": deployment}))
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, cold_mode=project_mode)
    row = _to_selecting(project, "active")
    assert row.strategy == "cold-start" and row.metrics["cold_mode"] == expected


def test_committee_blend_draws_by_the_fitted_predictor_and_says_so(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Loop option committee "blend": an active round's draws follow the blend weight the latest
    finished round's evaluation fitted on held-out labels; until one was fitted (the seed round's w = 1
    is no fit) the K + 1 equal members draw. The round's metrics and the ML page's "Picked by" say which."""
    import json

    from annotate.selectors.round_display import metric_lines
    from predictor.blend import MIN_HELDOUT

    use_loop_options(monkeypatch, settings, json.dumps({**json.loads(TEST_OPTIONS), "committee": "blend"}))
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = _finish(_to_selecting(project, "active"))
    assert first.strategy == "cold-start" and "committee" not in (first.metrics or {})  # a cold round draws none
    rounds = [first]
    for _ in range(3):
        rounds.append(_finish(_to_selecting(project, "active")))
    for before, row in zip(rounds, rounds[1:], strict=False):
        fit = before.metrics["blend"]
        fitted = fit["weight"] if fit["heldout_n"] >= MIN_HELDOUT else None
        assert row.metrics["committee"] == {"mode": "blend", "weight": fitted}, (before.number, fit)
        assert len(_batch(row)) == 8 and {s for _, s, _ in _batch(row)} <= {"active", "random"}
    assert rounds[1].metrics["committee"]["weight"] is None  # after the seed round: nothing held out yet
    assert dict(metric_lines(rounds[1].metrics))["Picked by"].endswith("(no blend weight fitted yet)")
    assert isinstance(rounds[3].metrics["committee"]["weight"], float)  # rounds 2 and 3: 16 held-out labels
    assert dict(metric_lines(rounds[3].metrics))["Picked by"].startswith("the uncertainty of the blended predictor")
