"""vLLM engine: offline ``LLM`` with multi-LoRA and automatic prefix caching.

Prompts are pre-tokenized (prefix ids + batch-tokenized suffix ids) so the main process never
tokenizes per request; one ``generate`` call scores all K adapters (N × K requests, each with its
LoRARequest), asking for one token with ``logprob_token_ids`` = the label token ids: vLLM returns
their log-probabilities under the full vocabulary, which gives both the label distribution and the
label mass. vLLM is imported inside functions only; the pure helpers below (request building, output
conversion, metrics) are unit-tested with fake objects shaped like vLLM's.

vLLM reports at most ``VLLM_MAX_LABELS`` (128) requested logprobs per request; a larger label set
(CLINC150's 151 intents) is asked for in chunks of label ids, one request per chunk for the same
prompt and adapter. The values are full-vocabulary log-probabilities, so the chunks' columns join
exactly, and the repeated prompt is a prefix-cache hit but for its last partial block. A host-bound
engine (~1 ms of host time per CLINC150 request) pays for every chunk, so the engine option
``label_logprob_width`` raises vLLM's cap instead (``widen_logprob_token_ids``: one request per item
and adapter up to that many labels), checked against the chunked scores on the first call.

In a standalone script, vLLM must start before the process does torch CPU work, with
VLLM_WORKER_MULTIPROC_METHOD=spawn and the caller's work under ``if __name__ == "__main__":``
(see ../shared/device/README.md: otherwise engine start hangs). In a Celery prefork child (a daemonic
process, which multiprocessing forbids to have children) the engine core runs in-process instead.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scoring.engines.base import AdapterRef, ScoreResult, distribution_from_logprobs, validate_adapters
from scoring.labels import MAX_LABELS, VLLM_MAX_LABELS

if TYPE_CHECKING:
    from scoring.prompts import PromptRenderer

logger = logging.getLogger(__name__)

# vLLM's CUDAGraphMode names (vllm.config.compilation): the engine option takes the name, checked here so that a
# misspelt one fails before vLLM is imported.
CUDAGRAPH_MODES = frozenset({"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})
LORA_DTYPES = ("bfloat16", "float16")  # what vLLM's LoRA kernels (lora_expand / lora_shrink) accept
# vLLM's prefix-cache block hash (CacheConfig.prefix_caching_hash_algo; "xxhash*" need the xxhash package) and
# KV block sizes its attention backends take: every full block of every request's prompt is hashed and looked up,
# so a ~1,000-token CLINC150 prompt costs 62 block hashes per request at vLLM's default 16 tokens a block.
PREFIX_HASH_ALGOS = frozenset({"sha256", "sha256_cbor", "xxhash", "xxhash_cbor"})
BLOCK_SIZES = (16, 32, 64, 128)
WARMUP_TEXT = "."  # the item of the one request per adapter that puts the shared prefix in the cache (score())
WIDE_CHECK_ITEMS = 16  # items scored both ways (one wide request, label chunks) on an engine's first wide call
# The two ways batch differently (K×N requests against 2×K×N), and bfloat16 scores move with the batch: session 26
# measured max |Δp| 0.038 between two batchings of the same items (no batch-invariant kernels), and session 31's
# first check at 1e-3 failed on every worker with max |Δp| 0.013-0.049. So the check asks what engine parity asks
# (bench/engine_parity.py's bounds, mean over (adapter, item) of the largest |Δp| of an item's labels; label mass
# alike) and bounds the largest: what a sampler that read the wrong ids would break by far more.
WIDE_CHECK_MAX_MEAN_DP = 0.01
WIDE_CHECK_MAX_DP = 0.1


def widen_logprob_token_ids(width: int, modules: Sequence[Any] | None = None) -> int:
    """Raise vLLM's cap on ``logprob_token_ids`` per request (0.26: ``MAX_LOGPROB_TOKEN_IDS`` = 128) to
    ``width``, so that a label set of up to ``width`` labels is one request per item and adapter instead of
    one per 128-label chunk. In vLLM 0.26 the cap is a module constant that only sizes the sampler's row of
    requested ids per request slot ([max_num_reqs, cap] int32, vllm/v1/worker/gpu/sample/logprob.py) and is
    checked twice (there and in SamplingParams); the fill kernel pads to the next power of two of the longest
    request. Both modules bind it by name, so both are set, before the engine allocates that row (its
    start); an engine core in another process would import vLLM afresh, so the core must be in this one.
    ``modules``: the modules to set (tests); default vLLM's two. Returns the cap in force."""
    if modules is None:
        import vllm.sampling_params as params_module

        found: list[Any] = [params_module]
        try:
            from vllm.v1.worker.gpu.sample import logprob as sampler_logprob
        except ImportError:  # a vLLM without the V2 model runner: SamplingParams' check is the only one
            pass
        else:
            found.append(sampler_logprob)
        modules = found
    for module in modules:
        current = getattr(module, "MAX_LOGPROB_TOKEN_IDS", None)
        if not isinstance(current, int):
            raise RuntimeError(
                f"engine option label_logprob_width: {getattr(module, '__name__', module)} has no "
                "MAX_LOGPROB_TOKEN_IDS (a vLLM other than 0.26?): leave the option out"
            )
        module.MAX_LOGPROB_TOKEN_IDS = max(current, int(width))
    return min(int(m.MAX_LOGPROB_TOKEN_IDS) for m in modules)


def wide_check(wide: ScoreResult, chunked: ScoreResult) -> tuple[bool, dict[str, float]]:
    """Whether the wide requests' scores match the chunked ones within bfloat16's batching noise: mean over
    (adapter, item) of the largest |Δp| of an item's labels ≤ WIDE_CHECK_MAX_MEAN_DP, the same for the label mass,
    and no item's |Δp| above WIDE_CHECK_MAX_DP; and those figures (with the argmax agreement) for the log."""
    if wide.p.shape != chunked.p.shape or wide.mass.shape != chunked.mass.shape:
        return False, {"mean_dp": float("inf"), "max_dp": float("inf"), "mean_dmass": float("inf"), "agreement": 0.0}
    if wide.p.size == 0:
        return True, {"mean_dp": 0.0, "max_dp": 0.0, "mean_dmass": 0.0, "agreement": 1.0}
    dp = np.nanmax(np.abs(wide.p - chunked.p), axis=-1)
    figures = {
        "mean_dp": float(np.nanmean(dp)),
        "max_dp": float(np.nanmax(dp)),
        "mean_dmass": float(np.nanmean(np.abs(wide.mass - chunked.mass))),
        "agreement": float((wide.p.argmax(-1) == chunked.p.argmax(-1)).mean()),
    }
    ok = (
        figures["mean_dp"] <= WIDE_CHECK_MAX_MEAN_DP
        and figures["mean_dmass"] <= WIDE_CHECK_MAX_MEAN_DP
        and figures["max_dp"] <= WIDE_CHECK_MAX_DP
    )
    return ok, figures


def _compilation_config(capture_sizes: Sequence[int] | None, mode: str | None) -> dict[str, Any]:
    """vLLM's compilation_config for the CUDA-graph options given; nothing (vLLM's defaults) without them."""
    config: dict[str, Any] = {}
    if capture_sizes:
        config["cudagraph_capture_sizes"] = sorted(int(n) for n in capture_sizes)
    if mode is not None:
        config["cudagraph_mode"] = mode
    return {"compilation_config": config} if config else {}


# A fixed KV cache (vLLM's kv_cache_memory_bytes) skips vLLM's memory profiling; what else the engine holds is
# then estimated, not measured: the weights twice (their copy plus LoRA and workspace buffers) and 2 GiB for the
# activations of a 64k-token step and the CUDA graphs (SmolLM2-135M measured 0.31 + 0.77 + 0.09 GiB on an H100).
DEFAULT_GPU_SHARE = 0.5  # gpu_memory_utilization unless a worker's engine options say otherwise
FIXED_KV_HEADROOM_BYTES = 2 * 2**30
FIXED_KV_MIN_BYTES = 2**30


def fixed_kv_cache_bytes(total_bytes: int, share: float, weight_bytes: int) -> int | None:
    """The KV cache that keeps an engine inside ``share`` of a GPU of ``total_bytes`` without profiling, or None
    where that leaves less than 1 GiB."""
    kv = int(total_bytes * share) - 2 * weight_bytes - FIXED_KV_HEADROOM_BYTES
    return kv if kv >= FIXED_KV_MIN_BYTES else None


def model_weight_bytes(model_dir: str) -> int:
    """The size of a model directory's weight files (safetensors, else PyTorch .bin)."""
    from pathlib import Path

    files = list(Path(model_dir).glob("*.safetensors")) or list(Path(model_dir).glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def gpu_total_bytes() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)


def label_chunks(label_ids: Sequence[int], size: int) -> list[list[int]]:
    """The label ids in request-sized chunks (vLLM reports at most ``size`` requested logprobs)."""
    if size < 1:
        raise ValueError(f"a chunk holds at least one label id, not {size}")
    ids = [int(t) for t in label_ids]
    return [ids[i : i + size] for i in range(0, len(ids), size)] or [[]]


def chunked_label_logprobs(outputs: Sequence[Any], chunks: Sequence[Sequence[int]], n_items: int) -> np.ndarray:
    """Outputs of chunk-major requests (all of chunk 0's, adapter-major, then chunk 1's, ...) →
    float32[K, N, C] with the chunks' label columns side by side, in label order."""
    if len(outputs) % len(chunks):
        raise ValueError(f"{len(outputs)} outputs do not split into {len(chunks)} label chunks")
    per_chunk = len(outputs) // len(chunks)
    parts = [
        outputs_to_label_logprobs(outputs[c * per_chunk : (c + 1) * per_chunk], chunk, n_items)
        for c, chunk in enumerate(chunks)
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


@contextlib.contextmanager
def real_std_streams() -> Iterator[None]:
    """vLLM reads ``sys.stdout.fileno()`` (suppress_stdout, while it sets up its process group); in a
    Celery worker sys.stdout is a LoggingProxy without one. The process's real streams (a worker's
    log) stand in while vLLM runs."""
    saved = sys.stdout, sys.stderr
    try:
        sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def engine_core_in_process(core_process: bool = False) -> bool:
    """Run vLLM's engine core in this process when this process may not start children: a Celery
    prefork pool child is daemonic, and vLLM's default engine-core process would fail there with
    "daemonic processes are not allowed to have children". ``core_process`` (the engine option
    ``engine_core_process``): the core in a process of its own anyway (``children_allowed`` lets the
    daemonic child start it, ``reap_with_me`` ends it with the child), so vLLM's scheduling and the GPU's
    steps overlap this process's request building and output conversion. VLLM_ENABLE_V1_MULTIPROCESSING
    set by the deployment wins either way. Returns whether the core runs in-process."""
    if core_process and "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    if "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ and multiprocessing.current_process().daemon:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        logger.info("vLLM engine core in-process: %s is daemonic", multiprocessing.current_process().name)
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"


@contextlib.contextmanager
def children_allowed() -> Iterator[None]:
    """Let a daemonic process (a Celery prefork child) start children for the block: multiprocessing refuses
    ("daemonic processes are not allowed to have children") because a daemon's children would outlive it
    unmanaged, so whoever uses this ends them with the process (``reap_with_me``)."""
    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    was = config.get("daemon")
    config["daemon"] = False
    try:
        yield
    finally:
        if was is not None:
            config["daemon"] = was


REAPER = """import os, signal, sys, time
parent, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(0.5)
for pid in pids:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def child_pids(pid: int) -> list[int]:
    """The live children of process ``pid`` (Linux /proc)."""
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return sorted(out)


def reap_with_me(pids: Sequence[int]) -> Any:
    """A reaper process that SIGKILLs ``pids`` once this process is gone, however it went (vLLM's engine core
    does not watch its parent: a SIGKILLed gpu worker would leave it holding its GPU memory). Returns the
    reaper's Popen; nothing when there is nothing to reap."""
    import subprocess

    if not pids:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", REAPER, str(os.getpid()), *(str(p) for p in pids)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def batch_invariant_env() -> bool:
    """Whether this process's environment asks vLLM for batch-invariant kernels (VLLM_BATCH_INVARIANT)."""
    return os.environ.get("VLLM_BATCH_INVARIANT", "0") not in ("", "0")


def vllm_imported_variant() -> bool:
    """Whether vLLM was imported in this process without batch-invariant kernels (too late to ask)."""
    return "vllm" in sys.modules and not batch_invariant_env()


def batch_invariance(on: bool) -> bool:
    """Ask vLLM for batch-invariant kernels (VLLM_BATCH_INVARIANT, read when vLLM is imported: its LoRA kernels
    keep the value they find then) or leave it as the deployment set it. Batch invariance makes an item's scores
    the same whatever it is batched with: without it, a shard re-run after a worker was killed is batched
    differently and its bfloat16 scores move a little (session 23: argmax 99.98 % equal, max |dp| 0.0865).
    A process holds one vLLM, so asking for it after vLLM was imported without it is refused, naming the fix.
    Returns whether this process's vLLM is (or will be) batch-invariant."""
    current = batch_invariant_env()
    if on and not current:
        if vllm_imported_variant():
            raise ValueError(
                "engine option batch_invariant: vLLM was imported in this process without VLLM_BATCH_INVARIANT=1;"
                " give the gpu worker's own loop options batch_invariant (or its environment VLLM_BATCH_INVARIANT=1)"
                " so that it is set before vLLM is imported"
            )
        os.environ["VLLM_BATCH_INVARIANT"] = "1"
        logger.info("vLLM batch-invariant kernels on (VLLM_BATCH_INVARIANT=1)")
        return True
    return current


def build_requests(
    prefix_ids: Sequence[int],
    suffix_ids: Sequence[Sequence[int]],
    adapters: Sequence[AdapterRef],
    make_lora: Callable[[str, int, str], Any] | None,
) -> tuple[list[dict[str, list[int]]], list[Any] | None]:
    """TokensPrompt dicts (adapter-major: request k·N + i is item i under adapter k) and the matching
    list of LoRA requests (None for the base model). One LoRA request object per adapter, shared by
    its N prompts; the token id lists are shared across adapters (vLLM only reads them)."""
    prefix = list(prefix_ids)
    full = [prefix + list(s) for s in suffix_ids]
    if not adapters:
        return [{"prompt_token_ids": ids} for ids in full], None
    if make_lora is None:
        raise ValueError("make_lora is required when adapters are given")
    loras = [make_lora(a.name, a.int_id, a.path) for a in adapters]
    prompts = [{"prompt_token_ids": ids} for _ in adapters for ids in full]
    return prompts, [lora for lora in loras for _ in full]


def _position_zero(logprobs: Any) -> Iterable[tuple[int, float]]:
    """(token id, logprob) pairs of the first generated position, from FlatLogprobs (flat_logprobs=True:
    parallel token_ids/logprobs lists with start/end indices per position) or list[dict[int, Logprob]]."""
    starts = getattr(logprobs, "start_indices", None)
    ends = getattr(logprobs, "end_indices", None)
    token_ids = getattr(logprobs, "token_ids", None)
    values = getattr(logprobs, "logprobs", None)
    if starts is not None and ends is not None and token_ids is not None and values is not None:
        s, e = int(starts[0]), int(ends[0])
        return zip((int(t) for t in token_ids[s:e]), (float(v) for v in values[s:e]), strict=True)
    first = logprobs[0]
    return ((int(t), float(getattr(lp, "logprob", lp))) for t, lp in first.items())


def outputs_to_label_logprobs(outputs: Sequence[Any], label_ids: Sequence[int], n_items: int) -> np.ndarray:
    """RequestOutputs (in request order, adapter-major) → float32[K, N, C] label log-probs.

    The sampled token is reported too (it may or may not be a label); only label ids are kept.
    A label vLLM did not report would be a bug in the request, so it raises instead of guessing."""
    if n_items == 0 or len(outputs) % n_items:
        raise ValueError(f"{len(outputs)} outputs do not split into adapters of {n_items} items")
    column = {tid: c for c, tid in enumerate(label_ids)}
    flat = np.full((len(outputs), len(label_ids)), np.nan, dtype=np.float32)
    for r, output in enumerate(outputs):
        row = flat[r]
        for tid, value in _position_zero(output.outputs[0].logprobs):
            c = column.get(tid)
            if c is not None:
                row[c] = value
    if np.isnan(flat).any():
        missing = int(np.isnan(flat).any(axis=1).sum())
        raise RuntimeError(f"vLLM returned no logprob for some label tokens in {missing} requests")
    return flat.reshape(len(outputs) // n_items, n_items, len(label_ids))


def prefix_cache_counts(metrics: Iterable[Any]) -> tuple[float, float]:
    """(queried tokens, hit tokens) of the GPU prefix cache from ``llm.get_metrics()`` (needs
    disable_log_stats=False). Hit rate = hits / queries over a window: subtract two snapshots."""
    queries = hits = 0.0
    for metric in metrics:
        name = str(getattr(metric, "name", ""))
        value = getattr(metric, "value", None)
        if not isinstance(value, int | float) or "external" in name or "connector" in name:
            continue
        short = name.split(":")[-1].removesuffix("_total").removeprefix("gpu_")
        if short == "prefix_cache_queries":
            queries += float(value)
        elif short == "prefix_cache_hits":
            hits += float(value)
    return queries, hits


class VLLMEngine:
    label_width: int = VLLM_MAX_LABELS  # the most label ids one request asks for (label_logprob_width)
    wide_checked: bool | None = True  # None: a wide engine's first call checks it; False: it failed, chunks

    @staticmethod
    def preload(*, batch_invariant: bool = False, engine_core_process: bool = False) -> float:
        """Import vLLM (seconds it took): no GPU memory, so the caller does it before taking the GPU's
        start lock. Session 19: 21.6 s of a 57.5 s warm engine start was this import, under the lock, so
        each of four engines starting in turn held the lock ~20 s longer than its start needed."""
        began = time.monotonic()
        engine_core_in_process(engine_core_process)  # before vLLM reads its environment
        batch_invariance(batch_invariant)
        import vllm  # noqa: F401

        return time.monotonic() - began

    def __init__(
        self,
        model_dir: str,
        *,
        enable_lora: bool = True,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        max_num_seqs: int = 1024,
        max_num_batched_tokens: int = 65_536,
        gpu_memory_utilization: float = DEFAULT_GPU_SHARE,
        max_model_len: int = 2304,
        dtype: str = "bfloat16",
        enforce_eager: bool = False,
        disable_log_stats: bool = True,
        seed: int = 0,
        cudagraph_capture_sizes: Sequence[int] | None = None,
        cudagraph_mode: str | None = None,
        kv_cache_memory_bytes: int | None = None,
        batch_invariant: bool = False,
        block_size: int | None = None,
        prefix_caching_hash_algo: str | None = None,
        engine_core_process: bool = False,
        parallel_start: bool = False,
        label_logprob_width: int | None = None,
    ) -> None:
        # parallel_start is read by scoring.engines.registry (the start lock's after_first): after this GPU's first
        # engine of the same configuration, later ones start side by side with a fixed KV cache; nothing here
        self.parallel_start = parallel_start
        if enable_lora and dtype not in LORA_DTYPES:
            raise ValueError(
                f"dtype {dtype!r} cannot score LoRA adapters in vLLM: its LoRA kernels take {' or '.join(LORA_DTYPES)} "
                "weights only (vLLM 0.26 asserts it at engine start; measured on the GPU, bench/RESULTS.md session 26)"
            )
        if block_size is not None and block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {list(BLOCK_SIZES)}, got {block_size!r}")
        if prefix_caching_hash_algo is not None and prefix_caching_hash_algo not in PREFIX_HASH_ALGOS:
            raise ValueError(
                f"prefix_caching_hash_algo must be one of {sorted(PREFIX_HASH_ALGOS)}, got {prefix_caching_hash_algo!r}"
            )
        if cudagraph_mode is not None and cudagraph_mode not in CUDAGRAPH_MODES:
            raise ValueError(f"cudagraph_mode must be one of {sorted(CUDAGRAPH_MODES)}, got {cudagraph_mode!r}")
        wide = label_logprob_width is not None and label_logprob_width > VLLM_MAX_LABELS
        if label_logprob_width is not None and not 1 <= label_logprob_width <= MAX_LABELS:
            raise ValueError(f"label_logprob_width must be within [1, {MAX_LABELS}], got {label_logprob_width!r}")
        if wide and not engine_core_process and "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # widen_logprob_token_ids: the core in this process
        self.in_process = engine_core_in_process(engine_core_process)  # before vLLM reads its environment
        if wide and not self.in_process:
            raise ValueError(
                "engine option label_logprob_width above 128 needs vLLM's engine core in the worker's process"
                " (engine_core_process false, VLLM_ENABLE_V1_MULTIPROCESSING unset or 0)"
            )
        # the most label ids one request asks for; a wide engine is checked against label chunks on its first call
        self.label_width = widen_logprob_token_ids(int(label_logprob_width or 0)) if wide else VLLM_MAX_LABELS
        self.wide_checked: bool | None = None if wide else True
        self.reaper: Any = None
        # scores that do not depend on how items are batched (a re-run shard equals the first run), at some speed
        self.batch_invariant = batch_invariance(batch_invariant)
        self.enable_lora = enable_lora
        self.max_model_len = max_model_len
        self.llm = self._start(
            model_dir,
            dtype=dtype,  # the checkpoint is bf16 (dequantized GGUF); fp32 would halve throughput for nothing
            seed=seed,
            # > the renderer's max_context (2048 by default; longer items are truncated before us), leaving
            # room for the one generated token; it only caps per-sequence length, not memory.
            max_model_len=max_model_len,
            enable_prefix_caching=True,  # the ~800-token instruction + few-shot prefix is shared by every request
            enable_lora=enable_lora,
            # LoRA adapters are rank 8 (training default); 16 leaves headroom without padding the kernels much.
            max_lora_rank=max_lora_rank,
            # The whole ensemble (K=4) resident at once, so one generate call mixes all adapters in a batch.
            max_loras=max_loras,
            # Scoring is prefill-only (max_tokens=1): many short-lived sequences per step keep the GPU fed;
            # at 1024 the scheduler, not the GPU, was the limit in the device measurements.
            max_num_seqs=max_num_seqs,
            # Per-step token budget: with ~90% prefix hits a step holds ~1024 × ~100 new tokens; 64k fits
            # that and keeps a cold-cache step (full 900-token prompts) from stalling.
            max_num_batched_tokens=max_num_batched_tokens,
            # Half the GPU: a 135M model needs little, and the rest stays free for training/HF parity runs.
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,  # True skips torch.compile + CUDA graphs (faster start, slower steps)
            disable_log_stats=disable_log_stats,  # False is required for get_metrics() (prefix-cache hit rate)
            # None: vLLM's own list of batch sizes to capture CUDA graphs for. Capturing took 18 s of a 57.5 s
            # warm start in session 19 and 37 s of 70.8 s in session 22 (51 sizes x FULL and PIECEWISE x with
            # and without LoRA = 204 graphs); a short list (e.g. [1, 8, 64, 512]) starts faster, each step padded
            # to the next captured size; a step larger than the largest runs without a graph.
            # cudagraph_mode: scoring never decodes (max_tokens=1: every step is a prefill), so vLLM's FULL
            # graphs (used for uniform decode batches) are never replayed: "PIECEWISE" halves the capture,
            # "NONE" skips it (the torch.compile'd code still runs). Measured in session 23 (H100, 8364886):
            # PIECEWISE with [1, 8, 64, 512] captured in 1-2 s and the warm engine start fell from 72.7-80.8 s to
            # 27.0-34.0 s; that run's throughput (6,161 requests/s, four workers) was below the one before
            # (8,668), not yet separated from the host: options, not defaults, until a paired run.
            **_compilation_config(cudagraph_capture_sizes, cudagraph_mode),
            # a fixed KV cache: vLLM skips its memory profiling (registry.start_with_retries' fallback)
            **({"kv_cache_memory_bytes": int(kv_cache_memory_bytes)} if kv_cache_memory_bytes else {}),
            # None: vLLM's defaults (16 tokens a block, sha256). Host cost per request grows with the prompt's
            # blocks (hashing, cache lookups, block bookkeeping), cached or not: bench/vllm_host_profile.py.
            **({"block_size": int(block_size)} if block_size else {}),
            **({"prefix_caching_hash_algo": prefix_caching_hash_algo} if prefix_caching_hash_algo else {}),
        )
        self.last_timings: dict[str, float] = {}

    def _start(self, model_dir: str, **options: Any) -> Any:
        compilation = options.get("compilation_config")
        if compilation and "cudagraph_mode" in compilation:  # vLLM's enum, not its name
            from vllm.config import CUDAGraphMode

            mode = CUDAGraphMode[compilation["cudagraph_mode"]]
            options["compilation_config"] = {**compilation, "cudagraph_mode": mode}
        from vllm import LLM

        if self.in_process or not multiprocessing.current_process().daemon:
            with real_std_streams():
                return LLM(model=model_dir, tokenizer=model_dir, **options)
        before = set(child_pids(os.getpid()))
        with real_std_streams(), children_allowed():
            llm = LLM(model=model_dir, tokenizer=model_dir, **options)
        self.reaper = reap_with_me([p for p in child_pids(os.getpid()) if p not in before])
        return llm

    def _sampling_params(self, label_ids: Sequence[int]) -> Any:
        if len(label_ids) > self.label_width:
            raise ValueError(
                f"{len(label_ids)} label ids in one request: this engine asks for at most {self.label_width}"
                " (score() asks in chunks)"
            )
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=1,  # the label code is the next token; nothing else is generated
            temperature=0.0,  # greedy: no sampler randomness (the reported logprobs are raw either way)
            logprob_token_ids=list(label_ids),  # full-vocabulary logprobs of exactly these ids (≤ 128)
            flat_logprobs=True,  # flat lists instead of a dict + Logprob object per token: less GC
            detokenize=False,  # no text output is needed
        )

    def score(self, renderer: PromptRenderer, texts: Sequence[str], adapters: Sequence[AdapterRef]) -> ScoreResult:
        from vllm.lora.request import LoRARequest

        validate_adapters(adapters)
        if renderer.max_context >= self.max_model_len:
            raise ValueError(
                f"renderer max_context {renderer.max_context} must be < max_model_len {self.max_model_len}"
            )
        if adapters and not self.enable_lora:
            raise ValueError("this engine was started with enable_lora=False")
        if not texts:
            empty = np.zeros((max(1, len(adapters)), 0, len(renderer.label_token_ids)), dtype=np.float32)
            return ScoreResult(p=empty, mass=empty[..., 0], truncated=np.zeros(0, dtype=bool), tokens=0)
        t0 = time.perf_counter()
        batch = renderer.render(texts)
        t1 = time.perf_counter()
        prompts, loras = build_requests(renderer.prefix_ids, batch.suffix_ids, adapters, LoRARequest)
        if self.wide_checked is None and len(renderer.label_token_ids) > VLLM_MAX_LABELS:
            self._check_wide(renderer, texts[:WIDE_CHECK_ITEMS], adapters)
        chunks = label_chunks(renderer.label_token_ids, self.label_width)
        per_chunk = [self._sampling_params(chunk) for chunk in chunks]
        # One label chunk (≤ 128 labels, the common case): one SamplingParams for every request, as
        # before; more: the requests repeat chunk-major, each with its chunk's (shared) params object.
        params: Any = per_chunk[0] if len(chunks) == 1 else [sp for sp in per_chunk for _ in prompts]
        warm_prompts, warm_loras = build_requests(
            renderer.prefix_ids, renderer.render([WARMUP_TEXT]).suffix_ids, adapters, LoRARequest
        )
        t2 = time.perf_counter()
        with real_std_streams():
            # The shared prefix into the cache first, once per adapter, so that every item below is scored on a
            # cached prefix: an item computed in the same pass as its prefix (a cold cache: a fresh worker's
            # first step) gets other bits than one read from the cache (session 26: 0 of 2,000 items
            # bit-identical between the two, with batch-invariant kernels), so a shard re-scored by a fresh
            # worker after a kill differed from the first scoring. K tiny requests per call.
            self.llm.generate(warm_prompts, per_chunk[0], lora_request=warm_loras, use_tqdm=False)
            t_warm = time.perf_counter()
            outputs = self.llm.generate(
                prompts * len(chunks),
                params,
                lora_request=None if loras is None else loras * len(chunks),
                use_tqdm=False,
            )
        t3 = time.perf_counter()
        logp = chunked_label_logprobs(outputs, chunks, len(texts))
        p, mass = distribution_from_logprobs(logp)
        t4 = time.perf_counter()
        self.last_timings = {
            "render_s": t1 - t0,
            "build_s": t2 - t1,
            "warm_s": t_warm - t2,
            "generate_s": t3 - t_warm,
            "convert_s": t4 - t3,
        }
        tokens = sum(len(renderer.prefix_ids) + len(s) for s in batch.suffix_ids)
        # computed_tokens stays 0 (unknown): vLLM's prefix cache decides; see prefix_cache_counts().
        return ScoreResult(p=p, mass=mass, truncated=batch.truncated, tokens=tokens)

    def _check_wide(self, renderer: PromptRenderer, texts: Sequence[str], adapters: Sequence[AdapterRef]) -> None:
        """The first wide call: a few items scored both ways (one request of every label; 128-label chunks);
        the engine keeps the wide requests only where both agree (``wide_check``), else it goes back to chunks
        for good (a vLLM whose sampler does not honour the raised cap)."""
        wide = self.label_width
        self.wide_checked = False  # score() below must not check again
        try:
            scored_wide = self.score(renderer, texts, adapters)
            self.label_width = VLLM_MAX_LABELS
            ok, figures = wide_check(scored_wide, self.score(renderer, texts, adapters))
        except Exception:
            logger.exception(
                "label_logprob_width %d: the wide requests failed; asking in chunks of %d", wide, VLLM_MAX_LABELS
            )
            self.label_width = VLLM_MAX_LABELS
            return
        self.wide_checked = ok
        self.label_width = wide if ok else VLLM_MAX_LABELS
        log = logger.info if ok else logger.error
        log(
            "label_logprob_width %d: %d items x %d adapters scored in one request and in chunks of %d: "
            "mean / max |dp| %.4f / %.4f, mean |dmass| %.4f, argmax agreement %.3f: %s",
            wide,
            len(texts),
            max(1, len(adapters)),
            VLLM_MAX_LABELS,
            figures["mean_dp"],
            figures["max_dp"],
            figures["mean_dmass"],
            figures["agreement"],
            "one request per item and adapter from now on" if ok else "they differ: asking in chunks from now on",
        )

    def prefix_cache_counts(self) -> tuple[float, float]:
        return prefix_cache_counts(self.llm.get_metrics())
