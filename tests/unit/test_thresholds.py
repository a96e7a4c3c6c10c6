"""Fixed-sequence thresholds: the stated confidence holds in simulation where the scan it replaced
does not; classes without evidence say how many labels they need; realised precision and its alarm."""

from __future__ import annotations

import numpy as np
import pytest

from predictor import thresholds as th

DRAWS = 1000
DELTA = 0.05


def scan_lowest_passing(conf: np.ndarray, correct: np.ndarray, *, target: float, delta: float) -> float | None:
    """The search this module replaced: up to 2,000 candidate thresholds, the lowest whose bound passes."""
    if len(conf) < th.MIN_ITEMS_PER_CLASS:
        return None
    order = np.argsort(-conf, kind="stable")
    sorted_conf, wrong_cum = conf[order], np.cumsum(~correct[order])
    candidates = np.unique(conf)
    if len(candidates) > 2000:
        candidates = np.unique(np.quantile(conf, np.linspace(0, 1, 2000)))
    n_above = np.searchsorted(-sorted_conf, -candidates, side="right")
    errors = wrong_cum[np.maximum(n_above - 1, 0)]
    ok = (n_above >= th.MIN_ITEMS_PER_CLASS) & (errors <= th.max_errors(len(conf), target, delta)[n_above])
    passing = np.flatnonzero(ok)
    return float(candidates[passing[0]]) if len(passing) else None


def simulate(precision_at: object, *, n: int, target: float, seed: int) -> tuple[float, float, float]:
    """Draw calibration sets whose precision as a function of confidence is known; return how often
    each method accepts a threshold whose true precision is under the target (the family-wise error),
    and the new method's mean coverage."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.5, 1.0, 5001)
    p_correct = precision_at(grid)  # type: ignore[operator]
    # true precision above t: the mean of P(correct | s) over s >= t (s is uniform on [0.5, 1])
    above = np.cumsum(p_correct[::-1])[::-1] / np.arange(len(grid), 0, -1)

    def misses(t: float | None) -> bool:
        return t is not None and above[np.searchsorted(grid, t)] < target

    old_err = new_err = 0
    coverage = []
    for _ in range(DRAWS):
        conf = rng.uniform(0.5, 1.0, n)
        correct = rng.random(n) < precision_at(conf)  # type: ignore[operator]
        rule = th.class_threshold(conf, correct, label="x", target=target, delta=DELTA)
        new_err += misses(rule.threshold)
        old_err += misses(scan_lowest_passing(conf, correct, target=target, delta=DELTA))
        coverage.append(rule.coverage)
    return new_err / DRAWS, old_err / DRAWS, float(np.mean(coverage))


def test_family_wise_error_holds_where_the_old_scan_breaks_it() -> None:
    """Precision 0.89 at every confidence, target 0.90: every threshold is a wrong one to accept."""
    new, old, _ = simulate(lambda s: np.full_like(s, 0.89), n=2000, target=0.90, seed=1)
    assert new <= DELTA
    assert old > DELTA  # many looks at the same items: the scan's stated 95 % is not one


def test_family_wise_error_holds_on_a_calibrated_model_and_still_accepts() -> None:
    """P(correct | s) = s: the precision above t is (1 + t) / 2, the 0.90 target is met from t = 0.8."""
    new, _, coverage = simulate(lambda s: s, n=2000, target=0.90, seed=2)
    assert new <= DELTA
    assert coverage > 0.2  # thresholds are found: the guarantee does not come from refusing everything


def test_a_class_with_too_few_items_says_how_many_more_it_needs() -> None:
    rule = th.class_threshold(np.full(40, 0.99), np.ones(40, bool), label="x", target=0.95, delta=0.05)
    assert rule.threshold is None
    assert th.items_needed(0.95, 0.05) == 59  # 0.95^59 < 0.05 <= 0.95^58
    assert rule.needed == 19 and "19 more" in rule.reason


def test_the_sequence_stops_at_the_first_failure() -> None:
    """A wrong band near the top stops the search there, whatever passes below it."""
    conf = np.linspace(1.0, 0.5, 1000)
    correct = np.ones(1000, bool)
    correct[100:140] = False  # 40 errors just under the 100 most confident
    rule = th.class_threshold(conf, correct, label="x", target=0.95)
    assert rule.threshold is not None and rule.threshold >= conf[110]
    assert rule.error_bound <= 0.05


def test_bound_and_interval_match_the_beta_quantiles() -> None:
    # reference values: scipy.stats.beta.ppf
    assert th.clopper_pearson_upper(3, 100) == pytest.approx(0.0757, abs=2e-4)
    low, high = th.clopper_pearson_interval(90, 100)
    assert low == pytest.approx(0.8238, abs=2e-4) and high == pytest.approx(0.9510, abs=2e-4)


def test_realised_precision_alarms_only_when_the_interval_is_under_target() -> None:
    assert th.realised_precision("a", 80, 100, target=0.95).alarm
    assert not th.realised_precision("a", 93, 100, target=0.95).alarm
    assert not th.realised_precision("a", 0, 0, target=0.95).alarm


def test_bad_target_is_named() -> None:
    with pytest.raises(th.ThresholdInputError, match="target"):
        th.fit_thresholds(np.zeros(3), np.zeros(3), np.zeros(3), label_names=["a"], target=1.0)
