"""Cheap rescoring: which pool items to score this round, and a two-stage ensemble pass.

Scoring the whole pool with K adapters every round is the dominant cost. Instead:
1. candidates = last round's most uncertain share (they are the likeliest to be selected again)
   + a uniform random sample of the rest of the pool, ``candidate_sample`` items in all;
2. optionally score all candidates with one adapter first, and all K only on the most uncertain
   ``first_pass_share`` of them.
Pure functions; randomness comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scoring.uncertainty import UncertaintyKind


class RescoringInputError(ValueError):
    pass


def top_share(values: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``ceil(share · N)`` largest values, ties broken at random. Sorted ascending."""
    values = np.asarray(values, dtype=np.float64)
    if not 0.0 <= share <= 1.0:
        raise RescoringInputError(f"share must be in [0, 1], got {share}")
    if np.isnan(values).any():
        raise RescoringInputError("values contain NaN")
    count = math.ceil(share * len(values))
    # lexsort: last key is primary → descending value, then a random permutation among ties.
    order = np.lexsort((rng.permutation(len(values)), -values))
    return np.sort(order[:count])


def choose_candidates(
    pool_ids: np.ndarray,
    *,
    sample: int,
    last_ids: np.ndarray,
    last_uncertainty: np.ndarray,
    carry_top_share: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Item ids to score this round (sorted, unique, all from ``pool_ids``).

    ``sample == 0`` or ``sample >= len(pool)``: the whole pool. Otherwise the top ``carry_top_share``
    of last round's scored items (``last_ids`` with their ``last_uncertainty``; those no longer in
    the pool, e.g. labelled since, are skipped) plus a uniform sample of the remaining pool, so that
    ``sample`` ids are returned in total."""
    pool = np.unique(np.asarray(pool_ids, dtype=np.int64))
    last_ids = np.asarray(last_ids, dtype=np.int64)
    if len(last_ids) != len(np.asarray(last_uncertainty)):
        raise RescoringInputError("last_ids and last_uncertainty differ in length")
    if sample < 0:
        raise RescoringInputError(f"sample must be >= 0, got {sample}")
    if sample == 0 or sample >= len(pool):
        return pool
    carried = last_ids[top_share(np.asarray(last_uncertainty), carry_top_share, rng)]
    carried = np.intersect1d(carried, pool)
    if len(carried) > sample:
        carried = rng.choice(carried, size=sample, replace=False)
    rest = np.setdiff1d(pool, carried, assume_unique=True)
    drawn = rng.choice(rest, size=sample - len(carried), replace=False)
    return np.sort(np.concatenate([carried, drawn]))


def first_pass_kind(kind: UncertaintyKind) -> UncertaintyKind:
    """The signal for the one-adapter first pass: BALD needs K ≥ 2, so it falls back to entropy."""
    return "entropy" if kind == "bald" else kind


def second_stage(first_uncertainty: np.ndarray, first_pass_share: float, rng: np.random.Generator) -> np.ndarray:
    """Indices (into the candidates) to score with all K adapters after the first pass: every index
    when ``first_pass_share >= 1`` (two-stage off), else the most uncertain share. Selection then
    runs on these rows only, with the full-ensemble signal."""
    first_uncertainty = np.asarray(first_uncertainty)
    if first_pass_share >= 1.0:
        return np.arange(len(first_uncertainty))
    return top_share(first_uncertainty, first_pass_share, rng)


@dataclass(frozen=True)
class RescoringConfig:
    candidate_sample: int  # 0: the whole pool
    carry_top_share: float
    first_pass_share: float  # < 1: one adapter first, all K on this top share
    n_shards: int = 0  # 0: one shard per SHARD_ITEMS candidates
