"""Calibration, thresholds with a bound, cascade tiers, audit and bias checks on small arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor import calibrate as cal


def synthetic(n: int, c: int, *, temperature: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from a calibrated distribution, then reported over-confident (p ** (1/T))."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2.5, size=(n, c))
    true_p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(c, p=row) for row in true_p])
    shown = true_p ** (1 / temperature)
    return shown / shown.sum(axis=1, keepdims=True), y


def test_temperature_recovers_the_distortion_and_lowers_ece() -> None:
    p, y = synthetic(4000, 4, temperature=0.5, seed=1)
    t = cal.fit_temperature(p, y)
    assert 1.8 < t < 2.2  # shown = true ** 2: dividing the log-probabilities by 2 undoes it
    before, after = cal.reliability(p, y), cal.reliability(cal.Calibrator("temperature", t).apply(p), y)
    assert after["ece"] < before["ece"] / 2


def test_vector_scaling_only_from_1000_items() -> None:
    p, y = synthetic(400, 3, temperature=0.7, seed=2)
    assert cal.fit_calibrator(p, y).method == "temperature"
    with pytest.raises(cal.CalibrationInputError, match="1000"):
        cal.fit_vector_scaling(p, y, temperature=1.0)
    big_p, big_y = synthetic(3000, 3, temperature=0.7, seed=3)
    # class-dependent bias: vector scaling can fix it, temperature cannot
    skewed = big_p * np.array([3.0, 1.0, 1.0])
    skewed /= skewed.sum(axis=1, keepdims=True)
    fitted = cal.fit_calibrator(skewed, big_y)
    assert fitted.method == "vector"
    assert cal.reliability(fitted.apply(skewed), big_y)["nll"] < cal.reliability(skewed, big_y)["nll"]


def test_calibrator_round_trips_through_json() -> None:
    c = cal.Calibrator("vector", 0.8, (1.0, 2.0), (0.1, -0.1))
    assert cal.Calibrator.from_json(c.to_json()) == c


def test_bad_input_is_named() -> None:
    with pytest.raises(cal.CalibrationInputError, match="no evaluation items"):
        cal.fit_temperature(np.zeros((0, 3)), np.zeros(0))
    with pytest.raises(cal.CalibrationInputError, match="outside"):
        cal.fit_temperature(np.full((2, 2), 0.5), np.array([0, 5]))


@pytest.mark.parametrize(("errors", "n", "expected"), [(0, 59, 0.0495), (0, 10, 0.2589), (3, 100, 0.0757)])
def test_clopper_pearson_matches_the_beta_quantile(errors: int, n: int, expected: float) -> None:
    # reference values: scipy.stats.beta.ppf(0.95, errors + 1, n - errors)
    assert cal.clopper_pearson_upper(errors, n) == pytest.approx(expected, abs=2e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 400), st.data())
def test_bound_is_above_the_point_estimate_and_shrinks_with_n(n: int, data: st.DataObject) -> None:
    errors = data.draw(st.integers(0, n - 1))
    bound = cal.clopper_pearson_upper(errors, n)
    assert errors / n <= bound <= 1.0
    assert cal.clopper_pearson_upper(errors * 4, n * 4) <= bound + 1e-9


def test_wilson_interval_contains_the_proportion() -> None:
    low, high = cal.wilson_interval(18, 20)
    assert low < 0.9 < high
    assert cal.wilson_interval(0, 0) == (0.0, 1.0)


def test_thresholds_meet_the_target_on_held_out_items_of_a_calibrated_case() -> None:
    """The bound keeps the precision above target on fresh items from the same distribution."""
    p, y = synthetic(20000, 3, temperature=1.0, seed=4)
    fit_p, fit_y, test_p, test_y = p[:8000], y[:8000], p[8000:], y[8000:]
    rules = cal.fit_thresholds(fit_p.argmax(1), fit_p.max(1), fit_y, label_names=["a", "b", "c"], target=0.95)
    assert all(r.threshold is not None and r.error_bound <= 0.05 for r in rules)
    pred, conf = test_p.argmax(1), test_p.max(1)
    accepted = cal.accept(pred, conf, [r.threshold for r in rules])
    assert accepted.mean() > 0.3
    for c in range(3):
        mask = accepted & (pred == c)
        assert (test_y[mask] == c).mean() >= 0.95


def test_classes_without_evidence_are_never_auto_accepted() -> None:
    p, y = synthetic(3000, 3, temperature=1.0, seed=5)
    pred, conf = p.argmax(1), p.max(1)
    keep = (pred != 2) | (np.arange(len(pred)) % 200 == 0)  # class 2 predicted ~5 times
    rules = cal.fit_thresholds(pred[keep], conf[keep], y[keep], label_names=["a", "b", "c"])
    assert rules[2].threshold is None and rules[2].needed > 0 and "more needed" in rules[2].reason
    assert not cal.accept(np.array([2]), np.array([1.0]), [r.threshold for r in rules])[0]


def test_a_class_that_is_always_half_wrong_gets_no_threshold() -> None:
    conf = np.linspace(0.5, 1.0, 200)
    correct = np.arange(200) % 2 == 0
    rule = cal.class_threshold(conf, correct, label="x", target=0.95)
    assert rule.threshold is None and "error bound" in rule.reason


def test_threshold_is_the_lowest_that_passes() -> None:
    conf = np.linspace(0.0, 1.0, 1000)
    correct = conf > 0.3  # every item above 0.3 is right
    rule = cal.class_threshold(conf, correct, label="x", target=0.95)
    assert rule.threshold is not None
    assert rule.error_bound <= 0.05
    lower = conf[conf < rule.threshold].max()
    n_lower = int((conf >= lower).sum())
    assert cal.clopper_pearson_upper(int((~correct[conf >= lower]).sum()), n_lower) > 0.05


def test_agreement_tier_needs_every_member() -> None:
    members = np.array([[[0.9, 0.1], [0.8, 0.2]], [[0.7, 0.3], [0.4, 0.6]]])
    pred, conf = cal.agreement_tier(members, cal.IDENTITY)
    assert pred.tolist() == [0, 0]
    assert conf[0] == pytest.approx(0.7) and conf[1] == 0.0


def test_permuted_tier_averages_consistent_variants() -> None:
    variants = np.array([[[0.9, 0.1], [0.6, 0.4]], [[0.7, 0.3], [0.3, 0.7]]])
    pred, conf = cal.permuted_tier(variants, cal.IDENTITY)
    assert conf[0] == pytest.approx(0.8) and conf[1] == 0.0


def test_label_order_bias_flags_a_model_that_reads_positions() -> None:
    perms = cal.code_permutations(3)
    assert len(perms) >= 2 and all(sorted(p) == [0, 1, 2] for p in perms)
    n = 50
    base = np.tile([0.8, 0.1, 0.1], (n, 1))  # always the label wearing code 0
    variants = np.stack([np.eye(3)[[perm.index(0)] * n] * 0.7 + 0.1 for perm in perms])
    report = cal.label_order_bias(base, variants, perms)
    assert report["flip_rate"] == 1.0 and report["warn"]
    assert np.argmax(report["code_prior"]) == 0
    steady = cal.label_order_bias(base, np.stack([base] * len(perms)), perms)
    assert steady["flip_rate"] == 0.0 and not steady["warn"]


def test_audit_pick_is_stable_and_near_the_share() -> None:
    ids = np.arange(20000)
    picked = cal.audit_pick(ids, share=0.02, seed=3)
    assert 0.015 < picked.mean() < 0.025
    assert (cal.audit_pick(ids[::-1], share=0.02, seed=3) == picked[::-1]).all()


def test_audit_alarm_fires_only_when_the_interval_is_under_target() -> None:
    assert cal.audit_status("a", 10, 20, target=0.95).alarm
    assert not cal.audit_status("a", 19, 20, target=0.95).alarm
    assert not cal.audit_status("a", 0, 0, target=0.95).alarm


def test_budget_and_eta() -> None:
    rows = cal.budget_estimate(n_items=3600, tokens_per_item=100, tokens_per_second=100, workers=(1, 4))
    assert rows[0]["gpu_hours"] == pytest.approx(1.0) and rows[1]["wall_hours"] == pytest.approx(0.25)
    with pytest.raises(cal.CalibrationInputError, match="no measured rate"):
        cal.budget_estimate(n_items=1, tokens_per_item=1, tokens_per_second=0)
    assert cal.eta_seconds(done=0, total=10, elapsed=5) is None
    assert math.isclose(cal.eta_seconds(done=5, total=10, elapsed=5) or 0, 5.0)
