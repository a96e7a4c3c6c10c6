"""faiss behind one small class: nearest neighbours by cosine over unit-norm embeddings.

Used for "similar items" in the lead views (a handful of queries) and for near-duplicate detection
at import (every new item queries the pool). Vectors are L2-normalised here, so inner product is
cosine similarity; ``search`` reports cosine *distance* ``1 - cos`` (0 = the same direction).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

IndexKind = Literal["auto", "flat", "ivf"]

# Exact IndexFlatIP up to 20,000 vectors, IVF above. Measured by bench/select_bench.py on 2 cores,
# d=384, clustered unit vectors (bench/RESULTS-select.md, a busy host): a full near-duplicate pass
# (every row queries the pool) costs flat ~6-10 s at 20k but 140-245 s at 50k and over an hour at
# 200k, growing with N², while IVF (build included) took 23-35 s at 50k with recall@10 = 1.000.
# Below 20k exactness costs seconds, so it is kept; one "similar items" query is < 50 ms either way.
# HNSW searched no faster than IVF and took 2.5× longer to build at 300k on 2 cores, so IVF it is.
APPROX_THRESHOLD = 20_000
# nlist ≈ 4·√N lists is faiss's usual starting point; 39 training points per list is the minimum
# its k-means accepts without warning (so small pools get fewer lists), and more only slows the build.
IVF_LISTS_PER_SQRT_N = 4
IVF_TRAIN_PER_LIST = 39
# 16 probed lists of ~900 (at 50k) scan under 2 % of the pool; recall@10 was 1.000 in the bench.
IVF_NPROBE = 16


class IndexInputError(ValueError):
    """Embeddings that are not a finite float matrix of the index's dimension."""


class VectorIndex:
    """``VectorIndex(emb).search(queries, k) -> (dist, idx)``: cosine distances ascending, row ids."""

    def __init__(self, emb: np.ndarray, *, kind: IndexKind = "auto", seed: int = 0) -> None:
        import faiss

        x = _unit_rows(emb)
        self.size, self.dim = x.shape
        self.kind: Literal["flat", "ivf"] = (
            ("ivf" if self.size > APPROX_THRESHOLD else "flat") if kind == "auto" else kind
        )
        self._index: Any
        if self.kind == "flat":
            self._index = faiss.IndexFlatIP(self.dim)
        else:
            nlist = max(1, min(int(IVF_LISTS_PER_SQRT_N * np.sqrt(self.size)), self.size // IVF_TRAIN_PER_LIST))
            quantizer = faiss.IndexFlatIP(self.dim)
            self._index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            self._index.cp.seed = seed
            sample = np.random.default_rng(seed).permutation(self.size)[: IVF_TRAIN_PER_LIST * nlist]
            self._index.train(x[np.sort(sample)])
            self._index.nprobe = min(IVF_NPROBE, nlist)
            self._quantizer = quantizer  # the IVF index does not own it; keep it alive
        self._index.add(x)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest rows per query: (cosine distance float32[Q, k], row int64[Q, k]); rows
        past the pool size (k > N, or IVF lists too sparse) come back as -1 with distance inf."""
        q = _unit_rows(queries, dim=self.dim)
        if k <= 0:
            raise IndexInputError(f"k must be positive, got {k}")
        if self.size == 0:
            return np.full((len(q), k), np.inf, np.float32), np.full((len(q), k), -1, np.int64)
        sim, idx = self._index.search(q, min(k, self.size))
        dist = np.where(idx >= 0, 1.0 - sim, np.inf).astype(np.float32)
        if k > self.size:
            pad = k - self.size
            dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=np.inf)
            idx = np.pad(idx, ((0, 0), (0, pad)), constant_values=-1)
        return dist, idx.astype(np.int64)


def near_duplicates(
    emb: np.ndarray, threshold: float = 0.95, *, k: int = 10, index: VectorIndex | None = None
) -> np.ndarray:
    """``dup_of``: int64[N], for each row the earliest row it near-duplicates (cosine ≥ threshold),
    or -1. Chains resolve to their first row, so every ``dup_of[i] >= 0`` points at a row that is
    not itself a duplicate. To check an import against the existing pool, pass existing rows first
    and new rows after: a new row then points at the existing item it repeats. Only the ``k``
    nearest neighbours are examined, so a group larger than k may not all resolve to one row.

    The 0.95 default: MiniLM puts punctuation/case variants of one sentence above 0.97 and distinct
    questions on the same topic mostly below 0.9."""
    if not 0.0 < threshold <= 1.0:
        raise IndexInputError(f"threshold must be within (0, 1], got {threshold}")
    index = index or VectorIndex(emb)
    dist, idx = index.search(emb, k + 1)  # +1: each row finds itself first
    dup_of = np.full(len(idx), -1, dtype=np.int64)
    close = (dist <= 1.0 - threshold + 1e-6) & (idx >= 0) & (idx < np.arange(len(idx))[:, None])
    for i in np.flatnonzero(close.any(axis=1)):
        j = int(idx[i][close[i]].min())
        dup_of[i] = dup_of[j] if dup_of[j] >= 0 else j
    return dup_of


def _unit_rows(values: np.ndarray, dim: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(values, dtype=np.float32)
    if x.ndim != 2 or (dim is not None and x.shape[1] != dim):
        raise IndexInputError(f"expected a float matrix with {dim or 'd'} columns, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise IndexInputError("embeddings contain NaN or inf")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if (norms < 1e-12).any():
        raise IndexInputError("embeddings contain an all-zero row")
    return x / norms
