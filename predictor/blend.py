"""The round's predictor: the LLM ensemble blended with the embedding proxy, the blend's weight fitted
on held-out labels. Plain numpy, no Django.

Why: the K LoRA adapters and the proxy (logistic regression on the cached MiniLM embeddings,
predictor.embedding_proxy) make different mistakes, and which of them is stronger depends on the project and on
how many labels it has (on the shared sets the proxy is ahead at 100 labels on SNIPS and close at
1,000 on CLINC150's 151 intents, the adapters far ahead on TREC and emotion). A fixed average is not
robust (bench/RESULTS.md, session 6: +1.2 over the adapters on SNIPS@200, −6.8 under the proxy on
CLINC150@1000), so the weight is measured on this project instead.

Held-out evidence without spending labels: every batch item was labelled *after* the adapters and
the proxy of the round before had seen everything but it, so their predictions on it are honest
held-out predictions. The evaluation step stores them per round (``HeldOut``); the weight is the grid
point that predicts the most recent ``WINDOW`` batches best (accuracy, then log-likelihood as the
tie-break), never below ``FLOOR`` (never the proxy alone), ``w`` on the adapters' mean and ``1 - w`` on the
proxy. Active batches are biased toward hard items; that is the evidence there is, and it is the same for
every strategy's own batches. With fewer than ``MIN_HELDOUT`` held-out labels (the seed round) the adapters
predict alone (w = 1).

Why the floor (2026-12-06, bench/blend_rules.py on 159 recorded jobs, 1,702 rounds, each round's weight scored
on the next round's random slice): a deployed CLINC150 run (151 labels) took the proxy alone in its third round
on 100 held-out labels (16 right against the adapters' 14), and its test accuracy fell from the adapters' 39 %
to 11 % (w = 0.1 scored 40 %: the proxy alone is far worse than any blend with it). With the floor the rule
scores as before on the next random slices (+0.3 points over the adapters alone) and its worst set loses 1.4
points instead of 6.2. Picking by log-likelihood instead (``by="loglik"``) keeps the predictor's log-loss
below the adapters' (−0.087 nats an item; by accuracy +0.158: the proxy is overconfident) but gives up most
of the blend's accuracy (+0.2 overall, and CLINC150's test curve falls back to the adapters', 1–1.5 points
lower at 1,000 labels): measured, not chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

GRID = tuple(round(0.1 * i, 1) for i in range(11))  # w = 0 (the proxy alone) … 1 (the adapters alone)
WINDOW = 3  # the latest batches' held-out predictions fit the weight (the balance shifts as labels grow)
MIN_HELDOUT = 10  # fewer held-out labels than this: the adapters alone
EPS = 1e-6  # floor on a probability in the log-likelihood
BY = "accuracy"  # what picks the weight: held-out accuracy (then log-likelihood), or "loglik" (then accuracy)
FLOOR = 0.1  # the lowest weight the fit may pick: the proxy alone is never the round's predictor


class BlendInputError(ValueError):
    pass


@dataclass(frozen=True)
class HeldOut:
    """One batch's held-out evidence: gold labels and the adapters' / the proxy's distributions made
    before the batch was labelled."""

    y: np.ndarray  # int64[n]
    p_llm: np.ndarray  # float[n, C]
    p_proxy: np.ndarray  # float[n, C]
    uniform: np.ndarray | None = None  # bool[n]: the batch's random slice (None: not known)


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


def fit_weight(evidence: Sequence[HeldOut]) -> BlendFit:
    """The grid weight (>= FLOOR) with the best held-out accuracy over ``evidence`` (ties: higher
    log-likelihood, then the larger weight): ``choose_weight`` over the pooled ``weight_counts``, so a replay
    from recorded counts picks the same weight. Deterministic."""
    parts = [e for e in evidence if len(e.y)]
    if not parts:
        return BlendFit(1.0, 0, {"llm": None, "proxy": None, "blend": None}, "no held-out labels yet: adapters alone")
    counts = pool([weight_counts(e.p_llm, e.p_proxy, e.y) for e in parts])
    n = int(counts["n"])
    weight = choose_weight(counts)
    acc = {name: counts["correct"][GRID.index(w)] / n for name, w in (("llm", 1.0), ("proxy", 0.0), ("blend", weight))}
    if n < MIN_HELDOUT:
        return BlendFit(weight, n, acc, f"only {n} held-out labels (< {MIN_HELDOUT}): adapters alone")
    return BlendFit(
        weight,
        n,
        acc,
        f"w = {weight:.1f} on the adapters predicted {n} held-out labels best "
        f"({100 * acc['blend']:.1f} % vs adapters {100 * acc['llm']:.1f} %, proxy {100 * acc['proxy']:.1f} %)",
    )


def choose_weight(
    counts: dict[str, Any],
    *,
    grid: Sequence[float] = GRID,
    min_n: int = MIN_HELDOUT,
    guard: float | None = None,
    by: str = BY,
    floor: float = FLOOR,
) -> float:
    """The weight a rule picks from pooled ``weight_counts``: by ``accuracy`` the most items right, then
    the higher log-likelihood, then the larger weight; by ``loglik`` the higher log-likelihood, then the
    most right, then the larger weight. Only weights >= ``floor`` (0.1: never the proxy alone); 1 (the
    adapters alone) with fewer than ``min_n`` items. ``guard`` z: keep 1 unless the pick's gain over the
    adapters alone clears z standard errors of its discordant items (gain - loss >= z·sqrt(gain + loss), a
    McNemar-style test)."""
    if any(not 0.0 <= w <= 1.0 for w in grid):
        raise BlendInputError(f"grid weights must be within [0, 1], got {list(grid)}")
    if len(counts["correct"]) != len(grid):
        raise BlendInputError(f"counts hold {len(counts['correct'])} weights, the grid {len(grid)}")
    if by not in ("accuracy", "loglik"):
        raise BlendInputError(f"by must be 'accuracy' or 'loglik', got {by!r}")
    if int(counts["n"]) < min_n:
        return 1.0
    if by == "accuracy":
        keys = [(counts["correct"][i], counts["loglik"][i], float(w)) for i, w in enumerate(grid)]
    else:
        keys = [(counts["loglik"][i], counts["correct"][i], float(w)) for i, w in enumerate(grid)]
    allowed = [j for j, w in enumerate(grid) if float(w) >= floor - 1e-9] or [len(grid) - 1]
    i = max(allowed, key=lambda j: keys[j])
    if guard is not None:
        gain, loss = counts["gain"][i], counts["loss"][i]
        if gain - loss < max(guard * float(np.sqrt(gain + loss)), 1e-9):
            return 1.0
    return float(grid[i])


def pool(counts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ``weight_counts`` (batches, rounds) as one: every count summed per weight."""
    if not counts:
        raise BlendInputError("nothing to pool")
    out: dict[str, Any] = {"n": sum(int(c["n"]) for c in counts)}
    for key in ("correct", "gain", "loss", "loglik"):
        out[key] = [sum(values) for values in zip(*(c[key] for c in counts), strict=True)]
    return out


def weight_counts(
    p_llm: np.ndarray, p_proxy: np.ndarray, y: np.ndarray, *, grid: Sequence[float] = GRID
) -> dict[str, Any]:
    """What every grid weight does on one set of labelled items, as sums that add up over sets
    (rounds, batches): ``n``; per weight the items the blend gets right (``correct``), right where
    the adapters alone are wrong (``gain``), wrong where they are right (``loss``), and the summed
    log-likelihood of the gold label (``loglik``, probabilities floored at EPS). The evaluation stores
    them for the round's batch, its random slice and the test set, so any rule for choosing the
    weight can be replayed on recorded runs (bench/blend_rules.py) without the models."""
    a, b = _pair(p_llm, p_proxy)
    gold = np.asarray(y, dtype=np.int64)
    if len(gold) != len(a):
        raise BlendInputError(f"{len(gold)} labels but {len(a)} distributions")
    if len(gold) and (gold.min() < 0 or gold.max() >= a.shape[1]):
        raise BlendInputError(f"labels must lie in 0..{a.shape[1] - 1}")
    rows = np.arange(len(gold))
    llm_right = a.argmax(axis=1) == gold
    out: dict[str, Any] = {"n": len(gold), "correct": [], "gain": [], "loss": [], "loglik": []}
    for w in grid:
        p = w * a + (1.0 - w) * b
        right = p.argmax(axis=1) == gold
        out["correct"].append(int(right.sum()))
        out["gain"].append(int((right & ~llm_right).sum()))
        out["loss"].append(int((~right & llm_right).sum()))
        out["loglik"].append(round(float(np.log(np.clip(p[rows, gold], EPS, 1.0)).sum()), 4))
    return out


def _pair(p_llm: np.ndarray, p_proxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(p_llm, dtype=np.float64)
    b = np.asarray(p_proxy, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise BlendInputError(f"p_llm {a.shape} and p_proxy {b.shape} must both be [N, C]")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise BlendInputError("distributions contain NaN or inf")
    return a, b
