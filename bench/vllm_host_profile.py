"""Where a vLLM gpu worker's scoring time goes on a many-label set (issue 35: a CLINC150 round's scoring ran at
~1,600 requests/s with the GPU 15–21 % busy, TREC's at ~12,000): the app's engine (scoring/engines/vllm.py) on the
set's own prompt, one process per variant of engine options and environment, with cProfile on request.

    python bench/vllm_host_profile.py run --model DIR --data DIR/clinc150 [--data-short DIR/trec] \
        [--n 4000] [--k 4] [--variants inproc-profile,inproc,mp,block64,short] --out OUT [--budget S]
    python bench/vllm_host_profile.py table OUT          # the markdown table of OUT/*.json

The prompt is the one a new project of that set renders (the app's default instructions and item template,
suggested label codes, no descriptions, no few-shot: ``annotate/simulation/harness.py``'s ``context_for``), so
CLINC150's prefix lists 151 labels. K random LoRA adapters (rank 8, all linear layers, random B) are made once in
their own process (vLLM must start in a process that did no torch CPU work). Each variant: start the engine with
the deployed gpu workers' options (0.12 of the GPU, PIECEWISE graphs for [1, 8, 64, 512]) plus its own, score
256 items once (compile shapes, warm the prefix cache), then score ``--n`` items with the K adapters timed: wall,
the engine's own split (render, build, generate, convert), requests/s, GPU busy (nvidia-smi every 200 ms).
``*-profile`` variants run the timed call under cProfile (vLLM's engine core in-process: its scheduler and
model-runner host code are in the profile) and write the top functions to OUT/<variant>-profile.txt.

Variants: ``inproc`` (the engine core in the scoring process, as in a Celery prefork child: how the gpu workers
run it), ``mp`` (vLLM's default: the engine core in its own process), ``block64`` / ``block128`` (KV blocks of
64 / 128 tokens: 4x / 8x fewer blocks per prompt to hash and look up), ``xxhash`` (the prefix-cache hash),
``seqs2048`` (twice the sequences per step: the per-step host cost over more requests), ``short`` (the
same on --data-short, e.g. TREC: a short label list). Each row records the git commit
(``BENCH_COMMIT`` when set) and its options.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import csv
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEPLOYED = {"gpu_memory_utilization": 0.12, "cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 8, 64, 512]}
VARIANTS: dict[str, dict[str, Any]] = {
    "inproc": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
    "inproc-profile": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "profile": True},
    "mp": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}},
    "block64": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "engine": {"block_size": 64}},
    "block128": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "engine": {"block_size": 128}},
    "xxhash": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "engine": {"prefix_caching_hash_algo": "xxhash"}},
    "mp-block64": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, "engine": {"block_size": 64}},
    "seqs2048": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "engine": {"max_num_seqs": 2048}},
    "short": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "short": True},
}


NOT_ROWS = ("adapters.json", "choice.json")  # OUT's JSON files that are not a variant's row


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [{os.getpid()}] {message}", flush=True)


def commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "unknown"


def read_set(data: Path) -> tuple[list[str], list[str]]:
    """(pool texts, label names in first-seen order) of a shared set's train.csv."""
    with (data / "train.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    names = list(dict.fromkeys(r["label"] for r in rows))
    return [r["text"] for r in rows], names


def renderer_for(model_dir: str, names: list[str]) -> Any:
    """What a new project of the set renders: the app's default instructions and item template, suggested codes."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from transformers import AutoTokenizer

    from annotate.models import Project
    from scoring.bundled import model_revision
    from scoring.labels import suggest_codes
    from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    codes = suggest_codes(tokenizer, names)
    defaults = {f: str(Project._meta.get_field(f).get_default()) for f in ("instructions", "item_template")}  # type: ignore[union-attr]
    spec = PromptSpec(
        instructions=defaults["instructions"],
        labels=tuple(LabelSpec(name, "", code) for name, code in zip(names, codes, strict=True)),
        item_template=defaults["item_template"],
    )
    return PromptRenderer(tokenizer, spec, model_revision=model_revision(model_dir), max_context=2048)


def prep(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from score_bench import make_adapters

    paths = make_adapters(args.model, Path(args.out) / "adapters", args.k, 0)
    (Path(args.out) / "adapters.json").write_text(json.dumps(paths))


class GpuBusy:
    """nvidia-smi's utilization.gpu every 200 ms while it runs."""

    def __init__(self) -> None:
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self.proc = None

    def stop(self) -> float | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        values = [float(v) for v in out.split() if v.replace(".", "", 1).isdigit()]
        return round(sum(values) / len(values), 1) if values else None


def variant(args: argparse.Namespace) -> None:
    """One variant, in this process (its environment set by the parent before vLLM is imported)."""
    spec = VARIANTS[args.variant]
    data = Path(args.data_short if spec.get("short") else args.data)
    texts, names = read_set(data)
    renderer = renderer_for(args.model, names)
    from scoring.engines.base import AdapterRef
    from scoring.engines.vllm import VLLMEngine

    options = {**DEPLOYED, **spec.get("engine", {})}
    began = time.perf_counter()
    engine = VLLMEngine(args.model, **options)
    start_s = time.perf_counter() - began
    paths = json.loads((Path(args.out) / "adapters.json").read_text())
    refs = [AdapterRef(f"prof-a{i}", i + 1, p) for i, p in enumerate(paths[: args.k])]
    engine.score(renderer, texts[:256], refs)  # shapes compiled, the prefix cached
    items = (texts * (args.n // max(1, len(texts)) + 1))[256 : 256 + args.n] if len(texts) > 256 else texts
    busy = GpuBusy()
    profiler = cProfile.Profile() if spec.get("profile") else None
    began = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = engine.score(renderer, items, refs)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - began
    gpu = busy.stop()
    chunks = -(-len(renderer.label_token_ids) // 128)
    requests = len(items) * len(refs) * chunks
    row = {
        "variant": args.variant,
        "commit": commit(),
        "set": data.name,
        "labels": len(names),
        "label_chunks": chunks,
        "prefix_tokens": len(renderer.prefix_ids),
        "items": len(items),
        "k": len(refs),
        "requests": requests,
        "engine_options": options,
        "env": spec.get("env", {}),
        "profiled": bool(profiler),
        "engine_start_s": round(start_s, 1),
        "wall_s": round(wall, 2),
        "requests_per_s": round(requests / wall, 1),
        "items_per_s": round(len(items) / wall, 1),
        "gpu_busy_pct": gpu,
        "timings": {k: round(v, 3) for k, v in engine.last_timings.items()},
        "mean_mass": round(float(result.mass.mean()), 4),
    }
    (Path(args.out) / f"{args.variant}.json").write_text(json.dumps(row, indent=1))
    log(json.dumps(row))
    if profiler is not None:
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(60)
            with (Path(args.out) / f"{args.variant}-profile.txt").open("a") as fh:
                fh.write(f"=== by {order} ===\n{text.getvalue()}\n")
        profiler.dump_stats(str(Path(args.out) / f"{args.variant}.pstats"))


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget if args.budget else None
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--model", args.model, "--data", args.data, "--n", str(args.n), "--k", str(args.k), "--out", args.out]
    if args.data_short:
        common += ["--data-short", args.data_short]
    if not (out / "adapters.json").is_file():
        subprocess.run([*me, "prep", *common], check=True, timeout=600)
    failed = 0
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: {', '.join(VARIANTS)}")
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < 60:
            log(f"{name}: skipped, {left:.0f} s left of the budget")
            continue
        env = {**os.environ, **VARIANTS[name].get("env", {})}
        log(f"{name}: starting")
        try:
            code = subprocess.run([*me, "variant", name, *common], env=env, timeout=left).returncode
        except subprocess.TimeoutExpired:
            code = -1
        log(f"{name}: exit {code}")
        failed += code != 0
    print(table(out))
    return 1 if failed else 0


def table(out: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.name not in NOT_ROWS]
    lines = [
        "| variant | set (labels, chunks, prefix) | items × K | requests/s | wall s | generate s | convert s | "
        "GPU busy % | engine start s | commit |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        t = r["timings"]
        lines.append(
            f"| {r['variant']}{' (cProfile)' if r['profiled'] else ''} | {r['set']} ({r['labels']}, "
            f"{r['label_chunks']}, {r['prefix_tokens']}) | {r['items']} × {r['k']} | {r['requests_per_s']:,.0f} | "
            f"{r['wall_s']} | {t.get('generate_s', 0):.2f} | {t.get('convert_s', 0):.2f} | {r['gpu_busy_pct']} | "
            f"{r['engine_start_s']} | {r['commit'][:7]} |"
        )
    return "\n".join(lines)


def choose(
    out: Path, loop: dict[str, Any], gpu_loop: dict[str, Any], gain: float = 1.1, core_process: bool = True
) -> dict[str, Any]:
    """The engine options a deployed run takes from OUT's rows: each variant's option where its requests/s beat
    ``inproc``'s (the gpu workers' way, every other option at the deployed default) by ``gain`` or more; of the
    block sizes the fastest. Round options (block_size) go into both loops, a worker's local ones (the prefix
    hash, the engine core's process) into the gpu workers' only; ``core_process=False`` leaves the engine core in the
    worker's process whatever mp measured (the reason says so). Returns the two loops and the reasons."""
    rows = {r["variant"]: r for r in (json.loads(p.read_text()) for p in out.glob("*.json") if p.name not in NOT_ROWS)}
    base = rows.get("inproc")
    loop, gpu_loop = copy.deepcopy(loop), copy.deepcopy(gpu_loop)
    reasons: list[str] = []
    if base is None:
        return {"loop": loop, "gpu_loop": gpu_loop, "reasons": ["no inproc row: the deployed defaults"]}
    r0 = float(base["requests_per_s"])

    def faster(name: str) -> float:
        row = rows.get(name)
        return float(row["requests_per_s"]) / r0 if row and not row.get("profiled") else 0.0

    blocks = [(faster(f"block{b}"), b) for b in (64, 128)]
    ratio, block = max(blocks)
    if ratio >= gain:
        for target in (loop, gpu_loop):
            target.setdefault("engine_options", {})["block_size"] = block
        reasons.append(f"block_size {block}: {ratio:.2f}x inproc's {r0:,.0f} requests/s")
    local = gpu_loop.setdefault("engine_options", {})
    if faster("xxhash") >= gain:
        local["prefix_caching_hash_algo"] = "xxhash"
        reasons.append(f"xxhash: {faster('xxhash'):.2f}x")
    if faster("mp") >= gain:
        if core_process:
            local["engine_core_process"] = True
        note = "" if core_process else " (not applied: --no-core-process)"
        reasons.append(f"engine_core_process (mp): {faster('mp'):.2f}x{note}")
    if not reasons:
        reasons.append(f"no variant {gain:.2f}x or more over inproc's {r0:,.0f} requests/s: the deployed defaults")
    return {
        "loop": loop,
        "gpu_loop": gpu_loop,
        "reasons": reasons,
        "ratios": {n: round(faster(n), 3) for n in rows if n != "inproc"},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["run", "prep", "variant", "table", "choose"])
    ap.add_argument("variant", nargs="?", default="")
    ap.add_argument("--model", default="")
    ap.add_argument("--data", default="")
    ap.add_argument("--data-short", default="")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--variants", default="inproc-profile,inproc,mp,block64,short,xxhash,seqs2048")
    ap.add_argument("--out", default="")
    ap.add_argument("--budget", type=int, default=0, help="seconds for all variants (0: no limit)")
    ap.add_argument("--loop", default='{"profile": "gpu"}', help="choose: the web's and CPU worker's loop options")
    ap.add_argument("--gpu-loop", default='{"profile": "gpu"}', help="choose: the gpu workers' loop options")
    ap.add_argument("--no-core-process", action="store_true", help="choose: never engine_core_process")
    args = ap.parse_args(argv)
    if args.stage == "choose":  # prints the chosen loops as two lines (LOOP, GPU_LOOP); OUT/choice.json keeps why
        out = Path(args.variant or args.out)
        picked = choose(out, json.loads(args.loop), json.loads(args.gpu_loop), core_process=not args.no_core_process)
        (out / "choice.json").write_text(json.dumps(picked, indent=1))
        print(json.dumps(picked["loop"]))
        print(json.dumps(picked["gpu_loop"]))
        return 0
    if args.stage == "table":
        print(table(Path(args.variant or args.out)))
        return 0
    if args.stage == "prep":
        prep(args)
        return 0
    if args.stage == "variant":
        variant(args)
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
