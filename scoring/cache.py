"""On-disk score cache keyed by (item text hash, prompt hash, adapter-set hash).

Layout: ``root/<prompt hash>/<adapter-set hash>/<chunk>.npz``, each chunk holding ``hashes`` (str[N]),
``p`` (float32[K, N, C]) and ``mass`` (float32[K, N]). Every ``put`` writes a new chunk atomically
(temp file + rename), so shards scored by several gpu workers never overwrite each other; a later
chunk wins for a hash scored twice. A read with any other prompt or adapter-set hash is a miss.
Selection must call ``require_current`` so that it never runs on scores of an older adapter set.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scoring.files import atomic_save_npz


class StaleScoresError(RuntimeError):
    """Scores were made with another adapter set (or prompt) than the current one."""


def require_current(scored_with: str, current: str) -> None:
    """Fail closed: refuse scores whose key (adapter-set hash, or prompt hash) is not the current one."""
    if scored_with != current:
        raise StaleScoresError(f"scores were made with {scored_with!r}, the current set is {current!r}; rescore first")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _safe(part: str) -> str:
    if not part or not all(c.isalnum() or c in "-_" for c in part):
        raise ValueError(f"cache key part {part!r} must be a non-empty [A-Za-z0-9_-] string")
    return part


class ScoreCache:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _dir(self, prompt_hash: str, adapter_set_hash: str) -> Path:
        return self.root / _safe(prompt_hash) / _safe(adapter_set_hash)

    def _chunks(self, folder: Path) -> list[Path]:
        # Oldest first, so that later chunks overwrite earlier ones for the same hash.
        return sorted(folder.glob("*.npz"), key=lambda path: (path.stat().st_mtime_ns, path.name))

    def put(
        self,
        text_hashes: Sequence[str],
        prompt_hash: str,
        adapter_set_hash: str,
        p: np.ndarray,
        mass: np.ndarray,
    ) -> Path:
        p = np.asarray(p, dtype=np.float32)
        mass = np.asarray(mass, dtype=np.float32)
        if p.ndim != 3 or mass.shape != p.shape[:2] or p.shape[1] != len(text_hashes):
            raise ValueError(f"p {p.shape} / mass {mass.shape} do not match {len(text_hashes)} hashes as [K, N, C]")
        folder = self._dir(prompt_hash, adapter_set_hash)
        final = folder / f"{os.getpid()}-{uuid.uuid4().hex}.npz"
        return atomic_save_npz(final, hashes=np.asarray(list(text_hashes), dtype=str), p=p, mass=mass)

    def get(
        self, text_hashes: Sequence[str], prompt_hash: str, adapter_set_hash: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hit bool[N], p float32[K, N, C], mass float32[K, N]); rows of misses are NaN. When nothing
        is cached under this key, K and C are unknown and p / mass have shapes (0, N, 0) / (0, N)."""
        n = len(text_hashes)
        hit = np.zeros(n, dtype=bool)
        position = {h: i for i, h in enumerate(text_hashes)}
        p: np.ndarray | None = None
        mass: np.ndarray | None = None
        for chunk in self._chunks(self._dir(prompt_hash, adapter_set_hash)):
            with np.load(chunk, allow_pickle=False) as data:
                hashes, chunk_p, chunk_mass = data["hashes"], data["p"], data["mass"]
            if p is None or mass is None:
                p = np.full((chunk_p.shape[0], n, chunk_p.shape[2]), np.nan, dtype=np.float32)
                mass = np.full((chunk_p.shape[0], n), np.nan, dtype=np.float32)
            if chunk_p.shape[0] != p.shape[0] or chunk_p.shape[2] != p.shape[2]:
                raise ValueError(f"cache chunk {chunk.name} has shape {chunk_p.shape}, others {p.shape}")
            rows = [(position[h], j) for j, h in enumerate(hashes.tolist()) if h in position]
            if rows:
                dst, src = (np.array(x) for x in zip(*rows, strict=True))
                p[:, dst], mass[:, dst], hit[dst] = chunk_p[:, src], chunk_mass[:, src], True
        if p is None or mass is None:
            return hit, np.zeros((0, n, 0), dtype=np.float32), np.zeros((0, n), dtype=np.float32)
        return hit, p, mass
