"""The label-error queue's precision and recall (issue 31): on a shared set, 1,000 labelled items with 5 %
of the labels flipped at random to another class, the confident-learning rule of predictor/label_errors.py
on out-of-fold probabilities of the embedding proxy (what annotate/services/label_errors.py runs in the
app) is scored against the flipped items.

    python bench/label_errors.py [--sets trec,sst2,...] [--labels 1000] [--flip 0.05] [--seeds 0,1,2]

Prints a table per set (suspects, precision, recall, mean over seeds) and writes the raw rows with the
git commit and the options to bench/raw/<today>/label-errors-<commit>.json. CPU only; MiniLM embeddings
are cached under var/bench-embeddings (the first run embeds, later ones read)."""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from predictor.label_errors import DEFAULT_MIN_RATIO, find_label_errors, out_of_fold_proba  # noqa: E402
from scoring.bundled import encoder_path  # noqa: E402
from scoring.embeddings import EmbeddingCache  # noqa: E402

SETS = ("trec", "sst2", "clinc150", "emotion", "snips", "search_snippets")


def read_split(path: Path) -> tuple[list[str], list[str]]:
    with path.open(newline="") as f:
        rows = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    return [t for t, _ in rows], [lab for _, lab in rows]


def flip(y: np.ndarray, n_classes: int, share: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``share`` of the labels moved to a uniformly drawn other class; returns (noisy labels, flipped rows)."""
    rows = rng.choice(len(y), size=round(share * len(y)), replace=False)
    noisy = y.copy()
    noisy[rows] = (y[rows] + rng.integers(1, n_classes, size=len(rows))) % n_classes
    return noisy, np.sort(rows)


def embed_picked(cache: EmbeddingCache, texts: list[str], *, labels: int, seeds: list[int]) -> np.ndarray:
    """Embeddings of the rows some seed's run picks (one_run draws its pick first from its seed's
    generator); the other rows stay zero and are never read."""
    picked = np.unique(
        np.concatenate(
            [np.random.default_rng(s).choice(len(texts), size=min(labels, len(texts)), replace=False) for s in seeds]
        )
    )
    chosen = [texts[i] for i in picked]
    vectors = cache.embed(chosen, [hashlib.sha256(t.encode()).hexdigest() for t in chosen])
    emb = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
    emb[picked] = vectors
    return emb


def one_run(
    emb: np.ndarray, y: np.ndarray, n_classes: int, *, labels: int, share: float, seed: int, ratio: float
) -> dict:
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(y), size=min(labels, len(y)), replace=False)
    noisy, flipped = flip(y[pick], n_classes, share, rng)
    began = time.perf_counter()
    probs = out_of_fold_proba(emb[pick], noisy, n_classes, rng=rng)
    found = find_label_errors(probs, noisy, min_ratio=ratio)
    seconds = time.perf_counter() - began
    hit = np.isin(found.index, flipped)
    return {
        "seed": seed,
        "min_ratio": ratio,
        "labels": len(pick),
        "flipped": len(flipped),
        "suspects": len(found.index),
        "true_suspects": int(hit.sum()),
        "precision": float(hit.mean()) if len(hit) else None,
        "recall": float(hit.sum() / len(flipped)) if len(flipped) else None,
        "suggested_right": int((found.suggested[hit] == y[pick][found.index[hit]]).sum()),
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--split", default="train", choices=("train", "test"), help="the ratio was chosen on train")
    p.add_argument("--labels", type=int, default=1000, help="labelled items per run (at most the split's rows)")
    p.add_argument("--flip", type=float, default=0.05)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--ratios", default=f"1,{DEFAULT_MIN_RATIO:g}", help="the rule alone (1) and the app's default")
    p.add_argument("--cache", type=Path, default=ROOT / "var" / "bench-embeddings")
    p.add_argument("--out", type=Path, help="folder of the raw JSON (default bench/raw/<today>/)")
    a = p.parse_args(argv)
    from rawfiles import raw_dir

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    commit = commit.strip() or "unknown"
    cache = EmbeddingCache(a.cache, encoder_path())
    rows = []
    print("| set | classes | labels | flipped | ratio ≥ | suspects (mean) | precision | recall | suggestion right |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in a.sets.split(","):
        texts, labels = read_split(a.data / name / f"{a.split}.csv")
        classes = sorted(set(labels))
        y = np.array([classes.index(lab) for lab in labels], dtype=np.int64)
        emb = embed_picked(cache, texts, labels=a.labels, seeds=[int(s) for s in a.seeds.split(",")])
        for ratio in (float(m) for m in a.ratios.split(",")):
            runs = [
                one_run(emb, y, len(classes), labels=a.labels, share=a.flip, seed=int(s), ratio=ratio)
                for s in a.seeds.split(",")
            ]
            rows += [{"set": name, "classes": len(classes), **r} for r in runs]
            prec = [r["precision"] or 0.0 for r in runs]
            rec = [r["recall"] or 0.0 for r in runs]
            right = sum(r["suggested_right"] for r in runs) / max(1, sum(r["true_suspects"] for r in runs))
            print(
                f"| {name} | {len(classes)} | {runs[0]['labels']} | {runs[0]['flipped']} | {ratio:g} |"
                f" {np.mean([r['suspects'] for r in runs]):.1f} |"
                f" {np.mean(prec):.2f} ({min(prec):.2f}–{max(prec):.2f}) |"
                f" {np.mean(rec):.2f} ({min(rec):.2f}–{max(rec):.2f}) | {right:.2f} |"
            )
    out = a.out or raw_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"label-errors-{commit}{'-test' if a.split == 'test' else ''}.json"
    options = {k: str(v) for k, v in vars(a).items()}
    path.write_text(json.dumps({"commit": commit, "options": options, "rows": rows}, indent=1) + "\n")
    print(f"\nraw: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
