"""Scoring engines: one interface (base), two implementations (hf, vllm) imported lazily."""

from __future__ import annotations

from scoring.engines.base import AdapterRef, Engine, ScoreResult, adapter_set_hash, get_engine

__all__ = ["AdapterRef", "Engine", "ScoreResult", "adapter_set_hash", "get_engine"]
