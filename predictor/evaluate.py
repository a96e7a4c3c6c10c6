"""Evaluation on the fixed test set: pure functions over numpy arrays that return JSON-ready values
(floats, ints, lists), ready to store on a round's metrics row. (Agreement between raters — Cohen's
and Fleiss' κ — lives with the agreement selector, annotate/selectors/agreement.py.)

Conventions:
- Label arrays hold class indices 0..C-1; ``p_mean`` is the ensemble's mean distribution [N, C].
- Macro-F1 averages over the classes that occur in the gold labels or in the predictions (as
  scikit-learn does with ``labels=None``): a class the test set lacks and the model never predicts
  is neither right nor wrong.
- Calibration uses the top-label confidence (max probability) in 10 equal-width bins
  [0, 0.1), [0.1, 0.2), ... [0.9, 1.0]; ECE = Σ_b (n_b / N) |accuracy_b − confidence_b|.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

N_CALIBRATION_BINS = 10
Z_95 = 1.959963984540054


# -- model evaluation -----------------------------------------------------------------------------


def evaluate(p_mean: np.ndarray, y: np.ndarray, *, label_names: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class precision/recall/F1/support, confusion (rows = gold, columns =
    predicted), NLL, Brier score, ECE and reliability bins of ``p_mean`` [N, C] against gold ``y`` [N]."""
    p = np.asarray(p_mean, dtype=np.float64)
    gold = np.asarray(y, dtype=np.int64)
    n_classes = len(label_names)
    if p.ndim != 2 or p.shape[1] != n_classes:
        raise ValueError(f"p_mean must be [N, {n_classes}], got {p.shape}")
    _check_labels(gold, n_classes, "y")
    if len(gold) != len(p):
        raise ValueError(f"{len(p)} distributions but {len(gold)} gold labels")
    if len(gold) == 0:
        raise ValueError("nothing to evaluate: the test set is empty")
    pred = p.argmax(axis=1)
    matrix = confusion(gold, pred, n_classes)
    per_class = _per_class(matrix, label_names)
    present = [row for row in per_class if row["support"] > 0 or row["predicted"] > 0]
    bins = reliability_bins(p.max(axis=1), pred == gold)
    p_gold = np.clip(p[np.arange(len(gold)), gold], 1e-12, 1.0)
    onehot = np.eye(n_classes)[gold]
    return {
        "n": len(gold),
        "accuracy": float((pred == gold).mean()),
        "macro_f1": float(np.mean([row["f1"] for row in present])),
        "per_class": per_class,
        "confusion": matrix.tolist(),
        "nll": float(-np.log(p_gold).mean()),
        "brier": float(((p - onehot) ** 2).sum(axis=1).mean()),
        "ece": expected_calibration_error(bins),
        "reliability": bins,
    }


def reliability_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_CALIBRATION_BINS) -> list[dict]:
    """Per equal-width confidence bin: edges, count, mean confidence and accuracy (None when empty)."""
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=bool)
    index = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    bins = []
    for b in range(n_bins):
        members = index == b
        count = int(members.sum())
        bins.append(
            {
                "lo": b / n_bins,
                "hi": (b + 1) / n_bins,
                "count": count,
                "confidence": float(conf[members].mean()) if count else None,
                "accuracy": float(hit[members].mean()) if count else None,
            }
        )
    return bins


def expected_calibration_error(bins: Sequence[dict]) -> float:
    total = sum(b["count"] for b in bins)
    if total == 0:
        return 0.0
    gaps = [b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"]]
    return float(sum(gaps) / total)


def _per_class(matrix: np.ndarray, label_names: Sequence[str]) -> list[dict]:
    rows = []
    for c, name in enumerate(label_names):
        true_pos = int(matrix[c, c])
        support = int(matrix[c, :].sum())
        predicted = int(matrix[:, c].sum())
        precision = true_pos / predicted if predicted else 0.0
        recall = true_pos / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append(
            {
                "label": name,
                "precision": precision,
                "recall": recall,
                "f1": f1,
                "support": support,
                "predicted": predicted,
            }
        )
    return rows


# -- confusion ----------------------------------------------------------------------------------


def confusion(a: np.ndarray, b: np.ndarray, n_classes: int) -> np.ndarray:
    """int64[C, C] counts of (a[i], b[i]) pairs: rows index ``a``, columns ``b``."""
    first, second = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if first.shape != second.shape or first.ndim != 1:
        raise ValueError(f"label arrays must be 1-D and of equal length, got {first.shape} and {second.shape}")
    _check_labels(first, n_classes, "a")
    _check_labels(second, n_classes, "b")
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (first, second), 1)
    return matrix


# -- active vs random ---------------------------------------------------------------------------


def gain_with_uncertainty(
    acc_active: float,
    acc_random: float,
    n: int,
    *,
    labels: int | None = None,
    correct_active: np.ndarray | None = None,
    correct_random: np.ndarray | None = None,
) -> dict[str, Any]:
    """Accuracy gain of the active arm over the random arm on the same ``n`` test items, with a 95 %
    normal-approximation interval and a sentence for the dashboard.

    With per-item correctness of both arms (bool[n]) the standard error is the paired one,
    sd(d_i)/√n with d_i = correct_active_i − correct_random_i: both arms are scored on the same test
    items, so their errors are correlated and the paired interval is the honest (narrower) one.
    Without them, the arms are treated as independent binomials, √(p_a(1−p_a)/n + p_r(1−p_r)/n):
    conservative (wider) because it ignores that correlation. ``labels`` = labels spent so far."""
    if n <= 0:
        raise ValueError("n must be positive")
    gain = acc_active - acc_random
    if correct_active is not None and correct_random is not None:
        diff = np.asarray(correct_active, dtype=np.float64) - np.asarray(correct_random, dtype=np.float64)
        if len(diff) != n:
            raise ValueError(f"per-item correctness has {len(diff)} items, n is {n}")
        gain = float(diff.mean())
        se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("inf")
        method = "paired"
    else:
        se = math.sqrt(acc_active * (1 - acc_active) / n + acc_random * (1 - acc_random) / n)
        method = "independent binomial"
    low, high = gain - Z_95 * se, gain + Z_95 * se
    return {
        "gain": gain,
        "se": se,
        "ci_low": low,
        "ci_high": high,
        "method": method,
        "sentence": _gain_sentence(gain, low, high, labels),
    }


def _gain_sentence(gain: float, low: float, high: float, labels: int | None) -> str:
    def points(x: float) -> str:
        return f"{100 * x:.1f}".replace("-", "\u2212")

    at = f" at {labels} labels" if labels is not None else ""
    if low > 0:
        return f"active beats random by {points(gain)} points (95% CI {points(low)}\u2013{points(high)}){at}"
    if high < 0:
        return f"random beats active by {points(-gain)} points (95% CI {points(-high)}\u2013{points(-low)}){at}"
    return (
        f"no clear difference{at}: active \u2212 random = {points(gain)} points "
        f"(95% CI {points(low)} to {points(high)})"
    )


def _check_labels(labels: np.ndarray, n_classes: int, name: str) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{name} holds class indices outside 0..{n_classes - 1}")
