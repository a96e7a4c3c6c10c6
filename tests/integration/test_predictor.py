"""One predictor (predictor/model.py) for selection, evaluation and auto-labelling, against the real
database: a round whose evaluation fits a blend weight that gives the proxy a share; the probabilities
the ML page's evaluation computes, those the next round's selection stores and those auto-labelling
calibrates and decides on are the same for the same items, under one fingerprint; and changing the
blend weight or the proxy's training labels changes the fingerprint and refuses auto-labelling.

The engine is a stand-in whose scores depend only on (adapter, text), so the sites' different
batches cannot hide a difference (the real engines' own batching noise is their parity tests')."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.models import AutoLabel, Prediction, Round
from annotate.selectors import loop as loop_sel
from annotate.selectors.round_display import metric_lines
from annotate.services import autolabel as auto
from annotate.services.predictor import RoundPredictor
from annotate.services.round_state import read_plan, write_plan
from annotate.services.rounds import round_request_start, round_run_sync
from predictor import blend
from predictor.model import Predictor
from scoring.engines.base import ScoreResult
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]


class HashEngine:
    """Scores that depend only on the adapter and the text (a Dirichlet draw seeded by both)."""

    def score(self, renderer: Any, texts: Sequence[str], adapters: Sequence[Any]) -> ScoreResult:
        c, members = len(renderer.label_token_ids), list(adapters) or [None]
        p = np.empty((len(members), len(texts), c), np.float32)
        for k, adapter in enumerate(members):
            for i, text in enumerate(texts):
                key = f"{adapter.name if adapter else 'base'}|{renderer.prompt_hash}|{text}".encode()
                seed = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
                p[k, i] = np.random.default_rng(seed).dirichlet(np.ones(c))
        mass = np.full((len(members), len(texts)), 0.9, np.float32)
        return ScoreResult(p=p, mass=mass, truncated=np.zeros(len(texts), bool), tokens=10 * len(texts))


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    monkeypatch.setattr("training.ensemble.make_engine", lambda config: HashEngine())
    half = blend.BlendFit(0.5, 0, {"llm": None, "proxy": None, "blend": None}, "test: half adapters, half proxy")
    monkeypatch.setattr("predictor.blend.fit_weight", lambda evidence: half)


class Seen:
    """Every call of RoundPredictor.probabilities by site: the uncalibrated predictor's fingerprint and
    distribution per text."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.site = ""
        self.rows: dict[str, dict[str, tuple[str, np.ndarray]]] = {}
        original = RoundPredictor.probabilities

        def spy(rp: RoundPredictor, member_p: np.ndarray, texts: Sequence[str], hashes: Any = None) -> np.ndarray:
            out = original(rp, member_p, texts, hashes)
            base = RoundPredictor(rp.predictor.uncalibrated(), rp.source, rp.n_classes, rp._fitted)
            p = original(base, member_p, texts, hashes) if rp.predictor.calibrator is not None else out
            for text, row in zip(texts, p, strict=True):
                self.rows.setdefault(self.site, {})[text] = (base.fingerprint, row)
            return out

        monkeypatch.setattr(RoundPredictor, "probabilities", spy)

    def common(self, a: str, b: str) -> list[str]:
        return sorted(set(self.rows[a]) & set(self.rows[b]))


def _calibrate(project: Any) -> Any:
    holder: list[Any] = []
    auto.run_inline(
        lambda send: holder.append(auto.calibration_request(project=project, cascade="none", dispatch=send))
    )
    row = type(holder[0]).objects.get(id=holder[0].id)
    assert row.status == "done", row.error
    return row


def _run(project: Any) -> Any:
    holder: list[Any] = []
    auto.run_inline(lambda send: holder.append(auto.run_request(project=project, audit_share=0.0, dispatch=send)))
    return type(holder[0]).objects.get(id=holder[0].id)


def test_ml_page_selection_and_autolabelling_use_one_predictor(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = Seen(monkeypatch)
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    label_batch(project, annotator())
    seen.site = "evaluation"
    first = round_run_sync(round_id=first.id)
    assert first.status == "done", first.failure_reason
    record = first.metrics["predictor"]
    predictor = Predictor.from_json(record)
    fp = record["fingerprint"]
    assert predictor.fingerprint() == fp and predictor.weight == 0.5 and predictor.proxy is not None
    assert predictor.proxy.n_labels == len(read_plan(first)["prod:0"]) == 8
    assert dict(metric_lines(first.metrics))["Model version"] == fp[:12]  # what the ML page shows

    seen.site = "selection"
    second = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert second.status == "labeling", second.failure_reason
    stored = list(Prediction.objects.filter(round=second).select_related("item"))
    assert stored and {p.model_version for p in stored} == {fp}
    for p in stored:
        assert p.probs == [round(float(x), 5) for x in seen.rows["selection"][p.item.text][1]]

    seen.site = "calibration"
    calibration = _calibrate(project)
    assert calibration.model_version == fp and calibration.predictor["fingerprint"] == fp
    seen.site = "autolabel"
    run = _run(project)
    assert run.status == "done", run.reason
    assert run.model_version != fp  # the calibrated predictor: the same parts plus the calibrator
    assert (
        run.model_version == predictor.calibrated(auto.cal.Calibrator.from_json(calibration.calibrator)).fingerprint()
    )
    assert set(AutoLabel.objects.filter(run=run).values_list("model_version", flat=True)) == {run.model_version}

    # The ML page's test items are the calibration's; the next round's candidates are in the pool run.
    pairs = [("evaluation", "calibration"), ("selection", "autolabel")]
    for a, b in pairs:
        common = seen.common(a, b)
        assert common, (a, b)
        for text in common:
            (fp_a, p_a), (fp_b, p_b) = seen.rows[a][text], seen.rows[b][text]
            assert fp_a == fp_b == fp
            np.testing.assert_array_equal(p_a, p_b)
    # What the ML page reports is computed from exactly these distributions.
    _, test_texts, y = loop_sel.test_items(project=project)
    assert set(test_texts) <= set(seen.common("evaluation", "calibration"))
    predicted = np.array([seen.rows["calibration"][t][1].argmax() for t in test_texts])
    assert first.metrics["accuracy"] == pytest.approx(float((predicted == y).mean()))


def test_a_changed_blend_weight_or_proxy_labels_refuses_auto_labelling(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    first = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    label_batch(project, annotator())
    first = round_run_sync(round_id=first.id)
    assert first.status == "done", first.failure_reason
    fitted = _calibrate(project)
    original_metrics, original_plan = dict(first.metrics), read_plan(first)

    Round.objects.filter(id=first.id).update(
        metrics={**original_metrics, "blend": {**first.metrics["blend"], "weight": 0.7}}
    )
    refused = _run(project)
    assert refused.status == "refused" and "the blend weight changed" in refused.reason, refused.reason
    assert fitted.model_version[:12] in refused.reason and "recalibrate" in refused.reason

    Round.objects.filter(id=first.id).update(metrics=original_metrics)
    (item_id, y), *rest = original_plan["prod:0"]
    write_plan(first, {**original_plan, "prod:0": [[item_id, (y + 1) % 6], *rest]})  # one label changed
    refused = _run(project)
    assert refused.status == "refused" and "the proxy's training labels changed" in refused.reason, refused.reason
    assert "the blend weight" not in refused.reason

    write_plan(first, original_plan)
    assert _run(project).status == "done"  # the predictor it was calibrated on again
    assert not AutoLabel.objects.exclude(model_version="").filter(run__status="refused").exists()
