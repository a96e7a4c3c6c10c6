"""The engine interface: K adapters × N items → label distributions p[K, N, C] and label mass."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from scoring.engines.start_lock import start_lock

if TYPE_CHECKING:
    from scoring.prompts import PromptRenderer

EngineKind = Literal["hf", "vllm"]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdapterRef:
    """One adapter version. vLLM keys its prefix cache by name/id, not weights: every retrained
    version needs a new name and a new integer id (> 0)."""

    name: str
    int_id: int
    path: str


@dataclass(frozen=True)
class ScoreResult:
    p: np.ndarray  # float32[K, N, C], renormalised over the labels
    mass: np.ndarray  # float32[K, N], total probability of the label tokens under the full vocabulary
    truncated: np.ndarray  # bool[N]
    tokens: int  # prompt tokens of the N items (prefix + suffix each), counted once, not per adapter
    computed_tokens: int = 0  # tokens the engine actually ran through the model (all adapters), when known


class Engine(Protocol):
    def score(self, renderer: PromptRenderer, texts: Sequence[str], adapters: Sequence[AdapterRef]) -> ScoreResult:
        """Score any subset of items (shard-friendly: no state depends on the rest of the pool).
        An empty adapter list scores the base model (K=1)."""
        ...


def adapter_set_hash(adapters: Sequence[AdapterRef]) -> str:
    """Identifies the ordered adapter set (the K axis of the scores); "base" for the base model."""
    if not adapters:
        return "base"
    payload = json.dumps([[a.name, a.int_id, a.path] for a in adapters])
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def distribution_from_logprobs(label_logprobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Full-vocabulary label log-probabilities [..., C] → (p renormalised over labels, mass).

    mass = Σ_c exp(logp_c); p_c = exp(logp_c) / mass. Computed with a max shift so that labels of
    very low mass still give a finite, normalised p."""
    logp = np.asarray(label_logprobs, dtype=np.float64)
    top = np.max(logp, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = np.exp(logp - top)
    total = shifted.sum(axis=-1, keepdims=True)
    p = np.divide(shifted, total, out=np.full_like(shifted, 1.0 / logp.shape[-1]), where=total > 0)
    mass = (total * np.exp(top))[..., 0]
    return p.astype(np.float32), mass.astype(np.float32)


def validate_adapters(adapters: Sequence[AdapterRef]) -> None:
    names = [a.name for a in adapters]
    ids = [a.int_id for a in adapters]
    if len(set(names)) != len(names) or len(set(ids)) != len(ids):
        raise ValueError(f"adapter names and ids must be unique within a set: {list(zip(names, ids, strict=True))}")
    if any(i <= 0 for i in ids):
        raise ValueError("adapter int_id must be > 0 (vLLM reserves 0)")


_ENGINES: dict[tuple[str, str, str], Engine] = {}


def engine_option_names(kind: str) -> frozenset[str]:
    """The keyword options an engine kind's constructor takes (what ``engine_options`` may hold)."""
    import inspect

    if kind == "hf":
        from scoring.engines.hf import HFEngine as cls
    elif kind == "vllm":
        from scoring.engines.vllm import VLLMEngine as cls  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown engine kind {kind!r} (hf or vllm)")
    params = inspect.signature(cls.__init__).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def get_engine(kind: EngineKind, model_dir: str, **options: Any) -> Engine:
    """One engine per (kind, model, options) per process: a gpu worker holds it for its lifetime."""
    key = (kind, str(model_dir), json.dumps(options, sort_keys=True, default=str))
    if key not in _ENGINES:
        if kind == "hf":
            from scoring.engines.hf import HFEngine

            began = time.monotonic()
            _ENGINES[key] = HFEngine(str(model_dir), **options)
            log.info("hf engine started in %.1f s (%s)", time.monotonic() - began, model_dir)
        elif kind == "vllm":
            from scoring.engines.vllm import VLLMEngine

            asked = time.monotonic()
            with start_lock("vllm"):  # one start per GPU at a time, across containers (start_lock.py)
                began = time.monotonic()
                _ENGINES[key] = VLLMEngine(str(model_dir), **options)
            # the start-up figure of a gpu worker (bench/RESULTS.md): the lock's wait and the start itself
            log.info(
                "vllm engine started in %.1f s (%.1f s waiting for the GPU's start lock; in-process core: %s)",
                time.monotonic() - began,
                began - asked,
                getattr(_ENGINES[key], "in_process", None),
            )
        else:
            raise ValueError(f"unknown engine kind {kind!r} (hf or vllm)")
    return _ENGINES[key]
