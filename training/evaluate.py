"""Evaluation on the fixed test set and agreement statistics: pure functions over numpy arrays that
return JSON-ready values (floats, ints, lists), ready to store on a round's metrics row.

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


# -- agreement ----------------------------------------------------------------------------------


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


def cohen_kappa(a: np.ndarray, b: np.ndarray, n_classes: int) -> float:
    """Cohen's κ of two raters over the same items (model vs human, or human vs human).

    κ = (p_o − p_e) / (1 − p_e). When both raters use a single, identical class throughout, p_e = 1
    and κ is 0/0; it is reported as 1.0 (they agree perfectly). NaN for no items."""
    matrix = confusion(a, b, n_classes).astype(np.float64)
    n = matrix.sum()
    if n == 0:
        return float("nan")
    observed = np.trace(matrix) / n
    expected = float((matrix.sum(axis=1) / n) @ (matrix.sum(axis=0) / n))
    if expected >= 1.0:
        return 1.0
    return float((observed - expected) / (1.0 - expected))


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' κ from counts[N, C] (raters who chose class c for item i).

    Items may have different numbers of raters (the annotation app's reality): each item's agreement
    uses its own n_i, class shares pool all ratings; items with fewer than two ratings are dropped.
    With a constant number of raters this is Fleiss (1971) exactly. NaN when no item has two ratings."""
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2 or (table < 0).any():
        raise ValueError("counts must be a non-negative [N, C] table")
    raters = table.sum(axis=1)
    table, raters = table[raters >= 2], raters[raters >= 2]
    if len(table) == 0:
        return float("nan")
    item_agreement = ((table**2).sum(axis=1) - raters) / (raters * (raters - 1))
    shares = table.sum(axis=0) / raters.sum()
    expected = float((shares**2).sum())
    observed = float(item_agreement.mean())
    if expected >= 1.0:
        return 1.0
    return (observed - expected) / (1.0 - expected)


def per_class_agreement(a: np.ndarray, b: np.ndarray, n_classes: int) -> list[float | None]:
    """Specific (positive) agreement per class: 2·n_cc / (n_c· + n_·c), the share of the two raters'
    uses of class c on which they agree. None for a class neither rater used."""
    matrix = confusion(a, b, n_classes)
    used = matrix.sum(axis=1) + matrix.sum(axis=0)
    return [float(2 * matrix[c, c] / used[c]) if used[c] else None for c in range(n_classes)]


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
