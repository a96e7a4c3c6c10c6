"""Calibration and auto-accept decisions over arrays (no Django): temperature / vector scaling,
reliability and ECE, cascade tiers, the audit's
measured precision, the label-order bias check, budget and ETA.

Conventions: ``p`` is a distribution over C labels ([N, C], rows sum to 1), ``y`` gold class indices
[N]. A *confidence* is the calibrated probability of the predicted class. The threshold rule is the
one auto-accept is allowed to use (``predictor.thresholds``, re-exported here): a bound from
fixed-sequence testing, never a point estimate.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from predictor.evaluate import expected_calibration_error, reliability_bins
from predictor.thresholds import (  # the auto-accept rule lives there; re-exported for the callers here
    DEFAULT_DELTA,
    DEFAULT_TARGET,
    MIN_ITEMS_PER_CLASS,
    ClassThreshold,
    accept,
    beta_cdf,
    class_threshold,
    clopper_pearson_interval,
    clopper_pearson_upper,
    fit_thresholds,
    realised_precision,
)

EPS = 1e-12
VECTOR_SCALING_MIN_ITEMS = 1000  # per-class scaling has 2C parameters: below this it overfits the eval set
DEFAULT_ALPHA = DEFAULT_DELTA  # one-sided: the true error is under the bound with 95 % confidence
FLIP_WARN = 0.1  # label-order flip rate at or above this: the model reads the codes, not the labels

TierKind = Literal["model", "agreement", "permuted", "second_model"]


__all__ = [  # the threshold names callers reach through this module
    "DEFAULT_TARGET",
    "MIN_ITEMS_PER_CLASS",
    "ClassThreshold",
    "accept",
    "beta_cdf",
    "class_threshold",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "fit_thresholds",
    "realised_precision",
]


class CalibrationInputError(ValueError):
    """Arrays of the wrong shape, empty evaluation sets, labels out of range."""


# -- calibration ------------------------------------------------------------------------------------


def _check(p: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    probs = np.asarray(p, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise CalibrationInputError(f"p must be [N, C] with C >= 2, got {probs.shape}")
    if not np.isfinite(probs).all():
        raise CalibrationInputError("p holds NaN or infinite values")
    if y is None:
        return probs, None
    gold = np.asarray(y, dtype=np.int64)
    if gold.shape != (len(probs),):
        raise CalibrationInputError(f"{len(probs)} distributions but y has shape {gold.shape}")
    if len(gold) == 0:
        raise CalibrationInputError("no evaluation items: label the test set or draw a gold set first")
    if gold.min() < 0 or gold.max() >= probs.shape[1]:
        raise CalibrationInputError(f"y holds class indices outside 0..{probs.shape[1] - 1}")
    return probs, gold


def _softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def _nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(p[np.arange(len(y)), y], EPS, 1.0)).mean())


@dataclass(frozen=True)
class Calibrator:
    """softmax((log p) · w / T + b). Temperature scaling: w = 1, b = 0; vector scaling: per class."""

    method: Literal["temperature", "vector"]
    temperature: float
    weights: tuple[float, ...] = ()
    bias: tuple[float, ...] = ()

    def apply(self, p: np.ndarray) -> np.ndarray:
        probs, _ = _check(p)
        z = np.log(np.clip(probs, EPS, 1.0)) / self.temperature
        if self.method == "vector":
            z = z * np.asarray(self.weights) + np.asarray(self.bias)
        return _softmax(z)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibrator:
        return cls(
            method=data["method"],
            temperature=float(data["temperature"]),
            weights=tuple(float(x) for x in data.get("weights", ())),
            bias=tuple(float(x) for x in data.get("bias", ())),
        )


IDENTITY = Calibrator(method="temperature", temperature=1.0)


def fit_temperature(p: np.ndarray, y: np.ndarray) -> float:
    """The T in [0.05, 20] minimising the NLL of softmax(log p / T): golden-section search on log T
    (the NLL is convex in 1/T, so unimodal in log T)."""
    probs, gold = _check(p, y)
    assert gold is not None
    logp = np.log(np.clip(probs, EPS, 1.0))

    def loss(log_t: float) -> float:
        return _nll(_softmax(logp / math.exp(log_t)), gold)

    lo, hi = math.log(0.05), math.log(20.0)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(b)
    return float(math.exp((lo + hi) / 2))


def fit_vector_scaling(p: np.ndarray, y: np.ndarray, *, temperature: float, steps: int = 400) -> Calibrator:
    """Per-class weight and bias on the tempered log-probabilities (Guo et al. 2017), by Adam on the
    NLL, started at the temperature solution (w = 1, b = 0) so it can only improve the fit."""
    probs, gold = _check(p, y)
    assert gold is not None
    if len(gold) < VECTOR_SCALING_MIN_ITEMS:
        raise CalibrationInputError(
            f"vector scaling needs >= {VECTOR_SCALING_MIN_ITEMS} calibration items, got {len(gold)}"
        )
    z = np.log(np.clip(probs, EPS, 1.0)) / temperature
    c = z.shape[1]
    params = np.concatenate([np.ones(c), np.zeros(c)])
    m, v = np.zeros_like(params), np.zeros_like(params)
    onehot = np.eye(c)[gold]
    lr, b1, b2 = 0.01, 0.9, 0.999  # Adam defaults with a small step: the start is already close
    for t in range(1, steps + 1):
        q = _softmax(z * params[:c] + params[c:])
        err = (q - onehot) / len(gold)
        grad = np.concatenate([(err * z).sum(axis=0), err.sum(axis=0)])
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad**2
        params -= lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + 1e-8)
    return Calibrator("vector", temperature, tuple(map(float, params[:c])), tuple(map(float, params[c:])))


def fit_calibrator(p: np.ndarray, y: np.ndarray) -> Calibrator:
    """Temperature scaling; per-class vector scaling on top only from VECTOR_SCALING_MIN_ITEMS items
    (and only where it lowers the NLL). Never isotonic: it needs far more items than a gold set has."""
    probs, gold = _check(p, y)
    assert gold is not None
    temperature = fit_temperature(probs, gold)
    best = Calibrator("temperature", temperature)
    if len(gold) >= VECTOR_SCALING_MIN_ITEMS:
        vector = fit_vector_scaling(probs, gold, temperature=temperature)
        if _nll(vector.apply(probs), gold) < _nll(best.apply(probs), gold):
            best = vector
    return best


def reliability(p: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """ECE, NLL and the reliability bins of distributions ``p`` against ``y`` (JSON-ready)."""
    probs, gold = _check(p, y)
    assert gold is not None
    pred = probs.argmax(axis=1)
    bins = reliability_bins(probs.max(axis=1), pred == gold)
    return {"ece": expected_calibration_error(bins), "nll": _nll(probs, gold), "bins": bins, "n": len(gold)}


# -- bounds -----------------------------------------------------------------------------------------


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Two-sided Wilson score interval of a proportion (95 % by default); (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    phat = successes / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


# -- thresholds -------------------------------------------------------------------------------------


# -- cascade tiers ----------------------------------------------------------------------------------


def model_tier(p_mean: np.ndarray, calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray]:
    """Tier 1 (also the second-model tier, with that model's calibrator): calibrated argmax and its
    probability of the ensemble-mean distribution."""
    q = calibrator.apply(p_mean)
    return q.argmax(axis=1), q.max(axis=1)


def agreement_tier(p_members: np.ndarray, calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray]:
    """All K members must pick the same class; confidence = the lowest calibrated member probability
    of that class (0 where they disagree). p_members: [K, N, C]."""
    return _consistent(p_members, calibrator, reduce="min")


def permuted_tier(p_variants: np.ndarray, calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray]:
    """Self-consistency over prompt variants (label-code order permuted, p given in label order):
    every variant must pick the same label; confidence = the mean calibrated probability of it
    (0 where any variant disagrees). p_variants: [V, N, C], variant 0 the original prompt."""
    return _consistent(p_variants, calibrator, reduce="mean")


def _consistent(p: np.ndarray, calibrator: Calibrator, *, reduce: str) -> tuple[np.ndarray, np.ndarray]:
    stack = np.asarray(p, np.float64)
    if stack.ndim != 3:
        raise CalibrationInputError(f"expected [V, N, C], got {stack.shape}")
    q = np.stack([calibrator.apply(v) for v in stack])
    votes = q.argmax(axis=2)
    pred = votes[0]
    agree = (votes == pred).all(axis=0)
    picked = q[:, np.arange(q.shape[1]), pred]
    conf = picked.mean(axis=0) if reduce == "mean" else picked.min(axis=0)
    return pred, np.where(agree, conf, 0.0)


# -- label-order bias ---------------------------------------------------------------------------------


def code_permutations(n_classes: int, n_variants: int = 3) -> list[list[int]]:
    """Fixed permutations of the label→code mapping (the same on every run): reversed, rotated by one,
    rotated by half. perm[i] = index of the label whose code label i takes."""
    if n_classes < 2:
        raise CalibrationInputError("a label-order check needs at least two labels")
    base = list(range(n_classes))
    variants = [base[::-1], base[1:] + base[:1], base[n_classes // 2 :] + base[: n_classes // 2]]
    unique: list[list[int]] = []
    for v in variants:
        if v != base and v not in unique:
            unique.append(v)
    return unique[:n_variants]


def label_order_bias(p_base: np.ndarray, p_variants: np.ndarray, perms: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Flip rate (share of items whose predicted label changes under any code permutation) and the
    per-code prior (mean probability given to each code position, over items and prompts).

    p_base [N, C] and p_variants [V, N, C] are in label order; under variant v label i wore the code
    of label perms[v][i]."""
    base, variants = np.asarray(p_base, np.float64), np.asarray(p_variants, np.float64)
    if variants.ndim != 3 or variants.shape[1:] != base.shape or len(perms) != len(variants):
        raise CalibrationInputError(
            f"shapes disagree: base {base.shape}, variants {variants.shape}, {len(perms)} perms"
        )
    pred = base.argmax(axis=1)
    flipped = (variants.argmax(axis=2) != pred).any(axis=0)
    c = base.shape[1]
    prior = base.mean(axis=0).copy()  # identity mapping: code j is worn by label j
    for v, perm in enumerate(perms):
        by_code = np.zeros(c)
        for label_index, code_index in enumerate(perm):
            by_code[code_index] = variants[v, :, label_index].mean()
        prior += by_code
    prior /= len(perms) + 1
    rate = float(flipped.mean()) if len(flipped) else 0.0
    return {"flip_rate": rate, "code_prior": prior.tolist(), "n": len(pred), "warn": rate >= FLIP_WARN}


# -- audit ------------------------------------------------------------------------------------------


def audit_pick(item_ids: np.ndarray, *, share: float, seed: int) -> np.ndarray:
    """bool[N]: the items audited. A hash of (seed, item id), so a re-run or a redelivered shard picks
    the same items, and the share holds in every shard."""
    if not 0.0 <= share <= 1.0:
        raise CalibrationInputError(f"audit share must be in [0, 1], got {share}")
    cut = int(share * 2**32)
    draws = [
        int.from_bytes(hashlib.sha1(f"{seed}:{int(i)}".encode()).digest()[:4], "big") for i in np.asarray(item_ids)
    ]
    return np.array(draws, dtype=np.int64) < cut


@dataclass(frozen=True)
class AuditStatus:
    label: str
    audited: int
    correct: int
    precision: float | None
    ci_low: float
    ci_high: float
    alarm: bool
    target: float = DEFAULT_TARGET


def audit_status(label: str, correct: int, audited: int, *, target: float) -> AuditStatus:
    """Realised precision of a class's auto labels on the random audit, with its two-sided 95 %
    Clopper–Pearson interval (exact, like the bound the threshold was chosen by). Alarm when the whole
    interval lies under the target: the audit shows, beyond its noise, that the class misses it."""
    found = realised_precision(label, correct, audited, target=target)
    return AuditStatus(label, audited, correct, found.precision, found.ci_low, found.ci_high, found.alarm, target)


# -- budget and progress ----------------------------------------------------------------------------


def budget_estimate(
    *, n_items: int, tokens_per_item: float, tokens_per_second: float, workers: Sequence[int] = (1, 2, 4, 8)
) -> list[dict[str, float]]:
    """GPU-hours and wall hours for each worker count, from a measured per-worker token rate."""
    if tokens_per_second <= 0:
        raise CalibrationInputError("no measured rate: calibrate (which times its scoring) or run the bench first")
    gpu_seconds = n_items * tokens_per_item / tokens_per_second
    return [{"workers": w, "gpu_hours": gpu_seconds / 3600, "wall_hours": gpu_seconds / 3600 / w} for w in workers]


def eta_seconds(*, done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the rate so far; None before anything is done."""
    if done <= 0 or elapsed <= 0:
        return None
    return max(0.0, (total - done) * elapsed / done)
