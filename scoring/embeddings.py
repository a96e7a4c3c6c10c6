"""Sentence embeddings, computed once per distinct text and cached on disk by text hash.

Layout under ``root/<encoder key>/`` (the key hashes the encoder's config and weight file sizes, so
swapping the encoder never mixes vector spaces):

    <shard>.hashes.npy   unicode[n]      the text hashes, in row order
    <shard>.vec.npy      float32[n, d]   L2-normalised vectors

Shards are append-only and never rewritten. A writer saves both files under temporary names and
renames them into place, hashes first, vectors last, so a reader that lists ``*.vec.npy`` only ever
sees complete shards. Two processes appending at once each write their own uniquely named shard; if
both embedded the same text the duplicate rows are identical and the first shard (by name) wins.
No lock is needed, and a killed writer leaves only a ``.tmp`` file behind.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scoring.files import atomic_save_npy

# 64 texts per forward pass: MiniLM's throughput on 2 CPU cores is flat from 32 to 128 and the
# padding waste of longer batches grows; on a GPU pass a larger batch_size.
DEFAULT_BATCH_SIZE = 64


class EmbeddingInputError(ValueError):
    """texts and text_hashes disagree in length."""


class EmbeddingCache:
    """``embed(texts, text_hashes)`` returns float32[N, d] unit rows, encoding only unseen hashes."""

    def __init__(
        self,
        root: str | Path,
        encoder_dir: str | Path,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        device: str | None = None,
    ) -> None:
        self.encoder_dir = Path(encoder_dir)
        self.dir = Path(root) / encoder_key(self.encoder_dir)
        self.batch_size = batch_size
        self.device = device
        self.encoded = 0  # texts this instance sent to the encoder (for progress and tests)
        self._model: Any = None
        self._rows: dict[str, tuple[str, int]] = {}  # text hash -> (shard, row)
        self._shards: dict[str, np.ndarray] = {}  # shard -> memory-mapped vectors

    def embed(self, texts: Sequence[str], text_hashes: Sequence[str]) -> np.ndarray:
        if len(texts) != len(text_hashes):
            raise EmbeddingInputError(f"{len(texts)} texts but {len(text_hashes)} hashes")
        self._refresh()
        missing = {h: t for t, h in zip(texts, text_hashes, strict=True) if h not in self._rows}
        if missing:
            vectors = self._encode(list(missing.values()))
            self._write_shard(list(missing), vectors)
        return self.get(text_hashes)

    def get(self, text_hashes: Sequence[str]) -> np.ndarray:
        """Cached vectors only; KeyError names the first hash that was never embedded."""
        self._refresh()
        out = np.empty((len(text_hashes), self.dim), dtype=np.float32)
        by_shard: dict[str, tuple[list[int], list[int]]] = {}
        for i, h in enumerate(text_hashes):
            shard, row = self._rows[h]
            positions, rows = by_shard.setdefault(shard, ([], []))
            positions.append(i)
            rows.append(row)
        for shard, (positions, rows) in by_shard.items():
            out[positions] = self._shards[shard][rows]  # one fancy-index read per shard
        return out

    def __contains__(self, text_hash: str) -> bool:
        self._refresh()
        return text_hash in self._rows

    @property
    def dim(self) -> int:
        if self._shards:
            return int(next(iter(self._shards.values())).shape[1])
        return int(self._encoder().get_sentence_embedding_dimension())

    def _encoder(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.encoder_dir), device=self.device, local_files_only=True)
        return self._model

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._encoder().encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        self.encoded += len(texts)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _write_shard(self, hashes: list[str], vectors: np.ndarray) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # Time-ordered names so "first shard wins" means "oldest wins"; uuid for uniqueness.
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"
        for suffix, array in ((".hashes.npy", np.array(hashes, dtype=str)), (".vec.npy", vectors)):
            atomic_save_npy(self.dir / f"{name}{suffix}", array, durable=True)

    def _refresh(self) -> None:
        """Pick up shards written since the last call (by this or any other process)."""
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.vec.npy")):
            shard = path.name.removesuffix(".vec.npy")
            if shard in self._shards:
                continue
            hashes = np.load(self.dir / f"{shard}.hashes.npy", allow_pickle=False)
            self._shards[shard] = np.load(path, mmap_mode="r", allow_pickle=False)
            for row, h in enumerate(hashes.tolist()):
                self._rows.setdefault(h, (shard, row))


def encoder_key(encoder_dir: Path) -> str:
    """Identifies the encoder by content, not path: config files plus weight-file names and sizes."""
    digest = hashlib.sha256()
    for name in ("config.json", "modules.json", "sentence_bert_config.json"):
        path = encoder_dir / name
        if path.is_file():
            digest.update(path.read_bytes())
    weights = sorted(p for p in encoder_dir.rglob("*") if p.suffix in {".safetensors", ".bin"})
    digest.update(json.dumps([(p.name, p.stat().st_size) for p in weights]).encode())
    return f"{encoder_dir.name}-{digest.hexdigest()[:12]}"
