"""faiss index: exact and IVF neighbours, near-duplicate detection over unit vectors."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.index import IndexInputError, VectorIndex, near_duplicates


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_every_item_is_its_own_nearest_neighbour(kind: str) -> None:
    emb = _unit(np.random.default_rng(0), 2_000, 32)
    dist, idx = VectorIndex(emb, kind=kind).search(emb[:200], 5)  # type: ignore[arg-type]
    assert (idx[:, 0] == np.arange(200)).all()
    assert np.allclose(dist[:, 0], 0.0, atol=1e-5)
    assert (np.diff(dist, axis=1) >= -1e-6).all()


def test_flat_search_matches_brute_force_cosine() -> None:
    rng = np.random.default_rng(1)
    emb, queries = 3.0 * _unit(rng, 500, 16), _unit(rng, 20, 16)  # unnormalised pool on purpose
    dist, idx = VectorIndex(emb).search(queries, 3)
    sims = queries @ (emb / 3.0).T
    np.testing.assert_array_equal(idx, np.argsort(-sims, axis=1)[:, :3])
    np.testing.assert_allclose(dist, 1 - np.sort(sims, axis=1)[:, ::-1][:, :3], atol=1e-5)


def test_k_larger_than_the_pool_pads_with_minus_one() -> None:
    emb = _unit(np.random.default_rng(2), 3, 8)
    dist, idx = VectorIndex(emb).search(emb[:1], 5)
    assert idx[0, 3:].tolist() == [-1, -1] and np.isinf(dist[0, 3:]).all()


def test_near_duplicates_point_at_the_earliest_copy() -> None:
    rng = np.random.default_rng(3)
    emb = _unit(rng, 50, 64)
    noisy = emb[[4, 4, 10]] + 0.01 * rng.standard_normal((3, 64)).astype(np.float32)
    dup_of = near_duplicates(np.concatenate([emb, noisy]), threshold=0.95)
    assert dup_of[:50].tolist() == [-1] * 50
    assert dup_of[50:].tolist() == [4, 4, 10]


def test_bad_inputs_raise() -> None:
    with pytest.raises(IndexInputError, match="NaN"):
        VectorIndex(np.full((3, 4), np.nan, np.float32))
    with pytest.raises(IndexInputError, match="columns"):
        VectorIndex(np.eye(4, dtype=np.float32)).search(np.ones((1, 3), np.float32), 1)
    with pytest.raises(IndexInputError, match="threshold"):
        near_duplicates(np.eye(4, dtype=np.float32), threshold=0.0)
