"""Do an item's scores depend on what it is batched with? (issue 35, point 6: a shard re-run after its gpu
worker was SIGKILLed is batched differently from the first run; session 23 measured argmax equal on 99.98 %
of the items and max |dp| 0.0865 in bfloat16, so "identical predictions" did not hold strictly.)

    python bench/batch_invariance.py run --model DIR --adapters A0 A1 ... [--batch-invariant] [--n 2000] \
        [--engine vllm|hf] [--vllm-options JSON] --out OUT/NAME.json
    python bench/batch_invariance.py table OUT/*.json            # the comparison table of several runs

One engine (the app's, through ``scoring.engines.get_engine``: the ``batch_invariant`` engine option is the one
under test) scores the same N items under K adapters three times: ``first`` (one call on a fresh engine: a cold
prefix cache, which the vLLM engine's score() fills with one warm-up request per adapter before the items since
2026-12-06; session 26 measured first ↔ whole before that),
``whole`` (one call again, warm), ``shuffled`` (the items in a random order, in calls of 1, 7, 61, 300, ...
items, so each item meets other neighbours and batch sizes). The report compares whole ↔ shuffled (batching
alone) and first ↔ whole (the prefix cache's state): the share of items whose K distributions are bit for bit
equal, argmax agreement, max |dp|. The items are score_bench's synthetic news prompts (an ~870-token shared
prefix, as the app's prompts have), so nothing but the model and the adapters need travel. With
``--expect-identical`` the exit status is 1 unless whole and shuffled are bit for bit equal.

On the GPU machine: bench/gpu_8b.sh with SHAPE=smollm2-135m builds a random model of SmolLM2's shape and K
random adapters (nothing carried but the tokenizer and vLLM); this script then runs with and without
``--batch-invariant`` (two processes: vLLM reads the switch when it is imported). On a CPU the hf engine runs
the same script (the tests' path)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

CHUNKS = (1, 7, 61, 300, 13, 500, 2, 97)  # the shuffled pass's call sizes, cycled


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, Any]:
    """Two passes' (K, N, C) probabilities (and (K, N) masses) of the same items in the same order."""
    pa, pb = np.asarray(a["p"]), np.asarray(b["p"])
    if pa.shape != pb.shape:
        raise ValueError(f"passes of different shapes: {pa.shape} vs {pb.shape}")
    same_item = np.all(pa == pb, axis=(0, 2)) & np.all(np.asarray(a["mass"]) == np.asarray(b["mass"]), axis=0)
    dp = np.abs(pa.astype(np.float64) - pb.astype(np.float64))
    return {
        "items": int(pa.shape[1]),
        "bit_identical_items": int(same_item.sum()),
        "bit_identical_share": float(same_item.mean()) if same_item.size else 1.0,
        "argmax_agreement": float((pa.argmax(axis=2) == pb.argmax(axis=2)).mean()) if pa.size else 1.0,
        "max_abs_dp": float(dp.max()) if dp.size else 0.0,
        "mean_abs_dp": float(dp.mean()) if dp.size else 0.0,
    }


def shuffled_calls(n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """A permutation of range(n) and its cut into calls of the CHUNKS sizes, cycled."""
    order = np.random.default_rng(seed).permutation(n)
    calls, start, i = [], 0, 0
    while start < n:
        size = CHUNKS[i % len(CHUNKS)]
        calls.append(order[start : start + size])
        start, i = start + size, i + 1
    return order, calls


def _commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def cmd_run(args: argparse.Namespace) -> int:
    import score_bench
    from engine_parity import NEWS_PREFIX_TOKENS, NEWS_SEED, vllm_host_options

    from scoring.engines import AdapterRef, get_engine

    if args.engine != "vllm" and (args.batch_invariant or args.vllm_options):
        raise SystemExit("--batch-invariant and --vllm-options are the vllm engine's")
    options: dict[str, Any] = vllm_host_options(args.vllm_options) if args.engine == "vllm" else {}
    if args.batch_invariant:
        options["batch_invariant"] = True
    t0 = time.time()
    engine = get_engine(args.engine, str(args.model), **options)  # vLLM first: no torch work before it
    started = time.time() - t0
    cfg = {"model_dir": str(args.model), "short": False, "seed": NEWS_SEED, "prefix_tokens": NEWS_PREFIX_TOKENS}
    renderer = score_bench.build_renderer(cfg)
    texts = score_bench.texts_for({**cfg, "n": args.n})
    adapters = [AdapterRef(f"a{k}", k + 1, str(Path(d).resolve())) for k, d in enumerate(args.adapters)]

    def score(items: Sequence[str]) -> dict[str, np.ndarray]:
        result = engine.score(renderer, list(items), adapters)
        return {"p": np.asarray(result.p), "mass": np.asarray(result.mass)}

    timings: dict[str, float] = {}
    t = time.time()
    first = score(texts)
    timings["first_s"] = time.time() - t
    t = time.time()
    whole = score(texts)
    timings["whole_s"] = time.time() - t
    order, calls = shuffled_calls(len(texts), args.seed)
    t = time.time()
    parts = [score([texts[i] for i in call]) for call in calls]
    timings["shuffled_s"] = time.time() - t
    p = np.empty_like(whole["p"])
    mass = np.empty_like(whole["mass"])
    p[:, order] = np.concatenate([part["p"] for part in parts], axis=1)
    mass[:, order] = np.concatenate([part["mass"] for part in parts], axis=1)
    shuffled = {"p": p, "mass": mass}
    report = {
        "commit": _commit(),
        "argv": sys.argv[1:],
        "engine": args.engine,
        "options": options,
        "batch_invariant_env": os.environ.get("VLLM_BATCH_INVARIANT", ""),
        "engine_batch_invariant": getattr(engine, "batch_invariant", None),
        "model": str(args.model),
        "adapters": len(adapters),
        "n": len(texts),
        "prefix_tokens": len(renderer.prefix_ids),
        "calls_shuffled": len(calls),
        "engine_start_s": round(started, 1),
        **{k: round(v, 2) for k, v in timings.items()},
        "whole_vs_shuffled": compare(whole, shuffled),
        "first_vs_whole": compare(first, whole),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1), flush=True)
    if args.expect_identical and report["whole_vs_shuffled"]["bit_identical_share"] < 1.0:
        return 1
    return 0


def table(reports: Sequence[dict[str, Any]]) -> str:
    head = (
        "| run | engine | batch invariant | items × adapters | whole ↔ shuffled: bit-identical items | argmax"
        " | max \\|Δp\\| | first ↔ whole: bit-identical | whole s | shuffled s |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in reports:
        w, f = r["whole_vs_shuffled"], r["first_vs_whole"]
        rows.append(
            f"| {r.get('name', '')} | {r['engine']} | {'yes' if r.get('engine_batch_invariant') else 'no'}"
            f" | {r['n']} × {r['adapters']} | {w['bit_identical_items']} / {w['items']}"
            f" ({100 * w['bit_identical_share']:.2f} %)"
            f" | {100 * w['argmax_agreement']:.2f} % | {w['max_abs_dp']:.2g}"
            f" | {100 * f['bit_identical_share']:.2f} % | {r['whole_s']} | {r['shuffled_s']} |"
        )
    return "\n".join([head, *rows])


def cmd_table(args: argparse.Namespace) -> int:
    reports = []
    for path in args.reports:
        report = json.loads(Path(path).read_text())
        report["name"] = Path(path).stem
        reports.append(report)
    commits = sorted({r["commit"] for r in reports})
    print(f"<!-- python bench/batch_invariance.py table {' '.join(map(str, args.reports))} -->")
    print(f"commit(s): {', '.join(commits)}\n")
    print(table(reports))
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="score N items three ways with one engine, compare")
    run.add_argument("--model", type=Path, required=True)
    run.add_argument("--adapters", nargs="+", required=True, help="LoRA adapter directories (K)")
    run.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    run.add_argument("--batch-invariant", action="store_true", help="the engine option batch_invariant")
    run.add_argument("--vllm-options", default="", help="host options only (engine_parity.py's --vllm-options)")
    run.add_argument("--n", type=int, default=2000)
    run.add_argument("--seed", type=int, default=0, help="the shuffled pass's order")
    run.add_argument("--expect-identical", action="store_true", help="exit 1 unless whole == shuffled bit for bit")
    run.add_argument("--out", type=Path, required=True)
    tab = sub.add_parser("table", help="the table of several run reports")
    tab.add_argument("reports", nargs="+", type=Path)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
