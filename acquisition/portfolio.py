"""The adaptive portfolio: which acquisition rule earns the batch on *this* project, measured.

No one rule wins everywhere. Margin sampling is the robust winner of the cheap loop
(../shared/design/BASELINES.md) but loses on noisy labels, where the most uncertain items are the
mislabelled ones; random is never far behind on easy sets. So the ``portfolio`` strategy keeps a
few rules (ARMS) and splits the non-random part of every batch among them by the evidence of the
labels they have already brought (active learning by learning, Hsu & Lin 2015), measured with the
cheap proxy (predictor.embedding_proxy, Selection-via-Proxy, Coleman et al. 2020):

- **The evidence.** Every labelled item remembers the arm that picked it. What an arm's picks are
  worth is measured the way they are used — inside the whole labelled set, not alone (a set of
  boundary items alone trains a worse model than a uniform sample; added to the rest it trains a
  better one): the proxy is trained on all the labels less ``m`` of the arm's picks, and on all the
  labels less ``m`` uniform ones (the same ``m`` for every arm: the fewest any arm has), and both
  are scored on labelled items drawn *uniformly* from the pool (half the random slices, held out of
  both), which no arm chose, so the comparison is unbiased. ``gain`` is the second accuracy minus
  the first, in points, averaged over repeats: positive when losing the arm's picks hurts more than
  losing as many uniform labels (paired: same evaluation items, same training set size).
- **The split.** Each arm's share of the batch is the probability that it is the best arm, under a
  normal posterior of its gain (mean, standard error over the repeats): Thompson-style, so a close
  call stays mixed and a clear winner takes most of the batch; every arm keeps MIN_SHARE so its
  evidence keeps coming. Random is an arm: if uncertainty hurts on this project, the batch drifts
  to random, which is how the portfolio stays close to random at worst.

Pure numpy (the proxy fits with torch's L-BFGS); no Django, no rounds. The round service stores
each round's picks per arm and the split it used in ``Round.metrics["selection"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from predictor.embedding_proxy import fit_proxy

# The rules the portfolio chooses among (acquisition.batch draws each arm's picks):
# "margin": highest committee uncertainty (1 - margin), near-duplicates skipped;
# "softrank": the default strategy's draws, probability ∝ 1/rank of that uncertainty;
# "random": uniform over the eligible pool.
ARMS = ("margin", "softrank", "random")
MIN_SHARE = 0.15  # each arm's floor: evidence keeps coming for every arm
REPEATS = 8  # random splits of the uniform items per estimate
MIN_EVIDENCE = 8  # fewer labelled picks than this for some arm: no estimate yet, equal shares
POSTERIOR_DRAWS = 4000


class PortfolioInputError(ValueError):
    pass


@dataclass(frozen=True)
class ArmGain:
    mean: float | None  # accuracy points over the random arm (None: not enough evidence yet)
    se: float | None
    n: int  # labelled picks of the arm that the estimate used (m)


@dataclass(frozen=True)
class Split:
    shares: dict[str, float]  # arm → share of the non-random-slice part of the batch, sums to 1
    gains: dict[str, ArmGain]
    in_charge: str  # the arm with the largest share
    reason: str  # one sentence for the ML page


def estimate_gains(
    *,
    seed_x: np.ndarray,
    seed_y: np.ndarray,
    uniform_x: np.ndarray,
    uniform_y: np.ndarray,
    picks: Mapping[str, tuple[np.ndarray, np.ndarray]],
    n_classes: int,
    rng: np.random.Generator,
    other: tuple[np.ndarray, np.ndarray] | None = None,
    repeats: int = REPEATS,
) -> dict[str, ArmGain]:
    """Each arm's paired gain over random (see the module docstring): what taking ``m`` of the arm's
    picks *out of* the labelled set costs the proxy, minus what taking ``m`` uniform items out costs.
    ``seed_x/y``: the cold-start labels; ``uniform_x/y``: labelled items drawn uniformly from the pool
    (the random slices and the random arm's picks); ``picks``: arm → its labelled picks (x, y),
    ``random`` left out (its picks are the uniform items); ``other``: labels other strategies picked
    (they stay in every training set, as they stay in the model's)."""
    arms = [a for a in picks if a != "random"]
    n_uniform = len(uniform_y)
    m = min([len(picks[a][1]) for a in arms] + [n_uniform // 2])
    if m < MIN_EVIDENCE or not arms:
        return {a: ArmGain(None, None, m) for a in (*arms, "random")}
    dim = uniform_x.shape[1]
    ox, oy = other if other is not None and len(other[1]) else (np.zeros((0, dim)), np.zeros(0, np.int64))
    diffs: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(repeats):
        order = rng.permutation(n_uniform)
        evaluate, kept = order[: n_uniform // 2], order[n_uniform // 2 :]
        ex, ey = uniform_x[evaluate], uniform_y[evaluate]
        parts = {"seed": (seed_x, seed_y), "other": (ox, oy), "random": (uniform_x[kept], uniform_y[kept])}
        parts.update({a: picks[a] for a in arms})
        drops = {a: rng.choice(len(parts[a][1]), size=m, replace=False) for a in (*arms, "random")}

        # Same size either way: all labels less m uniform ones, against all labels less m of the arm's.
        # Positive: the arm's picks are worth more to the model than as many uniform labels.
        no_random = _accuracy_without(parts, drops, "random", ex, ey, n_classes)
        for a in arms:
            diffs[a].append(100.0 * (no_random - _accuracy_without(parts, drops, a, ex, ey, n_classes)))
    out = {a: ArmGain(float(np.mean(d)), float(np.std(d, ddof=1) / np.sqrt(len(d))), m) for a, d in diffs.items()}
    out["random"] = ArmGain(0.0, 0.0, m)
    return out


def split(gains: Mapping[str, ArmGain], rng: np.random.Generator, *, min_share: float = MIN_SHARE) -> Split:
    """The batch shares from the gains: P(arm is best) under N(mean, se²) per arm, floored at
    ``min_share``; equal shares while any arm lacks evidence."""
    arms = list(gains)
    if not arms:
        raise PortfolioInputError("no arms")
    if not 0.0 <= min_share * len(arms) <= 1.0:
        raise PortfolioInputError(f"min_share {min_share} × {len(arms)} arms exceeds 1")
    if any(g.mean is None for g in gains.values()):
        shares = {a: 1.0 / len(arms) for a in arms}
        n = min(g.n for g in gains.values())
        return Split(shares, dict(gains), _leader(shares), f"gathering evidence: {n} labelled picks per arm so far")
    means = np.array([float(gains[a].mean or 0.0) for a in arms])
    ses = np.array([max(float(gains[a].se or 0.0), 1e-6) for a in arms])
    draws = rng.normal(means, ses, size=(POSTERIOR_DRAWS, len(arms)))
    best = np.bincount(draws.argmax(axis=1), minlength=len(arms)) / POSTERIOR_DRAWS
    raw = min_share + (1.0 - min_share * len(arms)) * best
    shares = {a: float(s) for a, s in zip(arms, raw / raw.sum(), strict=True)}
    leader = _leader(shares)
    g = gains[leader]
    if leader == "random":
        others = ", ".join(f"{a} {float(gains[a].mean or 0.0):+.1f}" for a in arms if a != "random")
        reason = f"no rule beat random on this project's labels yet ({others} points, m = {g.n})"
    else:
        reason = (
            f"{leader} picks train the proxy {float(g.mean or 0.0):+.1f} ± {float(g.se or 0.0):.1f} points "
            f"better than random picks (m = {g.n}); best with probability {best[arms.index(leader)]:.2f}"
        )
    return Split(shares, dict(gains), leader, reason)


def allocate(shares: Mapping[str, float], n: int) -> dict[str, int]:
    """``n`` picks split by ``shares`` (largest remainders; every arm with a share gets ≥ 1 while
    n allows), summing to n exactly."""
    if n < 0:
        raise PortfolioInputError(f"n must be >= 0, got {n}")
    arms = list(shares)
    w = np.array([max(float(shares[a]), 0.0) for a in arms])
    if w.sum() <= 0:
        raise PortfolioInputError("shares must have a positive sum")
    exact = n * w / w.sum()
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    for i in np.flatnonzero((counts == 0) & (w > 0)):  # a floor share never rounds away to nothing
        donor = int(np.argmax(counts))
        if counts[donor] > 1:
            counts[donor] -= 1
            counts[i] += 1
    return {a: int(c) for a, c in zip(arms, counts, strict=True)}


def split_to_json(s: Split) -> dict[str, object]:
    return {
        "in_charge": s.in_charge,
        "shares": {a: round(v, 4) for a, v in s.shares.items()},
        "gains": {a: {"mean": _r(g.mean), "se": _r(g.se), "n": g.n} for a, g in s.gains.items()},
        "reason": s.reason,
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def _leader(shares: Mapping[str, float]) -> str:
    return max(shares, key=lambda a: (shares[a], a == "random"))  # a tie goes to random


def _accuracy_without(
    parts: Mapping[str, tuple[np.ndarray, np.ndarray]],
    drops: Mapping[str, np.ndarray],
    arm: str,
    ex: np.ndarray,
    ey: np.ndarray,
    n_classes: int,
) -> float:
    """The proxy's accuracy on (ex, ey) trained on every part, less the ``drops[arm]`` rows of ``arm``."""
    xs, ys = [], []
    for name, (x, y) in parts.items():
        keep = np.setdiff1d(np.arange(len(y)), drops[name]) if name == arm else np.arange(len(y))
        xs.append(x[keep])
        ys.append(y[keep])
    return _accuracy(np.concatenate(xs), np.concatenate(ys), ex, ey, n_classes)


def _accuracy(x: np.ndarray, y: np.ndarray, ex: np.ndarray, ey: np.ndarray, n_classes: int) -> float:
    return float((fit_proxy(x, y, n_classes).predict_proba(ex).argmax(axis=1) == ey).mean())


def split_labels(x: np.ndarray, y: np.ndarray, arms: Sequence[str], n_classes: int, rng: np.random.Generator) -> Split:
    """The split from the labels so far: row i of (x, y) was picked by ``arms[i]`` — "seed" (the
    shared cold start), "random" (any uniform draw: the random slices and the random arm), an arm of
    ARMS, or anything else (picked by another strategy: it trains the model but is no evidence)."""
    if not len(x) == len(y) == len(arms):
        raise PortfolioInputError(f"x, y and arms must match, got {len(x)}, {len(y)}, {len(arms)}")
    tags = np.asarray(list(arms), dtype=object)

    def rows(arm: str) -> tuple[np.ndarray, np.ndarray]:
        at = np.flatnonzero(tags == arm)
        return x[at], y[at]

    seed_x, seed_y = rows("seed")
    uniform_x, uniform_y = rows("random")
    rest = np.flatnonzero(~np.isin(tags, ["seed", "random", *ARMS]))
    gains = estimate_gains(
        seed_x=seed_x,
        seed_y=seed_y,
        uniform_x=uniform_x,
        uniform_y=uniform_y,
        picks={arm: rows(arm) for arm in ARMS if arm != "random"},
        n_classes=n_classes,
        rng=rng,
        other=(x[rest], y[rest]),
    )
    return split(gains, rng)
