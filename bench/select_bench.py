"""Selection and embedding benchmarks; prints one markdown table, optionally writes JSON.

    python bench/select_bench.py                 # CPU: M=20k, B=1k, L=10k (goal < 3 s), MiniLM
    python bench/select_bench.py --gpu           # GPU: M=40k, B=5k, L=50k (goal < 2 s) on torch cuda

Runs without Django, so the same script works on the GPU machine. Selection inputs are random unit
vectors: k-center cost depends only on the shapes. (The faiss rows went with scoring/index.py, which
nothing used: see bench/HISTORY.md, "Selection, embeddings, faiss".)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from acquisition.batch import select_batch  # noqa: E402

D = 384  # MiniLM's dimension
CPU_CONFIG = {"n": 100_000, "m": 20_000, "b": 1_000, "l": 10_000, "goal_s": 3.0}
GPU_CONFIG = {"n": 200_000, "m": 40_000, "b": 5_000, "l": 50_000, "goal_s": 2.0}
Row = dict[str, Any]


def _unit(rng: np.random.Generator, n: int, d: int = D) -> np.ndarray:
    x = rng.standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    return _timed(fn, repeats)[0]


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall seconds and median process CPU seconds (all threads) over ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def bench_selection(config: dict[str, Any], device: str, repeats: int) -> Row:
    rng = np.random.default_rng(0)
    emb, labeled, u = _unit(rng, config["n"]), _unit(rng, config["l"]), rng.random(config["n"])

    def run() -> None:
        # random_share=0: the worst case, k-center picks the whole batch.
        select_batch(u, emb, labeled, b=config["b"], m=config["m"], random_share=0.0, rng=1, device=device)
        if device == "cuda":
            import torch

            torch.cuda.synchronize()

    run()  # warm-up: thread pools, cuBLAS handles, allocator
    seconds, cpu_seconds = _timed(run, repeats)
    shape = f"N={config['n']:,} M={config['m']:,} B={config['b']:,} L={config['l']:,} d={D}"
    verdict = "ok" if seconds < config["goal_s"] else "OVER GOAL"
    return {
        "part": f"select_batch ({device})",
        "config": shape,
        "value": f"{seconds:.2f} s",
        "note": f"median of {repeats}, {cpu_seconds:.2f} s process CPU; goal < {config['goal_s']:.0f} s: {verdict}",
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def bench_device_parity(device: str) -> Row:
    """Same picks on the accelerator as on the CPU (float32 either way; TF32 stays off by default)."""
    from acquisition.batch import kcenter_greedy

    rng = np.random.default_rng(2)
    cand, seeds = _unit(rng, 4_000), _unit(rng, 2_000)
    here = kcenter_greedy(cand, seeds, 500, device=device)
    cpu = kcenter_greedy(cand, seeds, 500, device="cpu")
    agree = int(np.cumprod(here == cpu).sum())
    return {
        "part": f"kcenter {device} vs cpu",
        "config": "M=4,000 L=2,000 k=500",
        "value": f"{agree}/500",
        "note": "picks identical before the first divergence",
    }


def _texts(limit: int) -> tuple[list[str], str]:
    for path in (
        ROOT.parent / "shared" / "data" / "trec" / "train.csv",
        ROOT / "shared" / "data" / "trec" / "train.csv",
    ):
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            return [row["text"] for row in csv.DictReader(f)][:limit], "TREC train"
    rng = np.random.default_rng(0)
    words = ["what", "who", "when", "where", "how", "many", "city", "river", "year", "first", "largest"]
    return [" ".join(rng.choice(words, size=12)) + " ?" for _ in range(limit)], "synthetic"


def bench_embeddings(limit: int, device: str | None, encoder_dir: str | None) -> list[Row]:
    from scoring import bundled
    from scoring.embeddings import EmbeddingCache

    try:
        encoder = bundled.encoder_path(encoder_dir)
    except bundled.BundledModelMissing as missing:
        return [{"part": "embed (MiniLM)", "config": "-", "value": "skipped", "note": str(missing)}]
    texts, source = _texts(limit)
    hashes = [f"{i:08x}" for i in range(len(texts))]
    with tempfile.TemporaryDirectory() as root:
        cache = EmbeddingCache(root, encoder, device=device)
        cache.embed(texts[:64], hashes[:64])  # load the model and warm up outside the timing
        start = time.perf_counter()
        cache.embed(texts[64:], hashes[64:])
        cold = (len(texts) - 64) / (time.perf_counter() - start)
        start = time.perf_counter()
        cache.embed(texts, hashes)
        warm = len(texts) / (time.perf_counter() - start)
    config = f"{len(texts) - 64:,} {source} texts, batch {cache.batch_size}, {device or 'auto'}"
    return [
        {
            "part": "embed (MiniLM, new texts)",
            "config": config,
            "value": f"{cold:,.0f} items/s",
            "note": "",
            "rate": cold,
        },
        {
            "part": "embed (cache hits)",
            "config": f"{len(texts):,} texts",
            "value": f"{warm:,.0f} items/s",
            "note": "",
            "rate": warm,
        },
    ]


def _table(rows: list[Row]) -> str:
    lines = ["| part | config | result | note |", "|---|---|---|---|"]
    lines += [f"| {r['part']} | {r['config']} | {r['value']} | {r['note']} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the GPU config (M=40k, B=5k, L=50k) on cuda")
    parser.add_argument("--device", default=None, help="override the selection device (cpu / cuda)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--embed-texts", type=int, default=2_000, help="texts to embed (0 = skip)")
    parser.add_argument("--encoder-dir", default=None, help="a sentence-transformers dir (default: bundled MiniLM)")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()

    import torch

    device = args.device or ("cuda" if args.gpu else "cpu")
    rows = [bench_selection(GPU_CONFIG if args.gpu else CPU_CONFIG, device, args.repeats)]
    if device != "cpu":
        rows.append(bench_device_parity(device))
    if args.embed_texts:
        rows += bench_embeddings(args.embed_texts, "cuda" if args.gpu else "cpu", args.encoder_dir)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    machine = (
        f"{platform.node()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, load average {load} (at the end)"
    )
    if device == "cuda":
        machine += f", {torch.cuda.get_device_name()}"
    print(f"machine: {machine}\n")
    print(_table(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
