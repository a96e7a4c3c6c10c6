"""Scoring engines: one interface (base), two implementations (hf, vllm) that the registry imports lazily."""

from __future__ import annotations

from scoring.engines.base import AdapterRef, Engine, ScoreResult, adapter_set_hash
from scoring.engines.registry import engine_option_names, get_engine

__all__ = ["AdapterRef", "Engine", "ScoreResult", "adapter_set_hash", "engine_option_names", "get_engine"]
