"""Which class implements each engine kind, and the one engine per (kind, model, options) a process holds.

Kept out of base.py so that the dependency points one way: hf.py and vllm.py import base for the
interface, and this module imports them (inside functions, so importing ``scoring.engines`` loads
neither implementation)."""

from __future__ import annotations

import gc
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from scoring.engines.base import Engine, EngineKind
from scoring.engines.start_lock import start_lock

log = logging.getLogger(__name__)
_ENGINES: dict[tuple[str, str, str], Engine] = {}
# vLLM's start measures the GPU's free memory around its profiling run and asserts that it did not grow:
# any other process on the GPU that frees memory in those seconds (a training step, an hf engine, another
# worker's engine) fails the start although nothing is wrong. Seen on the H200 (session 18) with four gpu
# workers and three simulations on one GPU: two of four engine starts failed so, and the round with them.
# It is transient, so the start is tried again (still holding the start lock) a few times. It can also last: in
# session 24 (H100, 403eb4c) one worker's start failed seven times in a row beside three simulations and the other
# workers' training (a round waited 82 s). So a retry starts, where it can, with a fixed KV cache
# (vLLM's kv_cache_memory_bytes), which skips that profiling (``fallback``).
VLLM_TRANSIENT_START = "Error in memory profiling"
VLLM_START_ATTEMPTS = 4
VLLM_START_PAUSE_S = 5.0  # × the attempt number: lets the other process's step end


def start_with_retries(
    make: Callable[[], Engine],
    *,
    attempts: int = VLLM_START_ATTEMPTS,
    pause_s: float = VLLM_START_PAUSE_S,
    fallback: Callable[[], Engine] | None = None,
) -> Engine:
    """``make()``, again after vLLM's transient memory-profiling assertion (with ``fallback()`` from the second
    attempt on, where given: a start that does not profile); any other error at once."""
    for attempt in range(1, attempts + 1):
        try:
            return (make if attempt == 1 or fallback is None else fallback)()
        except AssertionError as exc:
            if VLLM_TRANSIENT_START not in str(exc) or attempt == attempts:
                raise
            log.warning("vllm engine start %d/%d failed (%s); trying again", attempt, attempts, str(exc)[:200])
            gc.collect()  # what the failed start allocated, before the next one profiles
            time.sleep(pause_s * attempt)
    raise AssertionError("unreachable")


def _fixed_kv_start(cls: type, model_dir: str, options: dict[str, Any]) -> Callable[[], Engine] | None:
    """The vLLM start with a fixed KV cache sized to the worker's GPU share (``fixed_kv_cache_bytes``), unless
    the options fix one already."""
    if "kv_cache_memory_bytes" in options:
        return None

    def start() -> Engine:
        from scoring.engines.vllm import DEFAULT_GPU_SHARE, fixed_kv_cache_bytes, gpu_total_bytes, model_weight_bytes

        share = float(options.get("gpu_memory_utilization", DEFAULT_GPU_SHARE))
        kv = fixed_kv_cache_bytes(gpu_total_bytes(), share, model_weight_bytes(model_dir))
        if kv is None:  # the share leaves no room once the weights are counted: profile again
            return cls(model_dir, **options)  # type: ignore[no-any-return]
        log.warning("vllm engine start with a fixed KV cache of %.2f GiB (no memory profiling)", kv / 2**30)
        return cls(model_dir, **options, kv_cache_memory_bytes=kv)  # type: ignore[no-any-return]

    return start


def _engine_class(kind: str) -> type:
    if kind == "hf":
        from scoring.engines.hf import HFEngine

        return HFEngine
    if kind == "vllm":
        from scoring.engines.vllm import VLLMEngine

        return VLLMEngine
    raise ValueError(f"unknown engine kind {kind!r} (hf or vllm)")


def engine_option_names(kind: str) -> frozenset[str]:
    """The keyword options an engine kind's constructor takes (what ``engine_options`` may hold)."""
    params = inspect.signature(_engine_class(kind)).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def get_engine(kind: EngineKind, model_dir: str, **options: Any) -> Engine:
    """One engine per (kind, model, options) per process: a gpu worker holds it for its lifetime."""
    key = (kind, str(model_dir), json.dumps(options, sort_keys=True, default=str))
    if key not in _ENGINES:
        cls = _engine_class(kind)
        if kind == "hf":
            began = time.monotonic()
            _ENGINES[key] = cls(str(model_dir), **options)
            log.info("hf engine started in %.1f s (%s)", time.monotonic() - began, model_dir)
        else:
            preload = getattr(cls, "preload", None)
            # outside the lock: no GPU memory; batch invariance is read when vLLM is imported
            imported = (
                preload(
                    batch_invariant=bool(options.get("batch_invariant")),
                    engine_core_process=bool(options.get("engine_core_process")),
                )
                if preload is not None
                else 0.0
            )
            asked = time.monotonic()
            fixed = _fixed_kv_start(cls, str(model_dir), options)
            # one start per GPU at a time, across containers (start_lock.py); with parallel_start, only the first
            # of this configuration on the GPU: the later ones start side by side, with a fixed KV cache
            config = hashlib.sha1(key[1].encode() + key[2].encode()).hexdigest()[:12]
            with start_lock("vllm", after_first=bool(options.get("parallel_start")), config=config) as turn:
                began = time.monotonic()
                first = (lambda: cls(str(model_dir), **options)) if turn or fixed is None else fixed
                _ENGINES[key] = start_with_retries(first, fallback=fixed)
            # the start-up figure of a gpu worker (bench/RESULTS.md): the lock's wait and the start itself
            log.info(
                "vllm engine started in %.1f s (%.1f s waiting for the GPU's start lock; in-process core: %s;"
                " %.1f s importing vLLM before the lock; %s)",
                time.monotonic() - began,
                began - asked,
                getattr(_ENGINES[key], "in_process", None),
                imported,
                "its turn" if turn else "no turn: started side by side, fixed KV cache",
            )
    return _ENGINES[key]
