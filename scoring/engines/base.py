"""The engine interface: K adapters × N items → label distributions p[K, N, C] and label mass."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from scoring.prompts import PromptRenderer

EngineKind = Literal["hf", "vllm"]


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
