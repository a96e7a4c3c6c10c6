"""The scoring half of a round as plain steps over arrays, paths and frozen configs (no Django): the
prompt renderer, the candidates' shards and scoring through the score cache (two-stage when asked).
The round services (annotate/services/planning.py, scoring.py, selection.py) call these in this order:

    candidates → shards (shard_of) → score_items (cache, two-stage) → save_shard / load_shards

and selection goes on from the loaded scores in acquisition/ (batch.signals: label-mass filter,
uncertainty; then the round's strategy).

Everything random takes a generator derived from the round's seed (``step_rng``), so a replayed or
resumed step makes the same choices.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from scoring.files import atomic_save_npz
from scoring.prompts import PromptSpec

if TYPE_CHECKING:
    from scoring.cache import ScoreCache
    from scoring.engines import AdapterRef, Engine
    from scoring.prompts import PromptRenderer

# Items per engine call inside a shard: each chunk is put in the score cache as soon as it is done,
# so a worker killed mid-shard loses at most one chunk (a few seconds of CPU, well under one on GPU).
SCORE_CHUNK = 256


SHARD_ITEMS = 2000  # candidates per shard when n_shards is automatic: a minute or two of CPU, seconds of GPU
MAX_SHARDS = 64


def n_shards_for(n_candidates: int, configured: int) -> int:
    if configured > 0:
        return configured
    return max(1, min(MAX_SHARDS, -(-n_candidates // SHARD_ITEMS)))


def shard_of(item_ids: np.ndarray | Sequence[int], n_shards: int) -> np.ndarray:
    """Shard of each item: sha1 of its id modulo n_shards (stable across processes and Python runs)."""
    ids = np.asarray(item_ids, dtype=np.int64).tolist()  # Python ints: no numpy scalar per id
    sha1 = hashlib.sha1
    return np.fromiter(
        (int.from_bytes(sha1(str(i).encode()).digest()[:8], "big") % n_shards for i in ids),
        dtype=np.int64,
        count=len(ids),
    )


def shard_index(item_ids: np.ndarray, n_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Every shard's items at once: ``by_shard`` (the ids grouped by shard, in id order within one) and
    ``offsets`` [n_shards + 1], shard s being by_shard[offsets[s]:offsets[s + 1]]. One hash per item
    for the whole run, where filtering the run's list per shard hashes it n_shards times."""
    ids = np.asarray(item_ids, dtype=np.int64)
    shards = shard_of(ids, n_shards) if n_shards else np.zeros(0, np.int64)
    order = np.lexsort((ids, shards))
    offsets = np.concatenate([[0], np.cumsum(np.bincount(shards, minlength=n_shards))]).astype(np.int64)
    return ids[order], offsets


def write_shard_index(directory: Path, item_ids: np.ndarray, n_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """``shard_index`` saved as by_shard.npy + offsets.npy in ``directory`` (each written to a temporary
    name and renamed, so a reader sees a whole file or none; offsets last, so it marks completion)."""
    by_shard, offsets = shard_index(item_ids, n_shards)
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in (("by_shard", by_shard), ("offsets", offsets)):
        tmp = directory / f".{name}.{os.getpid()}.tmp.npy"
        np.save(tmp, array)
        os.replace(tmp, directory / f"{name}.npy")
    return by_shard, offsets


def read_shard(directory: Path, shard: int) -> np.ndarray:
    """One shard's ids from the saved index: two small reads, whatever the run's size."""
    offsets = np.load(directory / "offsets.npy")
    by_shard = np.load(directory / "by_shard.npy", mmap_mode="r")
    return np.array(by_shard[offsets[shard] : offsets[shard + 1]], dtype=np.int64)


def step_rng(seed: int, step: str) -> np.random.Generator:
    """The generator of one step of a round: independent streams per step, same choices on replay."""
    return np.random.default_rng([int(seed), zlib.crc32(step.encode())])


# -- prompts ----------------------------------------------------------------------------------------

_RENDERERS: dict[tuple[str, PromptSpec, int], PromptRenderer] = {}


def make_renderer(model_dir: str | Path, spec: PromptSpec, max_context: int) -> PromptRenderer:
    """One renderer per (model, prompt, context) per process: the prefix is tokenized once.
    ``max_context`` 0: fitted to the prompt, i.e. no item is cut short of the model's own window."""
    from transformers import AutoTokenizer

    from scoring.bundled import model_revision
    from scoring.prompts import PromptRenderer

    key = (str(model_dir), spec, max_context)
    if key not in _RENDERERS:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        _RENDERERS[key] = PromptRenderer(
            tokenizer,
            spec,
            model_revision=model_revision(model_dir),
            max_context=max_context or model_window(model_dir),
        )
    return _RENDERERS[key]


def model_window(model_dir: str | Path) -> int:
    """The model's context window (config.json's max_position_embeddings; 2048 when it says none). A
    prompt's tokens are only those it has: the window bounds what an item may take, it pads nothing."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)


# -- scoring ----------------------------------------------------------------------------------------


@dataclass
class Scored:
    """Scores of N items. ``full`` marks rows scored by all K adapters (the only rows selection
    uses); other rows only got the one-adapter first pass and hold NaN."""

    p: np.ndarray  # float32[K, N, C]
    mass: np.ndarray  # float32[K, N]
    full: np.ndarray  # bool[N]
    tokens: int = 0  # prompt tokens the engine ran (new scores only, all passes)
    scored: int = 0  # items sent to the engine (cache misses)
    seconds: float = 0.0


def _score_cached(
    engine: Engine,
    renderer: PromptRenderer,
    texts: Sequence[str],
    hashes: Sequence[str],
    adapters: Sequence[AdapterRef],
    cache: ScoreCache | None,
    progress: Callable[[int], None] | None,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """p, mass for every text under one adapter set: cache hits read, the other chunks scored and
    each cached at once. Returns (p, mass, tokens, items scored)."""
    from scoring.engines import adapter_set_hash

    set_hash = adapter_set_hash(adapters)
    k, c, n = max(1, len(adapters)), len(renderer.label_token_ids), len(texts)
    p = np.full((k, n, c), np.nan, dtype=np.float32)
    mass = np.full((k, n), np.nan, dtype=np.float32)
    hit = np.zeros(n, dtype=bool)
    if cache is not None and n:
        hit, cached_p, cached_mass = cache.get(list(hashes), renderer.prompt_hash, set_hash)
        if hit.any():
            p[:, hit], mass[:, hit] = cached_p[:, hit], cached_mass[:, hit]
    # Fixed chunks of the input, each scored whole unless all of it is cached: a run resumed after a
    # kill scores exactly the batches an uninterrupted run scores (CPU kernels round differently for
    # another batch shape, by ~1e-11, and a repeated text is cached under one position only).
    tokens = scored = 0
    for start in range(0, n, SCORE_CHUNK):
        rows = np.arange(start, min(n, start + SCORE_CHUNK))
        if hit[rows].all():
            continue
        result = engine.score(renderer, list(texts[start : start + SCORE_CHUNK]), adapters)
        p[:, rows], mass[:, rows] = result.p, result.mass
        tokens, scored = tokens + int(result.tokens), scored + len(rows)
        if cache is not None:
            cache.put(list(hashes[start : start + SCORE_CHUNK]), renderer.prompt_hash, set_hash, result.p, result.mass)
        if progress is not None:
            progress(len(rows))
    return p, mass, tokens, scored


def score_items(
    engine: Engine,
    renderer: PromptRenderer,
    texts: Sequence[str],
    hashes: Sequence[str],
    adapters: Sequence[AdapterRef],
    *,
    cache: ScoreCache | None = None,
    first_pass_share: float = 1.0,
    kind: Literal["margin", "entropy", "bald"] = "margin",
    rng: np.random.Generator | None = None,
    progress: Callable[[int], None] | None = None,
) -> Scored:
    """Score ``texts`` with the ensemble. Two-stage when ``first_pass_share < 1`` and K ≥ 2: all
    texts with adapter 0, then all K on the most uncertain share. The second stage is chosen over
    the whole input (never over the cache misses), so a resumed run picks the same rows."""
    from scoring.rescoring import first_pass_kind, second_stage
    from scoring.uncertainty import uncertainty

    started = time.perf_counter()
    n = len(texts)
    if first_pass_share >= 1.0 or len(adapters) < 2:
        p, mass, tokens, scored = _score_cached(engine, renderer, texts, hashes, adapters, cache, progress)
        return Scored(p, mass, np.ones(n, bool), tokens, scored, time.perf_counter() - started)
    p1, m1, tokens1, scored1 = _score_cached(engine, renderer, texts, hashes, adapters[:1], cache, None)
    gen = rng if rng is not None else np.random.default_rng(0)
    rows = second_stage(uncertainty(first_pass_kind(kind), p1, m1), first_pass_share, gen)
    sub_p, sub_m, tokens2, scored2 = _score_cached(
        engine, renderer, [texts[i] for i in rows], [hashes[i] for i in rows], adapters, cache, progress
    )
    k, c = len(adapters), len(renderer.label_token_ids)
    p = np.full((k, n, c), np.nan, dtype=np.float32)
    mass = np.full((k, n), np.nan, dtype=np.float32)
    p[:, rows], mass[:, rows] = sub_p, sub_m
    full = np.zeros(n, bool)
    full[rows] = True
    return Scored(p, mass, full, tokens1 + tokens2, max(scored1, scored2), time.perf_counter() - started)


def save_shard(path: Path, item_ids: np.ndarray, scored: Scored) -> None:
    """Write a shard's scores to ``path`` via a temp file and one rename (a reader never sees half)."""
    atomic_save_npz(path, ids=np.asarray(item_ids, np.int64), p=scored.p, mass=scored.mass, full=scored.full)


def load_shards(paths: Sequence[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, p[K, N, C], mass[K, N], full[N]) of several shards, sorted by item id."""
    parts = []
    for path in paths:
        with np.load(path, allow_pickle=False) as data:
            parts.append((data["ids"], data["p"], data["mass"], data["full"]))
    parts = [part for part in parts if len(part[0])]
    if not parts:
        return np.zeros(0, np.int64), np.zeros((0, 0, 0), np.float32), np.zeros((0, 0), np.float32), np.zeros(0, bool)
    ids = np.concatenate([part[0] for part in parts])
    order = np.argsort(ids, kind="stable")
    p = np.concatenate([part[1] for part in parts], axis=1)[:, order]
    mass = np.concatenate([part[2] for part in parts], axis=1)[:, order]
    full = np.concatenate([part[3] for part in parts])[order]
    return ids[order], p, mass, full
