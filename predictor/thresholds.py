"""Per-class auto-accept thresholds whose stated confidence holds: fixed-sequence testing
(Learn-then-Test, Angelopoulos et al. 2021) with a Clopper–Pearson test at each step.

For one class, every candidate threshold t is a hypothesis H_t: "the precision of the items predicted
this class with confidence >= t is under the target". Candidates are tested in a fixed order, from the
most confident downward, each at level δ, and the search stops at the first that cannot be rejected:
the family-wise error (any accepted threshold whose true precision is under the target) is then at
most δ. Scanning every candidate and taking the lowest that passes (the search this replaces) tests
the same hypotheses without that order, and its error grows with the number of candidates.

Conventions: ``conf`` is the calibrated probability of the predicted class of the calibration items
predicted this class, ``correct`` whether a person gave them that class. No Django here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DEFAULT_TARGET = 0.95
DEFAULT_DELTA = 0.05  # the chance that some accepted class misses its target, per class
MIN_ITEMS_PER_CLASS = 25  # never fewer calibration items above a threshold, even when the bound allows it


class ThresholdInputError(ValueError):
    """Arrays of the wrong shape, a target or δ out of range."""


# -- the binomial test ------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (Numerical Recipes, modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return beta_cdf(1.0 - p, float(n - k), float(k + 1))


def clopper_pearson_upper(errors: int, n: int, alpha: float = DEFAULT_DELTA) -> float:
    """One-sided (1 − alpha) Clopper–Pearson upper bound on a binomial rate with ``errors`` of ``n``:
    the p with P(X ≤ errors | n, p) = alpha, i.e. the (1 − alpha) quantile of Beta(errors + 1, n − errors)."""
    if n <= 0:
        return 1.0
    if errors < 0 or errors > n:
        raise ThresholdInputError(f"errors must be in 0..{n}, got {errors}")
    if errors >= n:
        return 1.0
    a, b = errors + 1.0, float(n - errors)
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: 2^-60 is far below any rate we report
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < 1.0 - alpha:
            lo = mid
        else:
            hi = mid
    return hi


def clopper_pearson_interval(successes: int, n: int, alpha: float = DEFAULT_DELTA) -> tuple[float, float]:
    """Two-sided (1 − alpha) Clopper–Pearson interval of a proportion; (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    low = 1.0 - clopper_pearson_upper(n - successes, n, alpha / 2)
    high = clopper_pearson_upper(successes, n, alpha / 2)
    return max(0.0, low), min(1.0, high)


def items_needed(target: float, delta: float) -> int:
    """The fewest items on which the bound can pass at all (all of them right): target^n <= δ."""
    return math.ceil(math.log(delta) / math.log(target))


@lru_cache(maxsize=64)
def _max_errors(n_max: int, target: float, delta: float) -> np.ndarray:
    """e[n]: the most errors among n items with which H (precision < target) is still rejected at
    level δ (P(X <= e | n, 1 - target) <= δ), -1 where none is. Nondecreasing by at most 1 per n,
    so one binomial CDF per n."""
    out = np.full(n_max + 1, -1, dtype=np.int64)
    e = -1
    for n in range(1, n_max + 1):
        if binomial_cdf(e + 1, n, 1.0 - target) <= delta:
            e += 1
        out[n] = e
    return out


def max_errors(n_max: int, target: float, delta: float) -> np.ndarray:
    size = 1 << max(6, int(n_max).bit_length())  # a power of two: one cache entry serves many calls
    return _max_errors(size, float(target), float(delta))


# -- thresholds -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassThreshold:
    """One class's auto-accept rule. ``threshold`` None: never auto-accepted (``reason`` says why,
    ``needed`` how many more calibration items predicted it would make a test possible)."""

    label: str
    threshold: float | None
    n_predicted: int  # calibration items predicted this class
    n_above: int  # ... of them with confidence >= threshold
    errors_above: int
    error_bound: float  # the Clopper-Pearson upper bound at the threshold (1.0 when none)
    coverage: float  # n_above / n_predicted
    expected_precision: float  # 1 - errors_above / n_above (point estimate, shown next to the bound)
    reason: str = ""
    needed: int = 0  # more calibration items predicted this class before it can be tested
    delta: float = DEFAULT_DELTA
    tests: int = 0  # hypotheses tested before the sequence stopped


def _none(label: str, n: int, reason: str, *, needed: int = 0, delta: float, tests: int = 0) -> ClassThreshold:
    return ClassThreshold(label, None, n, 0, 0, 1.0, 0.0, 0.0, reason, needed, delta, tests)


def class_threshold(
    conf: np.ndarray,
    correct: np.ndarray,
    *,
    label: str,
    target: float = DEFAULT_TARGET,
    delta: float = DEFAULT_DELTA,
    min_items: int = MIN_ITEMS_PER_CLASS,
) -> ClassThreshold:
    """Fixed-sequence testing over the distinct confidences, most confident first. The sequence starts
    at the first candidate with enough items above it for the bound to pass at all (fewer can never
    be rejected, and the count only grows downward), and stops at the first that fails."""
    conf, correct = np.asarray(conf, np.float64), np.asarray(correct, bool)
    n = len(conf)
    smallest = max(min_items, items_needed(target, delta))
    if n < smallest:
        why = f"{n} calibration items predicted it; {smallest - n} more needed for a {target:.0%} bound at δ={delta:g}"
        return _none(label, n, why, needed=smallest - n, delta=delta)
    order = np.argsort(-conf, kind="stable")
    sorted_conf, wrong_cum = conf[order], np.cumsum(~correct[order])
    candidates = np.unique(conf)[::-1]  # descending: the fixed order of the tests
    n_above = np.searchsorted(-sorted_conf, -candidates, side="right")
    errors = wrong_cum[n_above - 1]
    passes = errors <= max_errors(n, target, delta)[n_above]
    start = int(np.argmax(n_above >= smallest))
    tested = passes[start:]
    stop = int(np.argmin(tested)) if not tested.all() else len(tested)
    if stop == 0:
        why = f"the error bound fails at the most confident testable threshold (precision < {target:.0%} not ruled out)"
        return _none(label, n, why, delta=delta, tests=1)
    i = start + stop - 1
    k, e = int(n_above[i]), int(errors[i])
    bound = clopper_pearson_upper(e, k, delta)
    tests = min(stop + 1, len(tested))
    return ClassThreshold(label, float(candidates[i]), n, k, e, bound, k / n, 1 - e / k, "", 0, delta, tests)


def fit_thresholds(
    pred: np.ndarray,
    conf: np.ndarray,
    y: np.ndarray,
    *,
    label_names: Sequence[str],
    target: float = DEFAULT_TARGET,
    delta: float = DEFAULT_DELTA,
    min_items: int = MIN_ITEMS_PER_CLASS,
) -> list[ClassThreshold]:
    """Per-class thresholds (``class_threshold``) from calibration predictions, confidences and the
    people's labels. Fit them on the calibration split only: on any other items the bound is not one."""
    if not 0.0 < target < 1.0:
        raise ThresholdInputError(f"target precision must be in (0, 1), got {target}")
    if not 0.0 < delta < 1.0:
        raise ThresholdInputError(f"δ must be in (0, 1), got {delta}")
    pred, conf, y = np.asarray(pred, np.int64), np.asarray(conf, np.float64), np.asarray(y, np.int64)
    if not (pred.shape == conf.shape == y.shape) or pred.ndim != 1:
        raise ThresholdInputError(f"pred, conf and y must be 1-D of one length: {pred.shape} {conf.shape} {y.shape}")
    return [
        class_threshold(
            conf[pred == c], (y == c)[pred == c], label=name, target=target, delta=delta, min_items=min_items
        )
        for c, name in enumerate(label_names)
    ]


def accept(pred: np.ndarray, conf: np.ndarray, thresholds: Sequence[float | None]) -> np.ndarray:
    """bool[N]: the item's class has a threshold and its confidence reaches it."""
    limits = np.array([np.inf if t is None else t for t in thresholds], dtype=np.float64)
    pred = np.asarray(pred, np.int64)
    return np.asarray(np.asarray(conf, np.float64) >= limits[pred])


# -- realised precision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RealisedPrecision:
    """Auto-accepted items of one class checked against people's (or an oracle's) labels."""

    label: str
    checked: int
    correct: int
    precision: float | None
    ci_low: float
    ci_high: float
    target: float
    alarm: bool  # the whole interval lies under the target


def realised_precision(
    label: str, correct: int, checked: int, *, target: float, alpha: float = DEFAULT_DELTA
) -> RealisedPrecision:
    """Measured precision with its two-sided Clopper–Pearson interval; alarm when the interval's upper
    end is under the target (the check shows, beyond its noise, that the class misses it)."""
    low, high = clopper_pearson_interval(correct, checked, alpha)
    precision = correct / checked if checked else None
    return RealisedPrecision(label, checked, correct, precision, low, high, target, checked > 0 and high < target)
