"""Acquisition signals over ensemble label distributions (pure numpy, natural logs).

Shapes: p is float[K, N, C] (K adapters, N items, C labels; each p[k, i] sums to 1 over labels)
and mass is float[K, N] (the label tokens' total probability under the full vocabulary). A 2-D
p[N, C] / mass[N] is read as K = 1.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

UncertaintyKind = Literal["margin", "entropy", "bald"]
_EPS = 1e-12


class SignalInputError(ValueError):
    pass


def _as_3d(p: np.ndarray) -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[-1] < 2:
        raise SignalInputError(f"p must be [K, N, C] or [N, C] with C >= 2, got shape {np.shape(p)}")
    return arr


def _entropy(q: np.ndarray) -> np.ndarray:
    """H(q) = -Σ q log q over the last axis (0 log 0 = 0)."""
    return -np.sum(q * np.log(np.clip(q, _EPS, None)), axis=-1)


def mean_distribution(p: np.ndarray) -> np.ndarray:
    """The ensemble's predictive distribution: p̄[i, c] = (1/K) Σ_k p[k, i, c]. Returns [N, C]."""
    return _as_3d(p).mean(axis=0)


def margin(p: np.ndarray) -> np.ndarray:
    """Top-two margin of the mean distribution: p̄(1st) - p̄(2nd) ∈ [0, 1]. Small = uncertain. [N]"""
    top2 = np.sort(mean_distribution(p), axis=-1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def entropy_with_tail(p: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Entropy over C + 1 outcomes: the C labels at their full-vocabulary probability, plus the
    leftover mass ("the model wanted to say something else") as one extra outcome:

        q_c = m̄_c = (1/K) Σ_k mass[k, i] · p[k, i, c],   q_tail = 1 - Σ_c q_c,
        H = -Σ_{c ∪ tail} q log q  ∈ [0, log(C + 1)].

    With mass = 1 it is the plain entropy of the mean distribution. [N]"""
    probs = _as_3d(p)
    m = np.asarray(mass, dtype=np.float64)
    m = m[None] if m.ndim == 1 else m
    if m.shape != probs.shape[:2]:
        raise SignalInputError(f"mass shape {np.shape(mass)} does not match p's [K, N] = {probs.shape[:2]}")
    labels = (probs * np.clip(m, 0.0, 1.0)[..., None]).mean(axis=0)
    tail = np.clip(1.0 - labels.sum(axis=-1, keepdims=True), 0.0, 1.0)
    return _entropy(np.concatenate([labels, tail], axis=-1))


def ensemble_disagreement(p: np.ndarray) -> np.ndarray:
    """BALD (mutual information between the label and the ensemble member):

        BALD = H(p̄) - (1/K) Σ_k H(p_k)  ≥ 0,

    high when members are each confident but disagree. With one member (the base model, K = 1) it is
    0 for every item: rank those rounds by margin or entropy instead (see rescoring.first_pass_kind). [N]"""
    probs = _as_3d(p)
    return np.clip(_entropy(probs.mean(axis=0)) - _entropy(probs).mean(axis=0), 0.0, None)


def uncertainty(kind: UncertaintyKind, p: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Higher = more uncertain. margin → 1 - margin; entropy → entropy_with_tail; bald → BALD. [N]"""
    if kind == "margin":
        return 1.0 - margin(p)
    if kind == "entropy":
        return entropy_with_tail(p, mass)
    if kind == "bald":
        return ensemble_disagreement(p)
    raise SignalInputError(f"unknown uncertainty kind {kind!r} (margin, entropy or bald)")
