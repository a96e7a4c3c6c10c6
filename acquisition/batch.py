"""Batch selection: a random slice, then the committee's soft-rank draws (the default) or top-M by
uncertainty with greedy k-center for diversity (the wave-1 default, kept as an ablation).

All functions take the *eligible* rows only: the caller (the round service) has already removed
labeled, skipped, in-review, test-set and in-flight items, and maps the returned positions back to
item ids. Nothing here knows about items, rounds or Django.

Distance: every embedding row is L2-normalised here (MiniLM vectors already are), and the k-center
distance is the cosine distance ``1 - <x, y>``. On unit vectors the squared euclidean distance is
``2 - 2<x, y>``, a monotone function of it, so farthest-first picks the same items under either
metric; cosine keeps the arithmetic to one matrix product. Internally we track the largest
similarity to any chosen centre (equivalently the smallest distance) and pick its argmin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import torch

# The strategies that combine these functions, and what each reads: acquisition/strategies.py.

# Cosine similarity above which two texts count as near-duplicates (paraphrase-level for MiniLM):
# labelling the second teaches the model almost nothing the first did not.
NEAR_DUPLICATE = 0.95
# The active strategy's soft-rank exponent: draw probability ∝ rank^-β over the committee's
# uncertainty. β = 1 (Kirsch et al.'s default) gives ranks beyond the batch a third or more of the
# draws (of 2,000 candidates, 85 draws: 39 % from ranks > 85); β = 2 keeps the draws stochastic but
# near the top (< 1 %). β = 2 measured on the H200 (bench/RESULTS.md, session 11; 3 seeds, 1,000
# labels, the same random arm): Δ area vs random CLINC150 +6.0 (β 1: +4.9), emotion +4.0 (+3.5), the
# other four within 0.2 — but on SNIPS at 200 labels 1.7 points under the cheap margin loop (β 1:
# 0.7 over it): its harder batches pulled one seed's blend weight to the proxy alone (86.0 % where
# the adapters had 91.0). On the cheap learner (train holdouts, 5 seeds): emotion +3.2 (+2.1), the
# other five within 0.2. So 1 stays the default and 2 is an option (loop option softrank_beta).
DEFAULT_SOFTRANK_BETA = 1.0
RngLike = np.random.Generator | int

# Tile side for the candidate × seed similarity pass: a 4096×4096 float32 tile is 64 MiB, big
# enough for BLAS/cuBLAS to run near peak, small enough that M×L is never held at once.
CPU_CHUNK = 4096
# On a GPU the tile can be 16× larger (1 GiB) and still leave the card almost empty.
GPU_CHUNK = 16384


class SelectionInputError(ValueError):
    """Inputs that cannot produce a valid batch: NaN/inf, shape mismatches, b outside 1..N, etc."""


@dataclass(frozen=True)
class Selection:
    """Positions into the eligible rows passed in, and whether each came from the random slice.

    Order: the random slice first, then the k-center picks in the order they were chosen."""

    indices: np.ndarray  # int64[b], distinct
    is_random: np.ndarray  # bool[b]
    arms: tuple[str, ...] = ()  # the portfolio's arm of each pick (empty for the other strategies)


def label_mass_filter(mass_mean: np.ndarray, threshold: float) -> np.ndarray:
    """True where the ensemble's mean probability mass on the label codes is below ``threshold``:
    the model is answering something other than a label (garbage text, off-task prompt), so the item
    goes to the leads' review bucket instead of the selection pool."""
    mass = np.asarray(mass_mean, dtype=np.float64)
    if mass.ndim != 1:
        raise SelectionInputError(f"mass_mean must be 1-D, got shape {mass.shape}")
    if not np.isfinite(mass).all():
        raise SelectionInputError("mass_mean contains NaN or inf")
    if not 0.0 <= threshold <= 1.0:
        raise SelectionInputError(f"threshold must be within [0, 1], got {threshold}")
    return mass < threshold


def select_batch(
    uncertainty: np.ndarray,
    emb: np.ndarray,
    labeled_emb: np.ndarray,
    *,
    b: int,
    m: int,
    random_share: float,
    rng: RngLike,
    device: str | None = None,
    chunk: int | None = None,
) -> Selection:
    """Pick ``b`` of the N eligible rows (exclusions are the caller's job: pass only eligible rows).

    1. ``r = round(random_share * b)`` rows uniformly from all N (keeps the batch honest: an unbiased
       slice the evaluation and the acquisition function cannot steer).
    2. Top-``m`` of the remaining rows by uncertainty (higher = more uncertain). Ties are broken by
       a permutation drawn from ``rng``, so all-equal uncertainty gives a seeded random order.
       ``m`` is clamped up to ``b`` (a candidate set smaller than the batch makes no sense) and down
       to the rows left after the random slice.
    3. Greedy k-center (farthest-first) over those candidates, picking ``b - r``; the seeds are the
       labeled items plus the random slice (both will be labeled, so a near-duplicate of either is
       wasted effort). With no seeds at all (empty labeled set and r = 0) the first pick is the most
       uncertain candidate.

    Deterministic for a given seed. Raises SelectionInputError on NaN/inf, shape mismatch,
    b <= 0, b > N, m <= 0 or random_share outside [0, 1].
    """
    u = _as_vector(uncertainty, "uncertainty")
    x = _as_matrix(emb, "emb")
    seeds = _as_matrix(labeled_emb, "labeled_emb", dim=x.shape[1] if x.ndim == 2 else None)
    n = len(u)
    if x.shape[0] != n:
        raise SelectionInputError(f"uncertainty has {n} rows but emb has {x.shape[0]}")
    _check_b(b, n)
    if m <= 0:
        raise SelectionInputError(f"m must be positive, got {m}")
    if not 0.0 <= random_share <= 1.0:
        raise SelectionInputError(f"random_share must be within [0, 1], got {random_share}")
    gen = np.random.default_rng(rng)

    r = int(np.floor(random_share * b + 0.5))  # round half up, not Python's banker's rounding
    random_idx = gen.choice(n, size=r, replace=False).astype(np.int64)
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), random_idx, assume_unique=True)
    ranked = rest[_rank_desc(u[rest], gen)]
    candidates = ranked[: min(max(m, b), len(rest))]
    picks = kcenter_greedy(x[candidates], np.concatenate([seeds, x[random_idx]]), b - r, device=device, chunk=chunk)
    return _selection(random_idx, candidates[picks])


def kcenter_greedy(
    cand_emb: np.ndarray,
    labeled_emb: np.ndarray,
    k: int,
    *,
    device: str | None = None,
    chunk: int | None = None,
    first: int = 0,
) -> np.ndarray:
    """Farthest-first traversal: ``k`` candidate positions, in pick order.

    Each candidate's distance to its nearest seed (``labeled_emb``) is computed in tiles of
    ``chunk × chunk``; then repeatedly the candidate farthest from everything chosen so far is
    picked and the minimum distances are updated against it (one matrix-vector product per pick).
    Ties go to the lowest candidate position, so callers order candidates by priority. With no seeds
    the first pick is ``first``. ``device``: "cuda", "cpu" or None (CUDA when available).
    """
    cand = _as_matrix(cand_emb, "cand_emb")
    seeds = _as_matrix(labeled_emb, "labeled_emb", dim=cand.shape[1])
    if not 0 <= k <= len(cand):
        raise SelectionInputError(f"k must be within [0, {len(cand)}], got {k}")
    if k == 0:
        return np.empty(0, dtype=np.int64)
    if len(seeds) == 0 and not 0 <= first < len(cand):
        raise SelectionInputError(f"first must index a candidate, got {first}")
    import torch

    dev = _device(device)
    tile = chunk or (GPU_CHUNK if dev.type == "cuda" else CPU_CHUNK)
    with torch.inference_mode():
        c = _unit_rows(torch.from_numpy(cand).to(dev), "cand_emb")
        nearest = _max_similarity(c, seeds, dev, tile)
        if len(seeds) == 0:
            nearest.fill_(-2.0)  # below any cosine, so the first update replaces it outright
            nearest[first] = float("-inf")  # the forced first pick: argmin lands on it
        if dev.type != "cpu":
            return _farthest_first(c, nearest, k).cpu().numpy()
        # One thread for the loop: each step is a memory-bound M×d matrix-vector product too small
        # to split, and on a busy 2-core host a second BLAS thread waiting for its partner made
        # the loop 5× slower (bench/RESULTS-select.md). The tiled pass above keeps every thread.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _farthest_first(c, nearest, k).numpy()
        finally:
            torch.set_num_threads(threads)


def select_cold_start(
    emb: np.ndarray,
    labeled_emb: np.ndarray,
    *,
    b: int,
    rng: RngLike,
    mode: Literal["random", "diversity", "typical", "hedged"] = "random",
    device: str | None = None,
) -> Selection:
    """The first batch(es), before any adapter can score: ``random`` (uniform, all flagged random),
    ``diversity`` (k-center over the whole eligible pool seeded with whatever is labeled; with
    nothing labeled the first pick is random) or ``typical`` (select_typical). The round code
    decides when to use it. ``hedged``: select_hedged."""
    x = _as_matrix(emb, "emb")
    seeds = _as_matrix(labeled_emb, "labeled_emb", dim=x.shape[1])
    _check_b(b, len(x))
    gen = np.random.default_rng(rng)
    if mode == "random":
        return _selection(gen.choice(len(x), size=b, replace=False).astype(np.int64), np.empty(0, np.int64))
    if mode == "diversity":
        first = int(gen.integers(len(x)))
        return _selection(np.empty(0, np.int64), kcenter_greedy(x, seeds, b, device=device, first=first))
    if mode == "typical":
        return select_typical(x, seeds, b=b, rng=gen)
    if mode == "hedged":
        return select_hedged(x, seeds, b=b, rng=gen)
    raise SelectionInputError(f"unknown cold-start mode {mode!r}")


# TypiClust (Hacohen et al., 2022): the cold batch's clustering runs on at most this many eligible rows
# (a seeded sample; a 2-million-row pool would otherwise make round 1 the slowest), and an item's
# typicality is measured over its TYPICAL_NEIGHBOURS nearest cluster mates (the paper's 20).
TYPICAL_MAX_POINTS = 20000
TYPICAL_NEIGHBOURS = 20
# k-means cost grows with the cluster count (labels + batch): a project that imports thousands of labels
# before its first adapter would cluster for minutes. Past 500 regions (the shared sets' seed sets are
# 100–300) the least-covered clusters give several picks each instead.
TYPICAL_MAX_CLUSTERS = 500
# Lloyd iterations of the spherical k-means: the assignment rarely moves after ~20 on MiniLM vectors,
# and an unconverged partition only changes which typical item a cluster offers, not its validity.
KMEANS_ITERATIONS = 30


def select_hedged(emb: np.ndarray, labeled_emb: np.ndarray, *, b: int, rng: RngLike) -> Selection:
    """Half the cold batch typical (select_typical, rounded down), the rest a uniform draw from the
    eligible rows it left, flagged random. The typical half covers the pool's dense regions; the
    uniform half keeps a class the embeddings do not gather into a region at its share of the pool —
    on TREC the all-typical seed set held 11 % "description" questions against 21 % in the pool,
    on SST-2 36 negatives in 100 (bench/raw/2026-12-02/picks-sim9-e599098.md). Deterministic for a seed."""
    x = _as_matrix(emb, "emb")
    _check_b(b, len(x))
    gen = np.random.default_rng(rng)
    n_typical = b // 2
    typical = select_typical(x, labeled_emb, b=n_typical, rng=gen).indices if n_typical else np.empty(0, np.int64)
    rest = np.setdiff1d(np.arange(len(x), dtype=np.int64), typical)
    uniform = np.sort(gen.choice(rest, size=b - n_typical, replace=False)).astype(np.int64)
    return _selection(uniform, typical)


def select_typical(emb: np.ndarray, labeled_emb: np.ndarray, *, b: int, rng: RngLike) -> Selection:
    """The cold batch by typicality (TypiClust): k-means with (labeled + b) clusters (at most
    TYPICAL_MAX_CLUSTERS) over the eligible rows and the labeled ones; the clusters holding the fewest
    labeled items (then the largest) each give their most typical item — the one nearest its cluster
    mates (1 / mean cosine distance to its TYPICAL_NEIGHBOURS nearest). A random seed set spends its few
    labels on the pool's outskirts and duplicates of dense regions alike; farthest-first
    (``diversity``) favours outliers; the typical item of every region is what a model with almost no
    labels learns most from. All picks are flagged non-random. Deterministic for a given seed."""
    x = _unit_np(_as_matrix(emb, "emb"))
    seeds = _as_matrix(labeled_emb, "labeled_emb", dim=x.shape[1])
    _check_b(b, len(x))
    gen = np.random.default_rng(rng)
    rows = np.arange(len(x), dtype=np.int64)
    if len(x) > max(TYPICAL_MAX_POINTS, b):  # never fewer rows than the batch needs
        rows = np.sort(gen.choice(len(x), size=max(TYPICAL_MAX_POINTS, b), replace=False))
    if len(seeds) > TYPICAL_MAX_POINTS:
        seeds = seeds[np.sort(gen.choice(len(seeds), size=TYPICAL_MAX_POINTS, replace=False))]
    points = np.concatenate([x[rows], _unit_np(seeds)]) if len(seeds) else x[rows]
    k = min(len(seeds) + b, TYPICAL_MAX_CLUSTERS, len(points))
    assign = spherical_kmeans(points, k, gen)
    pool_assign, labeled_assign = assign[: len(rows)], assign[len(rows) :]
    covered = np.bincount(labeled_assign, minlength=k)
    size = np.bincount(pool_assign, minlength=k)
    members = [np.flatnonzero(pool_assign == c) for c in range(k)]
    ranked = [m[np.argsort(-_typicality(x[rows[m]]), kind="stable")] for m in members]
    taken = np.zeros(k, dtype=np.int64)  # picks so far per cluster
    picks: list[int] = []
    while len(picks) < b:
        open_ = np.flatnonzero(taken < size)
        c = open_[np.lexsort((-size[open_], covered[open_] + taken[open_]))[0]]
        picks.append(int(rows[ranked[c][taken[c]]]))
        taken[c] += 1
    return _selection(np.empty(0, np.int64), np.asarray(picks, dtype=np.int64))


def spherical_kmeans(x: np.ndarray, k: int, rng: RngLike, *, iterations: int = KMEANS_ITERATIONS) -> np.ndarray:
    """Cluster of each unit row [N] under cosine k-means (greedy k-means++ seeding, Lloyd steps on the
    unit sphere). An empty cluster takes the row farthest from its centre, so all ``k`` stay in use."""
    x = np.asarray(x, dtype=np.float32)
    if not 1 <= k <= len(x):
        raise SelectionInputError(f"k must be within [1, {len(x)}], got {k}")
    gen = np.random.default_rng(rng)
    centres = np.empty((k, x.shape[1]), dtype=np.float32)
    centres[0] = x[gen.integers(len(x))]
    nearest = np.maximum(1.0 - x @ centres[0], 0.0)  # ∝ squared euclidean distance on the sphere
    trials = 2 + int(np.log(k))  # greedy k-means++ (scikit-learn's): the best of a few draws
    for j in range(1, k):
        total = float(nearest.sum(dtype=np.float64))
        if total <= 0:  # every row sits on a centre already
            centres[j] = x[gen.integers(len(x))]
            continue
        tried = gen.choice(len(x), size=trials, p=nearest.astype(np.float64) / total)
        options = np.minimum(nearest[None, :], np.maximum(1.0 - x[tried] @ x.T, 0.0))
        best = int(np.argmin(options.sum(axis=1, dtype=np.float64)))
        centres[j], nearest = x[tried[best]], options[best]
    assign = np.zeros(len(x), dtype=np.int64)
    for step in range(iterations):
        sims = x @ centres.T
        new = sims.argmax(axis=1)
        counts = np.bincount(new, minlength=k)
        for c in np.flatnonzero(counts == 0):  # refill an empty cluster with the worst-fitting row
            worst = int(np.argmin(sims[np.arange(len(x)), new]))
            new[worst] = c
            sims[worst, :] = -np.inf
            sims[worst, c] = 1.0
        if step > 0 and np.array_equal(new, assign):
            break
        assign = new
        sums = np.zeros_like(centres)
        np.add.at(sums, assign, x)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centres = np.where(norms > 1e-12, sums / np.maximum(norms, 1e-12), centres).astype(np.float32)
    return assign


def _typicality(x: np.ndarray, tile: int = 2048) -> np.ndarray:
    """1 / mean cosine distance to each row's nearest TYPICAL_NEIGHBOURS other rows (a lone row: 0),
    ``tile`` rows at a time so a large cluster never holds its whole distance matrix."""
    if len(x) < 2:
        return np.zeros(len(x))
    n = min(TYPICAL_NEIGHBOURS, len(x) - 1)
    out = np.empty(len(x))
    for start in range(0, len(x), tile):
        dist = np.maximum(1.0 - x[start : start + tile] @ x.T, 0.0)
        dist[np.arange(len(dist)), start + np.arange(len(dist))] = np.inf  # not its own neighbour
        near = np.partition(dist, n - 1, axis=1)[:, :n]
        out[start : start + len(dist)] = 1.0 / (near.mean(axis=1, dtype=np.float64) + 1e-9)
    return out


def soft_rank_sample(score: np.ndarray, k: int, rng: RngLike, *, beta: float = 1.0) -> np.ndarray:
    """``k`` distinct positions drawn without replacement with probability ∝ rank^-β (rank 1 = the
    highest score): Gumbel-top-k on -β·log(rank). Stochastic acquisition (Kirsch et al., 2023):
    a top-k batch piles onto one region of the most uncertain items (and onto label noise); drawing
    by rank keeps the preference for uncertain items, is blind to the score's scale (margins of a
    sharp and of a flat model rank the same way) and spreads the batch. Returned in draw order."""
    u = _as_vector(score, "score")
    if not 0 <= k <= len(u):
        raise SelectionInputError(f"k must be within [0, {len(u)}], got {k}")
    if beta < 0:
        raise SelectionInputError(f"beta must be >= 0, got {beta}")
    gen = np.random.default_rng(rng)
    ranks = np.empty(len(u), dtype=np.float64)
    ranks[_rank_desc(u, gen)] = np.arange(1, len(u) + 1)
    keys = -beta * np.log(ranks) + gen.gumbel(size=len(u))
    return np.argsort(-keys, kind="stable")[:k].astype(np.int64)


def committee_distribution(
    mean_p: np.ndarray, proxy_p: np.ndarray, n_members: int, *, weight: float | None = None
) -> np.ndarray:
    """The committee's label distribution [N, C]. Without ``weight`` (committee "members", the default):
    the K adapters' mean and the proxy as one more member, (K·p̄ + p_proxy) / (K + 1). With it (committee
    "blend"): the round's own predictor, w·p̄ + (1 - w)·p_proxy at the blend weight w the last evaluation
    fitted (predictor/blend.py), so the draws follow the uncertainty of what actually predicts."""
    llm = np.asarray(mean_p, dtype=np.float64)
    proxy = np.asarray(proxy_p, dtype=np.float64)
    if llm.shape != proxy.shape or llm.ndim != 2:
        raise SelectionInputError(f"mean_p {llm.shape} and proxy_p {proxy.shape} must both be [N, C]")
    if n_members < 1:
        raise SelectionInputError(f"n_members must be >= 1, got {n_members}")
    if weight is not None:
        if not 0.0 <= weight <= 1.0:
            raise SelectionInputError(f"the blend weight must lie in [0, 1], got {weight}")
        return weight * llm + (1.0 - weight) * proxy
    return (n_members * llm + proxy) / (n_members + 1)


def select_committee(
    committee_p: np.ndarray,
    emb: np.ndarray,
    labeled_emb: np.ndarray,
    *,
    b: int,
    random_share: float,
    rng: RngLike,
    beta: float = DEFAULT_SOFTRANK_BETA,
) -> Selection:
    """The default batch. 1. the random slice (as select_batch); 2. the rest drawn by soft rank of
    the committee's uncertainty (1 - margin of ``committee_p``; draw probability ∝ rank^-``beta``,
    soft_rank_sample), skipping any draw within
    NEAR_DUPLICATE cosine of a labeled item or of an item already in the batch; if that leaves the
    batch short (a pool of near-duplicates), the skipped draws fill it in draw order."""
    p, x, seeds = _committee_inputs(committee_p, emb, labeled_emb, b, random_share)
    gen = np.random.default_rng(rng)
    random_idx, rest = _random_slice(len(x), b, random_share, gen)
    order = rest[soft_rank_sample(committee_uncertainty(p[rest]), len(rest), gen, beta=beta)]
    taken = _taken(seeds, x, random_idx)
    chosen, _ = _draw_unique(order, b - len(random_idx), x, taken)
    return _selection(random_idx, np.asarray(chosen, dtype=np.int64))


def committee_uncertainty(p: np.ndarray) -> np.ndarray:
    """1 - margin of label distributions [N, C]: higher = more uncertain."""
    top2 = np.sort(np.asarray(p, dtype=np.float64), axis=1)[:, -2:]
    return np.asarray(1.0 - (top2[:, 1] - top2[:, 0]))


def select_portfolio(
    committee_p: np.ndarray,
    emb: np.ndarray,
    labeled_emb: np.ndarray,
    *,
    b: int,
    random_share: float,
    shares: dict[str, float],
    rng: RngLike,
    beta: float = DEFAULT_SOFTRANK_BETA,
) -> Selection:
    """The adaptive portfolio's batch (acquisition.portfolio): the random slice, then the rest split by
    ``shares`` among the arms — "margin" (top committee uncertainty), "softrank" (the default's
    draws), "random" (uniform) — near-duplicates skipped for the first two. ``arms`` names each
    pick's arm (the slice counts as "random": it is a uniform draw too)."""
    from acquisition.portfolio import ARMS, allocate

    p, x, seeds = _committee_inputs(committee_p, emb, labeled_emb, b, random_share)
    if set(shares) - set(ARMS) or not shares:
        raise SelectionInputError(f"shares must name arms among {ARMS}, got {sorted(shares)}")
    gen = np.random.default_rng(rng)
    random_idx, rest = _random_slice(len(x), b, random_share, gen)
    counts = allocate(shares, b - len(random_idx))
    u = committee_uncertainty(p[rest])
    taken = _taken(seeds, x, random_idx)
    chosen: list[int] = []
    arms: list[str] = ["random"] * len(random_idx)
    orders = {
        "margin": rest[_rank_desc(u, gen)],
        "softrank": rest[soft_rank_sample(u, len(rest), gen, beta=beta)],
        "random": gen.permutation(rest),
    }
    for arm in ARMS:
        want = counts.get(arm, 0)
        if want == 0:
            continue
        order = orders[arm][~np.isin(orders[arm], chosen)]
        if arm == "random":
            got = [int(i) for i in order[:want]]
        else:
            got, taken = _draw_unique(order, want, x, taken)
        chosen += got
        arms += [arm] * len(got)
    short = b - len(random_idx) - len(chosen)  # a pool too small for every arm's count
    if short > 0:
        extra = [int(i) for i in rest if int(i) not in set(chosen)][:short]
        chosen += extra
        arms += ["random"] * len(extra)
    sel = _selection(random_idx, np.asarray(chosen, dtype=np.int64))
    return Selection(indices=sel.indices, is_random=sel.is_random, arms=tuple(arms))


def select_top_uncertainty(uncertainty: np.ndarray, *, b: int, rng: RngLike) -> Selection:
    """The ``b`` most uncertain rows, highest first; ties in a seeded random order."""
    u = _as_vector(uncertainty, "uncertainty")
    _check_b(b, len(u))
    return _selection(np.empty(0, np.int64), _rank_desc(u, np.random.default_rng(rng))[:b])


# --- helpers -----------------------------------------------------------------------------------


def _selection(random_idx: np.ndarray, chosen: np.ndarray) -> Selection:
    indices = np.concatenate([random_idx, chosen]).astype(np.int64)
    is_random = np.concatenate([np.ones(len(random_idx), bool), np.zeros(len(chosen), bool)])
    return Selection(indices=indices, is_random=is_random)


def _committee_inputs(
    committee_p: np.ndarray, emb: np.ndarray, labeled_emb: np.ndarray, b: int, random_share: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(committee_p as float64, unit embedding rows, labeled rows), checked for the committee draws."""
    p = np.asarray(committee_p, dtype=np.float64)
    x = _unit_np(_as_matrix(emb, "emb"))
    seeds = _as_matrix(labeled_emb, "labeled_emb", dim=x.shape[1])
    if p.ndim != 2 or len(p) != len(x) or not np.isfinite(p).all():
        raise SelectionInputError(f"committee_p must be a finite [N, C] matching emb's {len(x)} rows, got {p.shape}")
    _check_b(b, len(x))
    if not 0.0 <= random_share <= 1.0:
        raise SelectionInputError(f"random_share must be within [0, 1], got {random_share}")
    return p, x, seeds


def _random_slice(n: int, b: int, random_share: float, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """round(random_share · b) uniform positions, and every other position."""
    r = int(np.floor(random_share * b + 0.5))
    random_idx = gen.choice(n, size=r, replace=False).astype(np.int64)
    return random_idx, np.setdiff1d(np.arange(n, dtype=np.int64), random_idx, assume_unique=True)


def _taken(seeds: np.ndarray, x: np.ndarray, random_idx: np.ndarray) -> np.ndarray:
    """Unit rows a new pick must not duplicate: the labeled items and the random slice."""
    if len(seeds) or len(random_idx):
        return np.concatenate([_unit_np(seeds), x[random_idx]])
    return np.zeros((0, x.shape[1]))


def _draw_unique(order: np.ndarray, k: int, x: np.ndarray, taken: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The first ``k`` of ``order`` that are not within NEAR_DUPLICATE cosine of ``taken`` or of an
    earlier pick; if that leaves fewer than ``k`` (a pool of near-duplicates), the skipped ones fill
    in, in order. Returns the picks and ``taken`` with them added."""
    chosen: list[int] = []
    skipped: list[int] = []
    for i in order:
        if len(chosen) == k:
            break
        if len(taken) and float((taken @ x[i]).max()) > NEAR_DUPLICATE:
            skipped.append(int(i))
            continue
        chosen.append(int(i))
        taken = np.vstack([taken, x[i : i + 1]])
    chosen += skipped[: k - len(chosen)]
    return chosen, taken


def _rank_desc(values: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """Positions sorted by value, highest first; equal values in a seeded random order."""
    perm = gen.permutation(len(values))
    return perm[np.argsort(-values[perm], kind="stable")]


def _check_b(b: int, n: int) -> None:
    if b <= 0:
        raise SelectionInputError(f"b must be positive, got {b}")
    if b > n:
        raise SelectionInputError(f"b={b} exceeds the {n} eligible rows")


def _as_vector(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise SelectionInputError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise SelectionInputError(f"{name} contains NaN or inf")
    return arr


def _as_matrix(values: Any, name: str, dim: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.float32)
    if arr.ndim == 1 and arr.size == 0 and dim is not None:
        arr = arr.reshape(0, dim)  # an empty labeled set given as []
    if arr.ndim != 2:
        raise SelectionInputError(f"{name} must be 2-D, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise SelectionInputError(f"{name} has dimension {arr.shape[1]}, expected {dim}")
    if not np.isfinite(arr).all():
        raise SelectionInputError(f"{name} contains NaN or inf")
    return arr


def _unit_np(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if len(x) and bool((norms < 1e-12).any()):
        raise SelectionInputError("embeddings have an all-zero row (no direction to compare)")
    return x / np.where(norms < 1e-12, 1.0, norms)


def _device(device: str | None) -> torch.device:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _unit_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    norms = x.norm(dim=1, keepdim=True)
    if bool((norms < 1e-12).any()):
        raise SelectionInputError(f"{name} has an all-zero row (no direction to compare)")
    return x / norms


def _max_similarity(cand: torch.Tensor, seeds: np.ndarray, dev: torch.device, tile: int) -> torch.Tensor:
    """Each candidate's cosine similarity to its nearest seed (-inf without seeds), tile by tile."""
    import torch

    best = torch.full((len(cand),), float("-inf"), device=dev)
    for s0 in range(0, len(seeds), tile):
        s = _unit_rows(torch.from_numpy(seeds[s0 : s0 + tile]).to(dev), "labeled_emb")
        for c0 in range(0, len(cand), tile):
            block = cand[c0 : c0 + tile] @ s.T
            torch.maximum(best[c0 : c0 + tile], block.amax(dim=1), out=best[c0 : c0 + tile])
    return best


def _farthest_first(cand: torch.Tensor, nearest: torch.Tensor, k: int) -> torch.Tensor:
    """The greedy loop. ``nearest`` (max similarity to any centre) is updated in place. No host
    sync inside the loop (index_select / index_fill_ instead of Python indexing), so on a GPU the
    kernels queue back to back."""
    import torch

    picks = torch.empty(k, dtype=torch.long, device=cand.device)
    for t in range(k):
        i = torch.argmin(nearest).view(1)  # first occurrence on ties: lowest position wins
        picks[t : t + 1] = i
        sims = torch.mv(cand, torch.index_select(cand, 0, i)[0])
        torch.maximum(nearest, sims, out=nearest)
        nearest.index_fill_(0, i, float("inf"))  # never again, even against exact duplicates
    return picks


ColdMode = Literal["random", "diversity", "typical", "hedged"]
Committee = Literal["members", "blend"]
COMMITTEES = ("members", "blend")
COLD_MODES = ("random", "diversity", "typical", "hedged")


@dataclass(frozen=True)
class SelectionConfig:
    batch_size: int  # B
    oversample: float  # M / B
    random_share: float  # share of B drawn uniformly (the random arm trains on these)
    mass_threshold: float  # ensemble-mean label mass under this: review bucket
    uncertainty: Literal["margin", "entropy", "bald"] = "margin"
    cold_start_batches: int = 1
    cold_mode: ColdMode = "random"
    # The soft-rank draws' rank exponent (soft_rank_sample's β) for "active" and the portfolio's
    # "softrank" arm: 0 uniform, 1 ∝ 1/rank (the default: DEFAULT_SOFTRANK_BETA), larger → top-k.
    softrank_beta: float = DEFAULT_SOFTRANK_BETA
    # Whose uncertainty the soft rank follows: "members" (the K adapters and the proxy as K + 1 equal
    # members) or "blend" (the round's predictor at its fitted weight): committee_distribution.
    committee: Committee = "members"


# -- the signals selection reads ------------------------------------------------------------------


@dataclass(frozen=True)
class Signals:
    """What selection needs from the scores of the full rows."""

    mean_p: np.ndarray  # float32[N, C]
    mass_mean: np.ndarray  # float[N]
    uncertainty: np.ndarray  # float[N]
    review: np.ndarray  # bool[N]: label mass under the threshold → review bucket


def signals(p: np.ndarray, mass: np.ndarray, config: SelectionConfig) -> Signals:
    from scoring.uncertainty import mean_distribution, uncertainty

    mass_mean = mass.mean(axis=0) if len(p) else np.zeros(0)
    return Signals(
        mean_p=mean_distribution(p) if p.shape[1] else np.zeros((0, p.shape[2] if p.ndim == 3 else 0)),
        mass_mean=mass_mean,
        uncertainty=uncertainty(config.uncertainty, p, mass) if p.shape[1] else np.zeros(0),
        review=label_mass_filter(mass_mean, config.mass_threshold) if p.shape[1] else np.zeros(0, bool),
    )
