"""Where a real-size model lands: an 8B-shaped model (Llama-3-8B's configuration, random weights made
on the machine, nothing downloaded) scoring the app's workload with K LoRA adapters -- tokens/s and
MFU (issue 35, point 7). The GPU sitting is bench/gpu_8b.sh; the CPU test builds the ``tiny`` shape.

    python bench/llm8b_bench.py build --out M --tokenizer TOK            # Llama-3-8B shape, bf16 shards
    python bench/llm8b_bench.py adapters --model M --out A --k 4 --rank 8
    python bench/llm8b_bench.py score --model M --adapters A/a0 A/a1 A/a2 A/a3 --n 20000 \\
        --prompt-tokens 256 --prefix-tokens 224,0 --engine vllm --out r.json

The workload is the app's scoring request (scoring/engines/vllm.py): a pre-tokenized prompt
(TokensPrompt) of ``--prompt-tokens`` ids, of which the first ``--prefix-tokens`` are shared by every
prompt of a workload (the app's instruction + few-shot prefix), ``max_tokens=1``, the log-probs of a
few label ids (``logprob_token_ids``), ``flat_logprobs``, ``detokenize=False``; prefix caching on and
every adapter resident (``max_loras=K``). The engine is the app's VLLMEngine with its options; only
``gpu_memory_utilization`` (the model is alone on the GPU) and ``load_format`` are the bench's. The
token ids are random: with random weights only the compute shape matters.

MFU = 2 x n_params x prompt tokens/s / peak dense bf16 FLOP/s, where n_params are the weights every
prompt token multiplies (the decoder layers' linear layers: the embedding is a lookup, and the
lm_head runs once per request since max_tokens=1). Attention's score and value products (~0.5 % at
256 tokens) and the lm_head (~0.03 %) are left out, so the figure is slightly low. Two figures:
``on_all_prompt_tokens`` counts prefix-cache hits as if computed (the app's tokens/s, an upper
bound); ``on_computed_tokens`` counts only the tokens the GPU computed (prompt tokens - hits).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from scoring.engines.vllm import VLLMEngine

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Llama-3-8B's configuration (meta-llama/Meta-Llama-3-8B config.json); tiny: the same code on 2 layers.
SHAPES: dict[str, dict[str, Any]] = {
    "llama3-8b": {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
    # SmolLM2-135M's shape (HuggingFaceTB/SmolLM2-135M-Instruct config.json), random weights: the app's model size
    # for measurements that need no trained weights (bench/batch_invariance.py), with nothing but a tokenizer carried
    "smollm2-135m": {
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
    },
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
}
# Peak dense bf16 tensor FLOP/s (no sparsity) from the vendors' data sheets, matched in order against
# the GPU's name; --peak-tflops overrides (and is the only source for a GPU not listed here).
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100 PCIE", 756e12),
    ("H100", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
FIRST_ID = 256  # prompt and label ids start here: clear of the tokenizer's special tokens (SmolLM2's are < 20)


class BenchInputError(ValueError):
    pass


# -- pure parts (unit-tested) ---------------------------------------------------------------------


def decide_vocab(config_vocab: int, tokenizer_len: int | None) -> tuple[int, str]:
    """The model's vocabulary size and why: the shape's own when the tokenizer's ids all fit in it
    (the rows above the tokenizer are never used: the compute shape stays the real one), else the
    tokenizer's length (an id beyond the embedding would crash vLLM and transformers)."""
    if tokenizer_len is None:
        return config_vocab, f"no tokenizer: the shape's vocab_size {config_vocab}"
    if tokenizer_len <= config_vocab:
        return config_vocab, (
            f"kept the shape's vocab_size {config_vocab}: the tokenizer's {tokenizer_len} ids fit"
            f" (rows {tokenizer_len}..{config_vocab - 1} are never used)"
        )
    return tokenizer_len, (
        f"vocab_size set to the tokenizer's length {tokenizer_len}: the shape's {config_vocab} is smaller"
        " and a larger id would index past the embedding"
    )


def param_counts(shape: dict[str, Any], vocab_size: int | None = None) -> dict[str, int]:
    """Weights of a Llama shape (untied lm_head, no biases): the decoder layers' linear layers (what
    every prompt token multiplies), the embedding, the lm_head, the norms, and their total."""
    h, i = shape["hidden_size"], shape["intermediate_size"]
    head_dim = shape.get("head_dim") or h // shape["num_attention_heads"]
    q = shape["num_attention_heads"] * head_dim
    kv = shape["num_key_value_heads"] * head_dim
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i  # q, k, v, o; gate, up, down
    vocab = vocab_size if vocab_size is not None else shape["vocab_size"]
    counts = {
        "per_token": shape["num_hidden_layers"] * per_layer,
        "embedding": vocab * h,
        "lm_head": vocab * h,
        "norms": (2 * shape["num_hidden_layers"] + 1) * h,
    }
    counts["total"] = sum(counts.values())
    return counts


def peak_flops(gpu_name: str, override_tflops: float | None) -> tuple[float | None, str]:
    """(peak dense bf16 FLOP/s, where the figure comes from); None when neither is known."""
    if override_tflops:
        return override_tflops * 1e12, f"--peak-tflops {override_tflops:g}"
    upper = gpu_name.upper()
    for key, flops in PEAK_BF16:
        if all(word in upper for word in key.split()):
            return flops, f"table: {key} {flops / 1e12:g} TFLOP/s"
    return None, f"no peak for {gpu_name!r}: pass --peak-tflops"


def mfu(n_params: int, tokens_per_s: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation of a forward pass: 2 FLOPs per weight per token over the peak."""
    if peak is None or peak <= 0:
        return None
    return 2.0 * n_params * tokens_per_s / peak


def make_prompts(
    n: int, prompt_tokens: int, prefix_tokens: int, id_range: tuple[int, int], rng: np.random.Generator
) -> tuple[list[int], list[list[int]]]:
    """A shared prefix of ``prefix_tokens`` random ids and ``n`` suffixes that complete each prompt
    to exactly ``prompt_tokens`` ids (exact lengths make the token accounting exact)."""
    if not 0 <= prefix_tokens < prompt_tokens:
        raise BenchInputError(f"the prefix ({prefix_tokens}) must be shorter than the prompt ({prompt_tokens})")
    low, high = id_range
    if high - low < 2:
        raise BenchInputError(f"token id range {id_range} is too small")
    prefix = rng.integers(low, high, size=prefix_tokens).tolist()
    suffixes = rng.integers(low, high, size=(n, prompt_tokens - prefix_tokens)).tolist()
    return prefix, suffixes


def adapter_slots(n_items: int, k: int, layout: str) -> list[int | None]:
    """The adapter index of each request: ``spread`` gives item i to adapter i mod K (every batch mixes
    the adapters); ``ensemble`` scores every item under every adapter, adapter-major as the app does
    (request k*N + i); K=0 scores the base model."""
    if k == 0:
        return [None] * n_items
    if layout == "spread":
        return [i % k for i in range(n_items)]
    if layout == "ensemble":
        return [a for a in range(k) for _ in range(n_items)]
    raise BenchInputError(f"unknown layout {layout!r} (spread or ensemble)")


@dataclass(frozen=True)
class Counts:
    requests: int
    prompt_tokens: int
    wall_s: float
    cached_tokens: float | None  # prefix-cache hit tokens; None when the engine has no prefix cache


def figures(counts: Counts, n_params: int, peak: float | None) -> dict[str, Any]:
    """Throughput and MFU of one timed run, on all prompt tokens and on the tokens actually computed."""
    if counts.wall_s <= 0:
        raise BenchInputError(f"wall time {counts.wall_s} s")
    hits = counts.cached_tokens or 0.0
    computed = counts.prompt_tokens - hits
    all_tps, computed_tps = counts.prompt_tokens / counts.wall_s, computed / counts.wall_s
    return {
        "requests": counts.requests,
        "wall_s": counts.wall_s,
        "requests_per_s": counts.requests / counts.wall_s,
        "prompt_tokens": counts.prompt_tokens,
        "prompt_tokens_per_s": all_tps,
        "prefix_cache_hit_tokens": counts.cached_tokens,
        "prefix_cache_hit_share": None if counts.cached_tokens is None else hits / max(1, counts.prompt_tokens),
        "computed_tokens": computed,
        "computed_tokens_per_s": computed_tps,
        "mfu": {
            "on_all_prompt_tokens": mfu(n_params, all_tps, peak),
            "on_computed_tokens": mfu(n_params, computed_tps, peak),
        },
    }


def merge_counts(parts: Sequence[Counts]) -> Counts:
    cached = [p.cached_tokens for p in parts]
    return Counts(
        requests=sum(p.requests for p in parts),
        prompt_tokens=sum(p.prompt_tokens for p in parts),
        wall_s=sum(p.wall_s for p in parts),
        cached_tokens=None if any(c is None for c in cached) else float(sum(c or 0.0 for c in cached)),
    )


# -- build and adapters ---------------------------------------------------------------------------


def llama_config(shape_name: str, vocab_size: int, std: float, tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    shape = dict(SHAPES[shape_name])
    rope_theta = shape.pop("rope_theta")
    shape["vocab_size"] = vocab_size
    options: dict[str, Any] = {
        **shape,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": False,  # Llama-3-8B has its own lm_head
        "initializer_range": std,  # transformers' init draws every linear and embedding weight from N(0, std)
        "dtype": "bfloat16",
    }
    if tokenizer is not None:  # the special ids the tokenizer really has (vLLM reads eos from the config)
        options.update({f"{t}_token_id": getattr(tokenizer, f"{t}_token_id", None) for t in ("bos", "eos", "pad")})
    return LlamaConfig(**options)


def cmd_build(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(args.tokenizer)) if args.tokenizer else None
    vocab, why = decide_vocab(SHAPES[args.config]["vocab_size"], len(tokenizer) if tokenizer is not None else None)
    print(f"vocab: {why}", flush=True)
    config = llama_config(args.config, vocab, args.std, tokenizer)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    torch.manual_seed(args.seed)
    with torch.device(device):  # the weights are drawn where they are made: seconds on a GPU for 8B
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    t_init = time.perf_counter()
    with torch.inference_mode():  # random weights, small std: the logits must still be finite
        ids = torch.randint(FIRST_ID, min(vocab, len(tokenizer) if tokenizer is not None else vocab), (2, 32))
        logits = model(input_ids=ids.to(device)).logits.float()
    logit_check = {"finite": bool(torch.isfinite(logits).all()), "std": float(logits.std())}
    if not logit_check["finite"]:
        raise BenchInputError(f"non-finite logits with std {args.std}: use a smaller --std")
    out = Path(args.out)
    model.to("cpu").save_pretrained(str(out), max_shard_size="5GB")  # safetensors shards + index
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    counts = param_counts(SHAPES[args.config], vocab)
    summary = {
        "config": args.config,
        "vocab": {"size": vocab, "decision": why, "tokenizer": str(args.tokenizer) if args.tokenizer else None},
        "params": counts,
        "params_in_model": sum(p.numel() for p in model.parameters()),
        "std": args.std,
        "seed": args.seed,
        "device": device,
        "logits": logit_check,
        "init_s": round(t_init - t0, 1),
        "total_s": round(time.perf_counter() - t0, 1),
    }
    (out / "build.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)
    return 0


def cmd_adapters(args: argparse.Namespace) -> int:
    """K random PEFT LoRA adapters on every linear layer of the decoder. The base model is built on
    the meta device (no 16 GB load): only the LoRA weights are made, A as PEFT initialises it and B
    from N(0, std) (PEFT starts B at zero: a no-op adapter), and PEFT saves only those."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(args.model))
    out = Path(args.out)
    for k in range(args.k):
        torch.manual_seed(args.seed + k)
        with torch.device("meta"):
            base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        # alpha = 2 x rank: the app's training default (rank 8, alpha 16)
        lora = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
        model = get_peft_model(base, lora)
        for name, param in list(model.named_parameters()):
            if "lora_" not in name:
                continue
            owner, attr = name.rsplit(".", 1)
            weight = torch.empty(param.shape, dtype=torch.float32)
            if "lora_A" in name:
                torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5))  # PEFT's own init of A
            else:
                torch.nn.init.normal_(weight, std=args.b_std)
            setattr(model.get_submodule(owner), attr, torch.nn.Parameter(weight))
        model.save_pretrained(str(out / f"a{k}"))
    print(f"{args.k} random rank-{args.rank} adapters on {LORA_TARGETS} in {out}", flush=True)
    return 0


# -- scoring --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    ids: list[int]
    adapter: int | None


class VLLMRunner:
    """The app's VLLMEngine (its options and comments), with the bench's load format, scoring
    token-id requests directly: the app's build of requests and conversion of outputs."""

    def __init__(self, args: argparse.Namespace, n_adapters: int) -> None:
        from scoring.engines.vllm import VLLMEngine

        load_format = args.load_format

        class BenchEngine(VLLMEngine):
            def _start(self, model_dir: str, **options: Any) -> Any:
                options["load_format"] = load_format  # dummy: vLLM's own random weights, no checkpoint read
                return super()._start(model_dir, **options)

        self.engine: VLLMEngine = BenchEngine(
            str(args.model),
            enable_lora=n_adapters > 0,
            max_lora_rank=args.max_lora_rank,
            max_loras=max(1, n_adapters),
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=max(2304, args.prompt_tokens + 16),
            enforce_eager=args.enforce_eager,
            disable_log_stats=False,  # get_metrics() needs it: the prefix-cache hit tokens
        )
        self.adapter_dirs = [str(d) for d in args.adapters]

    def run(self, requests: Sequence[Request], label_ids: Sequence[int]) -> tuple[np.ndarray, Counts]:
        from vllm.lora.request import LoRARequest

        from scoring.engines.vllm import outputs_to_label_logprobs

        # ids 1..K: one LoRARequest per adapter, shared by its requests (scoring.engines.vllm.build_requests)
        loras = [LoRARequest(f"bench-a{k}", k + 1, path) for k, path in enumerate(self.adapter_dirs)]
        prompts = [{"prompt_token_ids": r.ids} for r in requests]
        lora_requests = [None if r.adapter is None else loras[r.adapter] for r in requests]
        params = self.engine._sampling_params(label_ids)  # the app's own: max_tokens=1, flat, no detokenize
        queries0, hits0 = self.engine.prefix_cache_counts()
        t0 = time.perf_counter()
        outputs = self.engine.llm.generate(prompts, params, lora_request=lora_requests, use_tqdm=False)
        wall = time.perf_counter() - t0
        queries, hits = self.engine.prefix_cache_counts()
        logp = outputs_to_label_logprobs(outputs, label_ids, len(outputs))[0]
        tokens = sum(len(r.ids) for r in requests)
        # the same hits per request, as each RequestOutput reports them: a cross-check of the metric
        per_request = sum(getattr(o, "num_cached_tokens", 0) or 0 for o in outputs)
        if abs((queries - queries0) - tokens) > len(requests) or abs((hits - hits0) - per_request) > len(requests):
            print(
                f"note: prefix-cache metric: {queries - queries0:.0f} queried, {hits - hits0:.0f} hit;"
                f" requests: {tokens} prompt tokens, {per_request} cached",
                flush=True,
            )
        cached = hits - hits0 if queries > queries0 else float(per_request)  # no metric: the outputs' own
        return logp, Counts(len(requests), tokens, wall, cached)


class HFRunner:
    """The same requests through transformers + PEFT in batches (no prefix cache): the CPU test's path."""

    def __init__(self, args: argparse.Namespace, n_adapters: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        model: Any = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.bfloat16)
        model = model.to(self.device)
        if n_adapters:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(args.adapters[0]), adapter_name="a0")
            for k, path in enumerate(args.adapters[1:], start=1):
                model.load_adapter(str(path), adapter_name=f"a{k}")
        self.model = model.eval()
        self.batch = args.hf_batch

    def _logits(self, ids: list[list[int]], adapter: int | None) -> Any:
        import torch

        x = torch.tensor(ids, device=self.device)  # equal lengths: no padding, no mask
        if adapter is None:
            scope = self.model.disable_adapter() if hasattr(self.model, "disable_adapter") else contextlib.nullcontext()
        else:
            self.model.set_adapter(f"a{adapter}")
            scope = contextlib.nullcontext()
        with scope:
            return self.model(input_ids=x, logits_to_keep=1).logits[:, -1].float()

    def run(self, requests: Sequence[Request], label_ids: Sequence[int]) -> tuple[np.ndarray, Counts]:
        import torch

        out = np.empty((len(requests), len(label_ids)), dtype=np.float32)

        def slot(r: int) -> int:
            adapter = requests[r].adapter
            return -1 if adapter is None else adapter

        order = sorted(range(len(requests)), key=slot)  # one adapter per batch, base first
        t0 = time.perf_counter()
        with torch.inference_mode():
            start = 0
            while start < len(order):
                adapter = requests[order[start]].adapter
                batch = [r for r in order[start : start + self.batch] if requests[r].adapter == adapter]
                logp = torch.log_softmax(self._logits([requests[r].ids for r in batch], adapter), dim=-1)
                out[batch] = logp[:, list(label_ids)].cpu().numpy()
                start += len(batch)
        wall = time.perf_counter() - t0
        return out, Counts(len(requests), sum(len(r.ids) for r in requests), wall, None)


def label_summary(logp: np.ndarray) -> dict[str, Any]:
    """Whether the random model gave usable label log-probs: all finite, and their mass."""
    finite = np.isfinite(logp)
    mass = np.exp(logp).sum(axis=1)
    return {"finite_share": float(finite.mean()), "mean_label_mass": float(np.nanmean(mass))}


def id_range(model_dir: Path) -> tuple[int, int]:
    """Prompt ids: from FIRST_ID up to the tokenizer's length when the model directory has one (its
    ids are real tokens), else up to the model's vocabulary."""
    config = json.loads((model_dir / "config.json").read_text())
    high = int(config["vocab_size"])
    build = model_dir / "build.json"
    if build.is_file() and json.loads(build.read_text())["vocab"]["tokenizer"]:
        from transformers import AutoTokenizer

        high = min(high, len(AutoTokenizer.from_pretrained(str(model_dir))))
    return FIRST_ID, high


def gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "cpu"
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "peft", "vllm", "safetensors", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def git_commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def workload_plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The workloads of one engine, in order: one per --prefix-tokens value with the adapters, then
    the base model (--base-n items, no shared prefix) for the LoRA overhead."""
    k = len(args.adapters)
    plan = [
        {"name": f"k{k}-prefix{p}", "prefix_tokens": p, "n_items": args.n, "k": k, "layout": args.layout}
        for p in args.prefix_tokens
    ]
    if args.base_n:
        plan.append({"name": "base-prefix0", "prefix_tokens": 0, "n_items": args.base_n, "k": 0, "layout": "spread"})
    return plan


def run_workload(
    runner: Any, spec: dict[str, Any], args: argparse.Namespace, ids: tuple[int, int], seed: int, deadline: float
) -> tuple[dict[str, Any], np.ndarray]:
    """One workload in chunks of --chunk items (the app scores in shards too); each chunk is timed
    alone, and the workload stops early once the deadline has passed."""
    rng = np.random.default_rng(seed)
    prefix, suffixes = make_prompts(spec["n_items"], args.prompt_tokens, spec["prefix_tokens"], ids, rng)
    label_ids = list(range(ids[0], ids[0] + args.labels))
    parts: list[Counts] = []
    logps: list[np.ndarray] = []
    diffs: list[float] = []
    for start in range(0, spec["n_items"], args.chunk):
        if time.time() > deadline:
            print(f"{spec['name']}: deadline reached after {start} items", flush=True)
            break
        items = suffixes[start : start + args.chunk]
        slots = adapter_slots(len(items), spec["k"], spec["layout"])
        requests = [Request(prefix + items[i % len(items)], a) for i, a in enumerate(slots)]
        logp, counts = runner.run(requests, label_ids)
        parts.append(counts)
        logps.append(logp)
        if spec["layout"] == "ensemble" and spec["k"] > 1:  # the chunk's items under every adapter
            per_adapter = logp.reshape(spec["k"], len(items), len(label_ids))
            diffs.append(np.abs(per_adapter - per_adapter[:1]).mean(axis=(1, 2)).sum() / (spec["k"] - 1))
        print(f"{spec['name']}: chunk at {start}: {counts}", flush=True)
    if not parts:
        return {**spec, "skipped": "deadline"}, np.zeros((0, args.labels), dtype=np.float32)
    logp = np.concatenate(logps)
    labels = label_summary(logp)
    if diffs:  # random B must move the label log-probs: |adapter k - adapter 0| on the same items
        labels["mean_abs_diff_from_adapter0"] = float(np.mean(diffs))
    scored = min(spec["n_items"], len(parts) * args.chunk)  # fewer than n_items: the deadline stopped it
    return {**spec, "items_scored": scored, "chunks": [asdict(p) for p in parts], "labels": labels}, logp


def cmd_score(args: argparse.Namespace) -> int:
    t_start = time.time()
    deadline = args.deadline or float("inf")
    n_adapters = len(args.adapters)
    build = args.model / "build.json"
    built = json.loads(build.read_text()) if build.is_file() else None
    config = json.loads((args.model / "config.json").read_text())
    counts = param_counts(config)
    gpu = gpu_name()
    peak, peak_source = peak_flops(gpu, args.peak_tflops)
    report: dict[str, Any] = {
        "bench": "llm8b_bench.py score",
        "commit": git_commit(),
        "gpu": gpu,
        "versions": versions(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"},
        "adapters": [str(a) for a in args.adapters],
        "model": {"config": {k: config.get(k) for k in SHAPES["tiny"] if k != "rope_theta"}, "build": built},
        "params": counts,
        "mfu_definition": {
            "formula": "2 * n_params * tokens_per_s / peak_flops",
            "n_params": counts["per_token"],
            "n_params_is": "the decoder layers' linear weights (the embedding lookup and the once-per-request"
            " lm_head are left out)",
            "peak_flops": peak,
            "peak_source": peak_source,
            "on_all_prompt_tokens": "prefix-cache hits counted as if computed (the app's tokens/s)",
            "on_computed_tokens": "prompt tokens minus prefix-cache hit tokens: what the GPU computed",
        },
        "status": "starting",
        "workloads": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        out.write_text(json.dumps(report, indent=1, default=str))

    write()
    # vLLM starts before this process does any torch work (../shared/device/README.md: it hangs otherwise)
    t0 = time.perf_counter()
    runner = VLLMRunner(args, n_adapters) if args.engine == "vllm" else HFRunner(args, n_adapters)
    report["engine_start_s"] = round(time.perf_counter() - t0, 1)
    ids = id_range(args.model)
    report["token_ids"] = {"range": list(ids), "label_ids": list(range(ids[0], ids[0] + args.labels))}
    if args.warmup:  # adapters loaded, kernels compiled and tuned, not timed; its own prompts
        warm = {"name": "warmup", "prefix_tokens": 0, "n_items": args.warmup, "k": n_adapters, "layout": "spread"}
        run_workload(runner, warm, args, ids, args.seed + 1000, float("inf"))
    report["status"] = "running"
    write()
    for index, spec in enumerate(workload_plan(args)):
        row, _ = run_workload(runner, spec, args, ids, args.seed + index, deadline)
        if "chunks" in row:
            row.update(figures(merge_counts([Counts(**c) for c in row["chunks"]]), counts["per_token"], peak))
        report["workloads"].append(row)
        write()
        print(json.dumps({k: v for k, v in row.items() if k != "chunks"}), flush=True)
    report["status"] = "done"
    report["total_s"] = round(time.time() - t_start, 1)
    write()
    return 0


# -- command line ---------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="an HF model directory of a Llama shape with random weights")
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--config", choices=sorted(SHAPES), default="llama3-8b")
    build.add_argument("--tokenizer", type=Path, help="a tokenizer directory to reuse (SmolLM2's)")
    # 0.02: Llama's own initializer_range; 32 random layers keep finite bf16 logits (checked after init)
    build.add_argument("--std", type=float, default=0.02)
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    build.set_defaults(func=cmd_build)

    adapters = sub.add_parser("adapters", help="K random PEFT LoRA adapters for a model directory")
    adapters.add_argument("--model", type=Path, required=True)
    adapters.add_argument("--out", type=Path, required=True)
    adapters.add_argument("--k", type=int, default=4)
    adapters.add_argument("--rank", type=int, default=8, help="8: the app's training default")
    adapters.add_argument("--b-std", type=float, default=0.02, help="std of B (the other benches' random adapters)")
    adapters.add_argument("--seed", type=int, default=0)
    adapters.set_defaults(func=cmd_adapters)

    score = sub.add_parser("score", help="the app's scoring workload; throughput and MFU as JSON")
    score.add_argument("--model", type=Path, required=True)
    score.add_argument("--adapters", type=Path, nargs="*", default=[])
    score.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    score.add_argument("--n", type=int, default=20000, help="prompts per workload")
    score.add_argument("--prompt-tokens", type=int, default=256)
    score.add_argument(
        "--prefix-tokens",
        type=_int_list,
        default=[224, 0],
        help="comma list, one workload each: 224 of 256 = the app's ~88 %% shared prefix (800 of ~910"
        " tokens; a multiple of vLLM's 16-token block is hit whole); 0 = every token computed (MFU)",
    )
    score.add_argument("--layout", choices=["spread", "ensemble"], default="spread")
    score.add_argument("--base-n", type=int, default=0, help="then N prompts on the base model (LoRA's cost)")
    score.add_argument("--labels", type=int, default=4, help="label ids asked for per request")
    score.add_argument("--chunk", type=int, default=5000, help="items per generate call, each timed")
    score.add_argument("--warmup", type=int, default=512, help="untimed requests first")
    score.add_argument("--seed", type=int, default=0)
    score.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s (default: the GPU table)")
    score.add_argument("--deadline", type=float, help="epoch seconds: no chunk starts after it")
    score.add_argument("--out", type=Path, required=True)
    # vLLM: the app's defaults (scoring/engines/vllm.py) but for the GPU share and the load format
    score.add_argument("--max-lora-rank", type=int, default=16, help="the app's: rank 8 adapters with headroom")
    score.add_argument("--max-num-seqs", type=int, default=1024)
    score.add_argument("--max-num-batched-tokens", type=int, default=65536)
    # 0.9: the 8B model is alone on the GPU (the app's 0.5 leaves room for training beside it)
    score.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    score.add_argument("--enforce-eager", action="store_true", help="no torch.compile / CUDA graphs")
    score.add_argument("--load-format", default="auto", help="dummy: vLLM's random weights, no shards read")
    score.add_argument("--hf-batch", type=int, default=8, help="hf engine: requests per forward")
    score.set_defaults(func=cmd_score)

    args = ap.parse_args(argv)
    if args.command == "score" and any(p >= args.prompt_tokens for p in args.prefix_tokens):
        ap.error("every --prefix-tokens value must be < --prompt-tokens")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return int(args.func(args))
    except BenchInputError as exc:
        print(f"llm8b_bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # spawn: vLLM's engine start hangs after torch CPU work in a forked parent (device README).
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
