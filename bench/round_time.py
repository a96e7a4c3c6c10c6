"""Where a round's time and memory go: one round at L labels, B new, ~1,000-token prompts.

    python bench/round_time.py --model DIR [--labels 500] [--batch 50] [--candidates 2000] \
        [--test 500] [--k 2] [--configs before,after] [--out OUT]

The round is the loop's own steps over arrays (no Django, no database): score the candidates with
the K adapters (hf engine), choose the batch (the committee strategy: proxy fit + soft-rank draws
over MiniLM embeddings when --encoder is given, random unit vectors otherwise), train K adapters
warm-started from a previous round's on the L labels, evaluate on the test items. Data: TREC from
--data (train.csv, test.csv). The prompt prefix is the TREC label set with descriptions and
few-shot examples, padded to about --prefix-tokens, as a rich production prompt would be.

Each configuration runs in its own subprocess (so peak GPU memory is that configuration's alone):
- before: the trainer as it was (full prompts every step, float32 base weights, no gradient
  checkpointing, batch 16, up to 100 steps of 3 epochs) and the engine's old 64 rows per forward;
- after: the shared prefix run once per micro-batch, bf16 base weights on a GPU, batch 32, up to
  60 steps (the simulation's settings), 256 rows per forward.
Prints one table; OUT/round-time.json holds the raw numbers, the options and the git commit.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS: dict[str, dict[str, Any]] = {
    "before": {
        "train": {"prefix_sharing": False, "precision": "float32", "gradient_checkpointing": False,
                  "batch_size": 16, "epochs": 3, "max_steps": 100, "lr": 1e-3, "checkpoint_every": 0,
                  "micro_batch_tokens": 1 << 20},
        "engine": {"batch_size": 64},
    },
    "after": {
        "train": {"prefix_sharing": True, "precision": "auto", "batch_size": 32, "epochs": 3, "max_steps": 60,
                  "lr": 1e-3, "checkpoint_every": 0, "micro_batch_tokens": 1 << 20},
        "engine": {},
    },
}  # fmt: skip


def _top(layers: int, batch: int, steps: int, *, packed: bool) -> dict[str, Any]:
    """LoRA on the last ``layers`` of SmolLM2's 30 (TrainConfig.top_layers): the trunk's output is
    computed once per run (training) and kept by the engine (scoring, evaluation); float32, no dropout."""
    train = {"prefix_sharing": True, "precision": "float32", "batch_size": batch, "epochs": 3, "max_steps": steps,
             "lr": 1e-3, "checkpoint_every": 0, "micro_batch_tokens": 1 << 20, "dropout": 0.0, "top_layers": layers,
             "packed": packed}  # fmt: skip
    return {"train": train, "engine": {}}


# The session-5 measurements ran the two-pass step (prefix, then suffixes): packed=False reproduces
# them. top8p is the trainer's default since, one packed sequence a step (session 6: 13.3 s a round).
# b64: batches of 64 at half the steps (a step is launch-bound: ~the same cost at 64 rows).
CONFIGS.update(
    top4=_top(4, 32, 60, packed=False),
    top8=_top(8, 32, 60, packed=False),
    top8p=_top(8, 32, 60, packed=True),
    top8b64=_top(8, 64, 24, packed=False),
    top12b64=_top(12, 64, 24, packed=False),
)

DESCRIPTIONS = {
    "ABBR": "abbreviation: the question asks what an abbreviation stands for or for the short form of something",
    "DESC": "description: the question asks for a definition, a description, a manner or a reason",
    "ENTY": "entity: the question asks for a thing: an animal, a colour, a food, a product, a term, an event",
    "HUM": "human: the question asks for a person or a group of people, a title or a description of one",
    "LOC": "location: the question asks for a place: a city, a country, a mountain, a state or another place",
    "NUM": "numeric: the question asks for a number: a count, a date, a distance, a price, a size or a speed",
}


def read(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [(r["text"], r["label"]) for r in csv.DictReader(f)]


def build(model_dir: str, data: Path, prefix_tokens: int) -> tuple[Any, list[tuple[str, str]], list[tuple[str, str]]]:
    from transformers import AutoTokenizer

    from scoring.labels import suggest_codes
    from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec

    train, test = read(data / "train.csv"), read(data / "test.csv")
    names = sorted({label for _, label in train})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    codes = suggest_codes(tokenizer, names)
    labels = tuple(LabelSpec(n, DESCRIPTIONS.get(n, ""), c) for n, c in zip(names, codes, strict=True))
    few_shot: list[tuple[str, str]] = []
    for text, label in train[-400:]:  # few-shot turns until the prefix reaches the target size
        spec = PromptSpec("Classify the question by the type of its answer.", labels, tuple(few_shot))
        renderer = PromptRenderer(tokenizer, spec, model_revision="bench", max_context=2048)
        if len(renderer.prefix_ids) >= prefix_tokens:
            break
        few_shot.append((text, label))
    return renderer, train[:-400], test


def one_config(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch

    from scoring.engines import AdapterRef
    from scoring.engines.hf import HFEngine
    from scoring.proxy import fit_proxy
    from scoring.selection import committee_distribution, select_committee
    from scoring.signals import mean_distribution
    from training.lora import TrainConfig, train_adapter

    cfg = CONFIGS[name]
    renderer, train, test = build(args.model, Path(args.data), args.prefix_tokens)
    names = sorted({label for _, label in train})
    index = {n: i for i, n in enumerate(names)}
    rng = np.random.default_rng(0)
    order = rng.permutation(len(train))
    labeled = [train[i] for i in order[: args.labels]]
    candidates = [train[i] for i in order[args.labels : args.labels + args.candidates]]
    test = test[: args.test]
    on_gpu = torch.cuda.is_available()
    timings: dict[str, float] = {}
    out = Path(args.work) / name
    train_cfg = replace(TrainConfig(), **cfg["train"])

    def timed(step: str, fn: Any) -> Any:
        if on_gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = fn()
        if on_gpu:
            torch.cuda.synchronize()
        timings[step] = round(time.perf_counter() - started, 3)
        return result

    def train_all(texts: list[tuple[str, str]], tag: str, warm: list[str] | None) -> list[AdapterRef]:
        refs: list[AdapterRef] = []
        for k in range(args.k):
            trained = train_adapter(
                model_dir=args.model,
                renderer=renderer,
                texts=[t for t, _ in texts],
                label_indices=[index[y] for _, y in texts],
                out_dir=out / f"{tag}-{k}",
                config=replace(train_cfg, seed=k),
                warm_from=None if warm is None else warm[k],
            )
            refs.append(AdapterRef(f"{tag}-{k}", len(refs) + 1 + (100 if tag == "round" else 0), trained.path))
        return refs

    # The previous round's adapters (untimed): trained on the labels minus this round's batch.
    previous = train_all(labeled[: args.labels - args.batch], "previous", None)
    engine = HFEngine(args.model, **cfg["engine"])
    # Steady state: the previous round evaluated the same fixed test set (untimed here), which is
    # what lets an engine keep its trunk outputs (top-layer adapters) from one round to the next.
    engine.score(renderer, [t for t, _ in test[: args.test]], previous)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    scored = timed("score", lambda: engine.score(renderer, [t for t, _ in candidates], previous))
    emb = rng.standard_normal((len(candidates) + args.labels, 384)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)

    def choose() -> Any:
        proxy = fit_proxy(emb[: args.labels], np.array([index[y] for _, y in labeled]), len(names))
        committee = committee_distribution(mean_distribution(scored.p), proxy.predict_proba(emb[args.labels :]), args.k)
        return select_committee(
            committee, emb[args.labels :], emb[: args.labels], b=args.batch, random_share=0.15, rng=0
        )

    timed("select", choose)
    refs = timed("train", lambda: train_all(labeled, "round", [r.path for r in previous]))
    evaluated = timed("evaluate", lambda: engine.score(renderer, [t for t, _ in test], refs))
    total = time.perf_counter() - started
    y_test = np.array([index.get(y, -1) for _, y in test])
    accuracy = float(np.mean(mean_distribution(evaluated.p).argmax(axis=1) == y_test))
    return {
        "config": name,
        "options": cfg,
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "prefix_tokens": len(renderer.prefix_ids),
        "mean_prompt_tokens": round(float(scored.tokens) / max(1, len(candidates)), 1),
        "seconds": timings,
        "round_seconds": round(total, 3),
        "test_accuracy": round(100 * accuracy, 2),  # the K members' mean distribution, one seed: a sanity check
        "train_steps_per_member": min(
            train_cfg.max_steps or 10**9, train_cfg.epochs * -(-args.labels // train_cfg.batch_size)
        ),
        "gpu_peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20) if on_gpu else None,
        "gpu_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20) if on_gpu else None,
        "peak_rss_mib": round(_peak_rss_mib()),
    }


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def commit() -> str:
    if os.environ.get("ALANN_COMMIT"):
        return os.environ["ALANN_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| config | device | prompt tokens | score | select | train | evaluate | round | GPU peak reserved"
        " | peak RSS | test acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["seconds"]
        gpu = f"{r['gpu_peak_reserved_mib'] / 1024:.2f} GiB" if r["gpu_peak_reserved_mib"] is not None else "—"
        steps = " | ".join(f"{s[k]:.2f} s" for k in ("score", "select", "train", "evaluate"))
        rss = f"{r['peak_rss_mib'] / 1024:.2f} GiB"
        lines.append(
            f"| {r['config']} | {r['device']} | {r['mean_prompt_tokens']:.0f} | {steps}"
            f" | {r['round_seconds']:.2f} s | {gpu} | {rss} | {r.get('test_accuracy', '—')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "trec"))
    parser.add_argument("--labels", type=int, default=500)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--prefix-tokens", type=int, default=900)
    parser.add_argument("--configs", default="before,after")
    parser.add_argument("--out", default="var/round-time")
    parser.add_argument("--work", default="")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # subprocess: one configuration
    parser.add_argument("--report", default="", help="print the table of an earlier round-time.json and stop")
    args = parser.parse_args()
    if args.report:
        record = json.loads(Path(args.report).read_text())
        print(f"commit {record['commit']}, {record['time']}, options: {' '.join(record['argv'])}\n")
        print(table(record["rows"]))
        return
    args.work = args.work or str(Path(args.out) / "work")
    if args.one:
        print(json.dumps(one_config(args.one, args)))
        return
    rows = []
    for name in args.configs.split(","):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--one", name]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"{name} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(table(rows[-1:]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    record = {
        "commit": commit(),
        "argv": sys.argv[1:],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    (Path(args.out) / "round-time.json").write_text(json.dumps(record, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
