"""Every selection strategy on the cheap learner (annotate/simulation/proxy_loop.py), CPU only.

    .venv/bin/python bench/proxy_sim.py --sets trec,snips --seeds 0,1,2   # bench/raw/<today>/proxy-<commit>.jsonl
    .venv/bin/python bench/sim_report.py bench/raw/<today>/proxy-<commit>.jsonl   # the tables

Embeddings come from the bundled all-MiniLM-L6-v2 through the app's embedding cache (var/embeddings
by default), so a second run embeds nothing. Each record carries the commit and the options.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acquisition.batch import COLD_MODES, DEFAULT_SOFTRANK_BETA  # noqa: E402
from acquisition.strategies import STRATEGIES  # noqa: E402
from annotate.simulation.proxy_loop import ProxySpec, append_records, load_data, run_job  # noqa: E402

POOL_SAMPLE = {"sst2": 20000}  # as the harness and BASELINES.md


def _commit() -> str:
    if os.environ.get("ALANN_COMMIT"):
        return os.environ["ALANN_COMMIT"]
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    code = ["--", ".", ":!bench/raw"]  # results are not code
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", *code], capture_output=True, text=True
    )
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--sets", default="trec,sst2,clinc150,emotion,snips,search_snippets")
    ap.add_argument("--strategies", default="random,active,uncertainty-only,margin-kcenter,portfolio")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--labels", type=int, default=1000)
    ap.add_argument("--cache", type=Path, default=ROOT / "var" / "embeddings")
    ap.add_argument(
        "--out", type=Path, help="records JSONL, appended to (default bench/raw/<today>/proxy-<commit>.jsonl)"
    )
    ap.add_argument("--cold-mode", default="random", choices=COLD_MODES, help="seed set of every strategy but random")
    ap.add_argument(
        "--softrank-beta", type=float, default=DEFAULT_SOFTRANK_BETA, help="the active strategy's soft-rank exponent"
    )
    ap.add_argument("--seed-labels", type=int, default=0, help="seed set size (0: max(2 × classes, 20))")
    ap.add_argument("--batch", type=int, default=0, help="B (0: 25, or 100 with more than 50 classes)")
    ap.add_argument(
        "--holdout", type=float, default=0.0, help="evaluate on this share of train.csv (≤ 2,000 rows), not test.csv"
    )
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        ap.error(f"unknown strategies {sorted(unknown)}; expected among {STRATEGIES}")

    from rawfiles import raw_path

    from scoring.bundled import encoder_path
    from scoring.cache import text_hash
    from scoring.embeddings import EmbeddingCache

    commit = _commit()
    out = args.out or raw_path(f"proxy-{commit}.jsonl")
    cache = EmbeddingCache(args.cache, encoder_path(os.environ.get("ENCODER_DIR") or None))
    spec = ProxySpec(
        max_labels=args.labels,
        batch=args.batch,
        seed_labels=args.seed_labels,
        cold_mode=args.cold_mode,
        softrank_beta=args.softrank_beta,
        commit=commit,
        options={
            "command": " ".join(sys.argv),
            "cold_mode": args.cold_mode,
            "holdout": args.holdout,
            "softrank_beta": args.softrank_beta,
        },
    )
    for name in args.sets.split(","):
        t0 = time.perf_counter()
        data = load_data(
            name,
            args.data_dir / name,
            lambda texts: cache.embed(texts, [text_hash(t) for t in texts]),
            pool_sample=POOL_SAMPLE.get(name, 0),
            holdout=args.holdout,
        )
        print(
            f"{name}: pool {len(data.pool_y)}, test {len(data.test_y)}, {data.n_classes} classes, "
            f"embedded in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        for seed in (int(s) for s in args.seeds.split(",")):
            for strategy in strategies:
                t1 = time.perf_counter()
                records = run_job(data, strategy, seed, spec)
                for r in records:
                    r["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                append_records(out, records)
                last = records[-1]
                print(
                    f"  {strategy:>16} s{seed}: {last['labels']} labels, {100 * last['accuracy']:.1f} %, "
                    f"{time.perf_counter() - t1:.0f} s",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
