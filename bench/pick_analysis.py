"""What each strategy picked: the batches of simulation records (their ``batch_ids``) against the data.

    .venv/bin/python bench/pick_analysis.py bench/raw/2026-12-01/sim6-records-2026-12-01.jsonl.gz \
        --out bench/raw/$(date +%F)/picks-sim6-2026-12-01.md

For every (data set, strategy), over the rounds after the cold start and every seed, per picked item
(and, in a second table, the seed set of round 1: its class mix against the pool's):
- class mix: the entropy of the picks' gold classes over log(C) (1 = uniform over the classes), and
  the share of picks in the pool's rarest half of the classes next to that half's share of the pool;
- length: mean words of the picked texts (the pool's mean beside it);
- near-duplicates: the share of picks within 0.95 cosine (MiniLM) of an item labelled before them
  or picked earlier in the same batch;
- hardness: the accuracy, on the round's picks, of the cheap proxy (predictor.embedding_proxy) trained on the
  job's labels before that round — low = the strategy picked items the current labels do not explain
  (informative, or mislabelled);
- gold agreement with the proxy's confident predictions: the share of picks where the proxy is confident
  (p ≥ (1 + 1/C)/2, halfway from uniform to certain) and the gold label disagrees — a hint of label
  noise being selected.

Plain numpy + the app's embedding cache (var/embeddings by default); reads the data from
../shared/data. The output records the inputs and the commit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotate.simulation.proxy_loop import read_rows  # noqa: E402
from annotate.simulation.report import selected_records, source_set  # noqa: E402
from predictor.embedding_proxy import fit_proxy  # noqa: E402

NEAR = 0.95


def analyse(records: list[dict[str, Any]], data_dir: Path, embed: Any) -> list[dict[str, Any]]:
    out = []
    by_set: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("batch_ids") and r.get("strategy") != "full-data":
            by_set[r["data"]].append(r)
    for name in sorted(by_set):
        train = read_rows(data_dir / source_set(name) / "train.csv")
        classes = sorted({y for _, y in train})
        index = {c: i for i, c in enumerate(classes)}
        c = len(classes)
        needed = sorted({int(i.split("-")[1]) for r in by_set[name] for i in r["batch_ids"]})
        rows = {i: train[i] for i in needed}
        vecs = embed([rows[i][0] for i in needed])
        emb = {i: vecs[k] for k, i in enumerate(needed)}
        counts = np.bincount([index[y] for _, y in train], minlength=c)
        rare = set(np.argsort(counts, kind="stable")[: max(1, c // 2)].tolist())
        rare_pool = float(counts[list(rare)].sum() / counts.sum())
        pool_words = float(np.mean([len(t.split()) for t, _ in train]))
        jobs: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for r in by_set[name]:
            jobs[(r["strategy"], int(r["seed"]))].append(r)
        stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for (strategy, _seed), rounds in sorted(jobs.items()):
            labelled: list[int] = []
            for r in sorted(rounds, key=lambda r: r["round"]):
                picks = [int(i.split("-")[1]) for i in r["batch_ids"]]
                if r["round"] > 1 and labelled:
                    s = stats[strategy]
                    y = np.array([index[rows[i][1]] for i in picks])
                    s["entropy"].append(_entropy(np.bincount(y, minlength=c)) / np.log(c))
                    s["rare"].extend(float(v in rare) for v in y)
                    s["words"].extend(len(rows[i][0].split()) for i in picks)
                    seen = np.stack([emb[i] for i in labelled])
                    for i in picks:
                        s["dup"].append(float((seen @ emb[i]).max() > NEAR))
                        seen = np.vstack([seen, emb[i][None]])
                    ly = np.array([index[rows[i][1]] for i in labelled])
                    p = fit_proxy(np.stack([emb[i] for i in labelled]), ly, c).predict_proba(
                        np.stack([emb[i] for i in picks])
                    )
                    s["hard"].extend((p.argmax(1) == y).astype(float))
                    s["conflict"].extend(((p.max(1) >= (1 + 1 / c) / 2) & (p.argmax(1) != y)).astype(float))
                labelled += picks
        for strategy, s in sorted(stats.items()):
            out.append(
                {
                    "data": name,
                    "strategy": strategy,
                    "picks": len(s["words"]),
                    "class_entropy": float(np.mean(s["entropy"])),
                    "rare_share": float(np.mean(s["rare"])),
                    "rare_pool": rare_pool,
                    "words": float(np.mean(s["words"])),
                    "pool_words": pool_words,
                    "near_dup": float(np.mean(s["dup"])),
                    "proxy_acc": float(np.mean(s["hard"])),
                    "confident_conflict": float(np.mean(s["conflict"])),
                }
            )
    return out


def seed_sets(records: list[dict[str, Any]], data_dir: Path) -> list[dict[str, Any]]:
    """Round 1 (the seed set) of every (data set, strategy), over the seeds: its class mix against the
    pool's — total variation distance ½Σ|p − q|, and the class it under-represents most (its share of
    the seed set, its share of the pool) — and the test accuracy the round reached."""
    out = []
    firsts: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("round") == 1 and r.get("batch_ids") and r.get("strategy") != "full-data":
            firsts[(r["data"], r["strategy"])].append(r)
    pools: dict[str, tuple[list[str], np.ndarray, list[str]]] = {}
    for (name, strategy), rounds in sorted(firsts.items()):
        if name not in pools:
            labels = [y for _, y in read_rows(data_dir / source_set(name) / "train.csv")]
            classes = sorted(set(labels))
            pools[name] = (labels, np.array([labels.count(c) for c in classes], float) / len(labels), classes)
        labels, pool, classes = pools[name]
        mixes = []
        for r in rounds:
            picked = [labels[int(i.split("-")[1])] for i in r["batch_ids"]]
            mixes.append(np.array([picked.count(c) for c in classes], float) / len(picked))
        mix = np.mean(mixes, axis=0)
        worst = int(np.argmin(mix / pool))
        out.append(
            {
                "data": name,
                "strategy": strategy,
                "seeds": len(rounds),
                "size": float(np.mean([len(r["batch_ids"]) for r in rounds])),
                "tv": float(np.mean([0.5 * np.abs(m - pool).sum() for m in mixes])),
                "worst_class": classes[worst],
                "worst_share": float(mix[worst]),
                "worst_pool": float(pool[worst]),
                "accuracy": float(np.mean([100 * float(r["accuracy"]) for r in rounds])),
            }
        )
    return out


def seed_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| data | strategy | seeds | seed set | class-mix distance to the pool (TV) | most under-represented "
        "class: seed set % (pool %) | test acc after round 1 % |\n|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['data']} | {r['strategy']} | {r['seeds']} | {r['size']:.0f} | {r['tv']:.3f} | {r['worst_class']}: "
        f"{100 * r['worst_share']:.1f} ({100 * r['worst_pool']:.1f}) | {r['accuracy']:.1f} |\n"
        for r in rows
    )


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| data | strategy | picks | class entropy / log C | rarest-half share (pool) | words (pool) "
        "| near-dup % | proxy acc on picks % | confident proxy ≠ gold % |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['data']} | {r['strategy']} | {r['picks']} | {r['class_entropy']:.3f} | "
        f"{100 * r['rare_share']:.1f} ({100 * r['rare_pool']:.1f}) | {r['words']:.1f} ({r['pool_words']:.1f}) | "
        f"{100 * r['near_dup']:.1f} | {100 * r['proxy_acc']:.1f} | {100 * r['confident_conflict']:.1f} |\n"
        for r in rows
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=Path, nargs="+")
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=ROOT / "var" / "embeddings")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed-sets-only", action="store_true", help="only the seed-set table (no embeddings)")
    args = ap.parse_args()

    from scoring.bundled import encoder_path
    from scoring.cache import text_hash
    from scoring.embeddings import EmbeddingCache

    records = selected_records(args.records, [])  # a job in several inputs: the last input's run
    picks = ""
    if not args.seed_sets_only:
        cache = EmbeddingCache(args.cache, encoder_path(None))
        picks = table(analyse(records, args.data_dir, lambda texts: cache.embed(texts, [text_hash(t) for t in texts])))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    made_by = sorted({str(r.get("commit", ""))[:7] for r in records})
    text = (
        f"Picks of {', '.join(str(p) for p in args.records)} (runs made at commit {', '.join(made_by)}), "
        f"analysed at {commit.stdout.strip()} by `{' '.join(sys.argv)}`.\n\n"
        + picks
        + "\nThe seed sets (round 1; a strategy named +typical started with the typical cold start):\n\n"
        + seed_table(seed_sets(records, args.data_dir))
    )
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
