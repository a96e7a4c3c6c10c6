"""Round services without a broker (the synchronous driver): the state machine's guard, a cold
start, labels, training and evaluation, a scored round 2 (with the blended predictor's held-out
evidence), and the idempotence of every step."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.loopconfig import config_fingerprint
from annotate.models import AdapterVersion, BatchItem, Item, Prediction, Round, ScoreShard
from annotate.selectors import loop as loop_sel
from annotate.services import evaluation, rounds, scoring, selection
from annotate.services.round_state import round_transition
from annotate.services.rounds import RoundError, round_request_start, round_run_sync
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)


def test_transition_is_guarded(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    new = round_request_start(project=project, user=None, run_here=True)
    assert round_transition(new.id, "pending", "selecting")
    assert not round_transition(new.id, "pending", "selecting")  # a replay cannot step twice
    with pytest.raises(RoundError):
        round_transition(new.id, "selecting", "done")
    with pytest.raises(RoundError, match="still selecting"):
        round_request_start(project=project, user=None, run_here=True)


def test_cold_start_label_train_evaluate_then_scored_round(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = round_request_start(project=project, user=None, run_here=True)
    first = round_run_sync(round_id=first.id)
    assert first.status == "labeling" and first.strategy == "cold-start"
    batch = list(BatchItem.objects.filter(round=first).values_list("item_id", "source"))
    assert len(batch) == 8 and {s for _, s in batch} == {"cold"}
    assert not Item.objects.filter(id__in=[i for i, _ in batch], is_test=True).exists()
    selection.round_select(round_id=first.id)  # a replay: no second batch
    assert BatchItem.objects.filter(round=first).count() == 8

    assert label_batch(project, annotator()) == 8
    first = round_run_sync(round_id=first.id)
    assert first.status == "done", first.failure_reason
    prod = list(AdapterVersion.objects.filter(round=first, arm="prod").order_by("k"))
    assert [a.k for a in prod] == [0, 1] and len({a.content_hash for a in prod}) == 2  # own seed per member
    assert first.metrics["labels"] == 8 and 0.0 <= first.metrics["accuracy"] <= 1.0
    # What was trained, from the adapters' own files (CPU profile: every layer; 3 steps of 4 a member).
    adapters = first.metrics["adapters"]
    assert (adapters["k"], adapters["rank"], adapters["layers"], adapters["steps"], adapters["wide"]) == (
        2, 8, [0], 3, False
    )  # fmt: skip
    assert "confusion" in first.metrics["prod"] and "reliability" in first.metrics["prod"]
    assert "<svg" in first.metrics["curve_svg"] and "<svg" in first.metrics["reliability_svg"]
    assert first.cost["labels"] == 8 and first.cost["human_minutes"] == pytest.approx(8 * 4 / 60, abs=0.01)
    assert first.train_steps_done == first.train_steps_total > 0

    second = round_request_start(project=project, user=None, run_here=True)
    second = round_run_sync(round_id=second.id)
    assert second.status == "labeling", second.failure_reason
    assert second.strategy == "active" and second.items_scored == second.items_to_score > 0
    assert ScoreShard.objects.filter(round=second, status="done").count() == 2
    sources = set(BatchItem.objects.filter(round=second).values_list("source", flat=True))
    assert sources == {"active", "random"}
    labeled = set(BatchItem.objects.filter(round=first).values_list("item_id", flat=True))
    assert not labeled & set(BatchItem.objects.filter(round=second).values_list("item_id", flat=True))
    assert Prediction.objects.filter(round=second, adapter_set_hash=second.adapter_set_hash).count() > 0

    # A rerun of scoring rescores nothing: every shard is done and its file untouched.
    mtimes = [os.stat(p).st_mtime_ns for p in ScoreShard.objects.filter(round=second).values_list("path", flat=True)]
    for shard in range(2):
        scoring.score_shard_run(round_id=second.id, shard=shard)
    assert [
        os.stat(p).st_mtime_ns for p in ScoreShard.objects.filter(round=second).values_list("path", flat=True)
    ] == mtimes
    assert set(ScoreShard.objects.filter(round=second).values_list("attempts", flat=True)) == {1}

    label_batch(project, annotator())
    second = round_run_sync(round_id=second.id)
    assert second.status == "done", second.failure_reason
    arms = {a.arm for a in AdapterVersion.objects.filter(round=second)}
    assert arms == {"prod", "scratch", "active", "random"}  # round 2 is a scratch round (scratch_every=2)
    assert second.metrics["arms"]["active"]["labels"] == second.metrics["arms"]["random"]["labels"]
    assert "gain_text" in second.metrics and "scratch_vs_warm" in second.metrics
    warm = AdapterVersion.objects.get(round=second, arm="prod", k=0).warm_from
    assert warm is not None and warm.round_id == first.id
    assert {p["arm"] for p in second.metrics["points"]} == {"prod", "active", "random"}

    # The blended predictor: round 1 had nothing held out; round 2's batch was stored as held-out
    # evidence (predicted by round 1's adapters and a proxy on round 1's labels) and fitted the weight.
    assert first.metrics["blend"]["weight"] == 1.0 and first.metrics["blend"]["heldout_n"] == 0
    assert not evaluation.heldout_path(first).exists()
    with np.load(evaluation.heldout_path(second)) as held:
        rows = dict(BatchItem.objects.filter(round=second).values_list("item_id", "source"))
        assert sorted(held["item_ids"].tolist()) == sorted(rows)
        assert held["uniform"].tolist() == [rows[int(i)] == "random" for i in held["item_ids"]]
        index = loop_sel.label_index(project=project)
        gold = dict(Item.objects.filter(id__in=list(rows)).values_list("id", "final_label_id"))
        assert held["y"].tolist() == [index[gold[int(i)]] for i in held["item_ids"]]
        assert held["p_llm"].shape == held["p_proxy"].shape == (len(rows), len(index))
    blend_record = second.metrics["blend"]
    assert blend_record["heldout_n"] == len(rows) and blend_record["evidence"]["batch"]["n"] == len(rows)
    assert blend_record["evidence"]["uniform"]["n"] == sum(s == "random" for s in rows.values())
    assert second.metrics["accuracy"] == blend_record["test_accuracy"]["blend"]
    # Frozen with loop option blend "off": the same round's predictor is the adapters alone, and says
    # nothing of a blend.
    test_ids, texts, y = loop_sel.test_items(project=project)
    frozen = {**second.config, "loop": {**second.config["loop"], "blend": "off"}}
    Round.objects.filter(id=second.id).update(config=frozen, config_fingerprint=config_fingerprint(frozen))
    second.refresh_from_db()
    scores, _, off_record, _ = evaluation._score_sets(second, test_ids, texts, y, [], [])
    assert off_record == {}
    assert scores["prod"][0]["accuracy"] == pytest.approx(blend_record["test_accuracy"]["llm"])


def test_selection_refuses_scores_of_an_older_adapter_set(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = round_request_start(project=project, user=None, run_here=True)
    round_run_sync(round_id=first.id)
    label_batch(project, annotator())
    round_run_sync(round_id=first.id)
    second = round_request_start(project=project, user=None, run_here=True)
    round_run_sync(round_id=second.id, until=("selecting",))
    Round.objects.filter(id=second.id).update(adapter_set_hash="an-older-set")
    from scoring.cache import StaleScoresError

    with pytest.raises(StaleScoresError):
        selection.round_select(round_id=second.id)
    assert not BatchItem.objects.filter(round=second).exists()


def test_auto_retrain_starts_training_once_the_share_is_labelled(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, django_capture_on_commit_callbacks
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    project.auto_retrain_share = 0.5
    project.save(update_fields=["auto_retrain_share"])
    first = round_request_start(project=project, user=None, run_here=True)
    first = round_run_sync(round_id=first.id, until=("labeling",))
    assert first.status == "labeling"
    user = annotator()
    with django_capture_on_commit_callbacks(execute=True):
        label_batch(project, user, limit=3)  # 3 of 8: under the 50 % share
    assert Round.objects.get(id=first.id).status == "labeling"
    with rounds.driving(first.id), django_capture_on_commit_callbacks(execute=True):
        label_batch(project, user, limit=1)  # 4 of 8: the labelling service starts training by itself
    assert Round.objects.get(id=first.id).status != "labeling"
