"""The round's predictor: the LLM ensemble blended with the embedding proxy, the blend's weight fitted
on held-out labels. Plain numpy, no Django.

Why: the K LoRA adapters and the proxy (logistic regression on the cached MiniLM embeddings,
scoring.proxy) make different mistakes, and which of them is stronger depends on the project and on
how many labels it has (on the shared sets the proxy is ahead at 100 labels on SNIPS and close at
1,000 on CLINC150's 151 intents, the adapters far ahead on TREC and emotion). A fixed average is not
robust (bench/RESULTS.md, session 6: +1.2 over the adapters on SNIPS@200, −6.8 under the proxy on
CLINC150@1000), so the weight is measured on this project instead.

Held-out evidence without spending labels: every batch item was labelled *after* the adapters and
the proxy of the round before had seen everything but it, so their predictions on it are honest
held-out predictions. The evaluation step stores them per round (``HeldOut``); the weight is the grid
point that predicts the most recent ``WINDOW`` batches best (accuracy, then log-likelihood as the
tie-break), ``w`` on the adapters' mean and ``1 - w`` on the proxy. Active batches are biased toward
hard items; that is the evidence there is, and it is the same for every strategy's own batches.
With fewer than ``MIN_HELDOUT`` held-out labels (the seed round) the adapters predict alone (w = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GRID = tuple(round(0.1 * i, 1) for i in range(11))  # w = 0 (the proxy alone) … 1 (the adapters alone)
WINDOW = 3  # the latest batches' held-out predictions fit the weight (the balance shifts as labels grow)
MIN_HELDOUT = 10  # fewer held-out labels than this: the adapters alone
EPS = 1e-6  # floor on a probability in the log-likelihood tie-break


class BlendInputError(ValueError):
    pass


@dataclass(frozen=True)
class HeldOut:
    """One batch's held-out evidence: gold labels and the adapters' / the proxy's distributions made
    before the batch was labelled."""

    y: np.ndarray  # int64[n]
    p_llm: np.ndarray  # float[n, C]
    p_proxy: np.ndarray  # float[n, C]


@dataclass(frozen=True)
class BlendFit:
    weight: float  # on the adapters' mean; 1 - weight on the proxy
    n: int  # held-out labels it was fitted on
    accuracy: dict[str, float | None]  # held-out accuracy of "llm", "proxy", "blend" (None without evidence)
    reason: str  # one sentence for the ML page


def blend(p_llm: np.ndarray, p_proxy: np.ndarray, weight: float) -> np.ndarray:
    """w · p_llm + (1 - w) · p_proxy, rows of both [N, C] label distributions."""
    a, b = _pair(p_llm, p_proxy)
    if not 0.0 <= weight <= 1.0:
        raise BlendInputError(f"weight must be within [0, 1], got {weight}")
    return np.asarray(weight * a + (1.0 - weight) * b)


def fit_weight(evidence: Sequence[HeldOut], *, grid: Sequence[float] = GRID) -> BlendFit:
    """The grid weight with the best held-out accuracy over ``evidence`` (ties: higher mean
    log-likelihood, then the larger weight). Deterministic."""
    parts = [e for e in evidence if len(e.y)]
    if not parts:
        return BlendFit(1.0, 0, {"llm": None, "proxy": None, "blend": None}, "no held-out labels yet: adapters alone")
    y = np.concatenate([np.asarray(e.y, dtype=np.int64) for e in parts])
    p_llm, p_proxy = _pair(np.concatenate([e.p_llm for e in parts]), np.concatenate([e.p_proxy for e in parts]))
    if len(y) != len(p_llm):
        raise BlendInputError(f"{len(y)} labels but {len(p_llm)} distributions")
    if len(y) and (y.min() < 0 or y.max() >= p_llm.shape[1]):
        raise BlendInputError(f"labels must lie in 0..{p_llm.shape[1] - 1}")
    acc_llm, acc_proxy = _accuracy(p_llm, y), _accuracy(p_proxy, y)
    if len(y) < MIN_HELDOUT:
        return BlendFit(
            1.0,
            len(y),
            {"llm": acc_llm, "proxy": acc_proxy, "blend": acc_llm},
            f"only {len(y)} held-out labels (< {MIN_HELDOUT}): adapters alone",
        )
    best: tuple[float, float, float] | None = None
    for w in grid:
        if not 0.0 <= w <= 1.0:
            raise BlendInputError(f"grid weights must be within [0, 1], got {w}")
        p = w * p_llm + (1.0 - w) * p_proxy
        key = (_accuracy(p, y), float(np.log(np.clip(p[np.arange(len(y)), y], EPS, 1.0)).mean()), float(w))
        if best is None or key > best:
            best = key
    assert best is not None
    weight = best[2]
    return BlendFit(
        weight,
        len(y),
        {"llm": acc_llm, "proxy": acc_proxy, "blend": best[0]},
        f"w = {weight:.1f} on the adapters predicted {len(y)} held-out labels best "
        f"({100 * best[0]:.1f} % vs adapters {100 * acc_llm:.1f} %, proxy {100 * acc_proxy:.1f} %)",
    )


def _accuracy(p: np.ndarray, y: np.ndarray) -> float:
    return float((p.argmax(axis=1) == y).mean()) if len(y) else 0.0


def _pair(p_llm: np.ndarray, p_proxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(p_llm, dtype=np.float64)
    b = np.asarray(p_proxy, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise BlendInputError(f"p_llm {a.shape} and p_proxy {b.shape} must both be [N, C]")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise BlendInputError("distributions contain NaN or inf")
    return a, b
