"""Possible label errors: human labels that a predictor judging out of sample contradicts with confidence.

The rule is confident learning's (Northcutt, Jiang & Chuang, 2021, "Confident Learning: Estimating
Uncertainty in Dataset Labels"): with out-of-sample probabilities p[i, j], each class j gets a threshold
t_j, the mean of p[i, j] over the items labelled j (how confident the predictor is, on average, in its
own class). An item labelled g is *confidently* of class j when p[i, j] >= t_j; it is a suspect when
that holds for some j != g (the most probable such j is the suggestion) and p[i, g] < t_g. Thresholds
per class keep a class the predictor is timid about (rare, hard) from being read as noise.

Out of sample matters: a predictor that trained on an item has learned its label, right or wrong, and
contradicts almost nothing. ``out_of_fold_proba`` fits the embedding proxy (predictor/embedding_proxy.py) k times,
each time on the other folds, so every item is judged by a model that never saw its label.

Nothing here changes a label: a lead decides (annotate/services/label_errors.py). Pure numpy; no Django.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictor.embedding_proxy import fit_proxy

# Five folds: each fit sees 80 % of the labels (close to the full model's view) and the five fits cost
# milliseconds on cached embeddings.
DEFAULT_FOLDS = 5
# The queue takes a suspect when the suggested class is at least this many times as probable as the human
# label: the rule alone queues every item the predictor is unsure about on a hard set (SST-2, TREC, and
# CLINC150's flat 151-way distributions), and a ratio, unlike a difference of probabilities, means the
# same with 2 classes or 151. 3 was the most even trade of precision for recall over TREC, SNIPS, SST-2
# and CLINC150's train splits with bench/label_errors.py (bench/RESULTS.md, "Auto-labelling").
DEFAULT_MIN_RATIO = 3.0


class LabelErrorInputError(ValueError):
    pass


@dataclass(frozen=True)
class Suspects:
    index: np.ndarray  # int64[m]: rows of the input, most confident contradiction first
    given: np.ndarray  # int64[m]: the human label
    suggested: np.ndarray  # int64[m]: the class the predictor is confident of instead
    p_given: np.ndarray  # float64[m]
    p_suggested: np.ndarray  # float64[m]
    thresholds: np.ndarray  # float64[C]: t_j (NaN for a class with no labelled item)


def out_of_fold_proba(
    emb: np.ndarray, y: np.ndarray, n_classes: int, *, folds: int = DEFAULT_FOLDS, rng: np.random.Generator
) -> np.ndarray:
    """float64[N, C]: each row predicted by a proxy fitted on the other folds (random, equal-sized)."""
    y = np.asarray(y, dtype=np.int64)
    if len(emb) != len(y):
        raise LabelErrorInputError(f"{len(emb)} embeddings for {len(y)} labels")
    if folds < 2 or len(y) < folds:
        raise LabelErrorInputError(f"need at least {max(folds, 2)} labelled items for {folds} folds, got {len(y)}")
    fold = rng.permutation(len(y)) % folds
    out = np.zeros((len(y), n_classes))
    for f in range(folds):
        held = fold == f
        out[held] = fit_proxy(emb[~held], y[~held], n_classes).predict_proba(emb[held])
    return out


def find_label_errors(probs: np.ndarray, given: np.ndarray, *, min_ratio: float = 1.0) -> Suspects:
    """The confident-learning suspects among ``given`` labels under out-of-sample ``probs`` whose
    suggested class is at least ``min_ratio`` times as probable as the given one."""
    probs = np.asarray(probs, dtype=np.float64)
    given = np.asarray(given, dtype=np.int64)
    if probs.ndim != 2 or len(probs) != len(given):
        raise LabelErrorInputError(f"need probs [N, C] and given [N], got {probs.shape} and {given.shape}")
    if len(given) and (given.min() < 0 or given.max() >= probs.shape[1]):
        raise LabelErrorInputError(f"labels must lie in 0..{probs.shape[1] - 1}")
    n_classes = probs.shape[1]
    thresholds = np.full(n_classes, np.nan)
    for j in range(n_classes):
        if (given == j).any():
            thresholds[j] = probs[given == j, j].mean()
    # a class nobody labelled cannot be "confidently" anything: no threshold, never suggested
    confident = probs >= np.where(np.isnan(thresholds), np.inf, thresholds)[None, :]
    rows = np.arange(len(given))
    confident[rows, given] = False
    p_given = probs[rows, given]
    masked = np.where(confident, probs, -1.0)
    suggested = masked.argmax(axis=1)
    strong = probs[rows, suggested] >= min_ratio * p_given
    is_suspect = confident.any(axis=1) & (p_given < thresholds[given]) & strong
    index = rows[is_suspect]
    margin = probs[index, suggested[index]] - p_given[index]
    index = index[np.argsort(-margin, kind="stable")]
    return Suspects(
        index=index,
        given=given[index],
        suggested=suggested[index],
        p_given=p_given[index],
        p_suggested=probs[index, suggested[index]],
        thresholds=thresholds,
    )
