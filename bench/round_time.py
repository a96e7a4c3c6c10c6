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
``--workers W`` (W >= 2) runs the round as W GPU workers would (the product's per-member training
tasks and per-shard scoring tasks, ``annotate.gpu.*``, spread over W gpu-worker processes on the same
GPU): W warm worker processes, started and loaded before the round like long-lived Celery workers;
member k trains in worker k mod W, the candidates are scored in W contiguous shards, shard i always
in worker i, and the test set is evaluated in worker 0, one task, as the app's evaluation step is
(``--shard-eval``: in W shards too, each worker keeping its shard's trunk outputs — how session 8's
6.56 s was measured). The adapters are the same as the sequential run's (member k, seed k, the same
labels), so the test accuracy is a check. GPU memory is per process (the largest worker).

Prints one table; OUT/round-time.json holds the raw numbers, the options and the git commit
(``ALANN_COMMIT`` when set, else ``git rev-parse HEAD``: on the GPU machine set it, as
bench/gpu_sim.sh's COMMIT does — the device's copy of the tree carried stale git metadata in session 9).
"""

from __future__ import annotations

import argparse
import contextlib
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


def _top(
    layers: int, batch: int, steps: int, *, packed: bool, graph_step: str = "off", precision: str = "float32"
) -> dict[str, Any]:
    """LoRA on the last ``layers`` of SmolLM2's 30 (TrainConfig.top_layers): the trunk's output is
    computed once per run (training) and kept by the engine (scoring, evaluation); float32 (or tf32
    matmuls), no dropout. Scoring and evaluation per row (packed_scoring off, the engine's GPU default
    until session 12): the "-ps" configs score packed."""
    train = {"prefix_sharing": True, "precision": precision, "batch_size": batch, "epochs": 3, "max_steps": steps,
             "lr": 1e-3, "checkpoint_every": 0, "micro_batch_tokens": 1 << 20, "dropout": 0.0, "top_layers": layers,
             "packed": packed, "graph_step": graph_step}  # fmt: skip
    return {"train": train, "engine": {"packed_scoring": False}}


# The session-5 measurements ran the two-pass step (prefix, then suffixes): packed=False reproduces
# them. top8p is the trainer's default since, one packed sequence a step (session 6: 13.3 s a round).
# b64: batches of 64 at half the steps (a step is launch-bound: ~the same cost at 64 rows).
CONFIGS.update(
    top4=_top(4, 32, 60, packed=False),
    top8=_top(8, 32, 60, packed=False),
    top8p=_top(8, 32, 60, packed=True),
    top16p=_top(16, 32, 60, packed=True),  # what a project of more than 50 labels adapts (wide_top_layers)
    # The fixed-shape step replayed from a CUDA graph (TrainConfig.graph_step "auto", opt-in). Session 10's
    # files round-time-graph-*-e64ce82.json name it "top8p"/"top16p" and the per-batch step "-eager" (the
    # options each row ran with are in the file); at aba57f2 "top8p" was the graph step too.
    **{f"top{n}p-graph": _top(n, 32, 60, packed=True, graph_step="auto") for n in (8, 16)},
    # ... with the steps' matmuls in TensorFloat-32 (TrainConfig.precision "tf32", session 11)
    **{f"top{n}p-graph-tf32": _top(n, 32, 60, packed=True, graph_step="auto", precision="tf32") for n in (8, 16)},
    # ... and scoring / evaluation with packed batches (HFEngine packed_scoring; the engine's GPU default
    # since session 12: round-time-ps-w1-128e624*.json)
    **{
        f"top{n}p-graph-tf32-ps": {
            **_top(n, 32, 60, packed=True, graph_step="auto", precision="tf32"),
            "engine": {"packed_scoring": True},
        }
        for n in (8, 16)
    },
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


def _split(
    train: list[tuple[str, str]], test: list[tuple[str, str]], args: argparse.Namespace
) -> tuple[dict[str, int], list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]], Any]:
    """(label index, the L labelled items, the candidates, the test items, the seeded generator)."""
    import numpy as np

    names = sorted({label for _, label in train})
    rng = np.random.default_rng(0)
    order = rng.permutation(len(train))
    labeled = [train[i] for i in order[: args.labels]]
    candidates = [train[i] for i in order[args.labels : args.labels + args.candidates]]
    return {n: i for i, n in enumerate(names)}, labeled, candidates, test[: args.test], rng


def _select(p: Any, labeled: list[tuple[str, str]], index: dict[str, int], rng: Any, args: argparse.Namespace) -> Any:
    """The committee strategy's batch over the scored candidates ([K, N, C])."""
    import numpy as np

    from acquisition.batch import committee_distribution, select_committee
    from predictor.embedding_proxy import fit_proxy
    from scoring.uncertainty import mean_distribution

    emb = rng.standard_normal((p.shape[1] + args.labels, 384)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    proxy = fit_proxy(emb[: args.labels], np.array([index[y] for _, y in labeled]), len(index))
    committee = committee_distribution(mean_distribution(p), proxy.predict_proba(emb[args.labels :]), args.k)
    return select_committee(committee, emb[args.labels :], emb[: args.labels], b=args.batch, random_share=0.15, rng=0)


def _accuracy(p: Any, test: list[tuple[str, str]], index: dict[str, int]) -> float:
    """The K members' mean distribution on the test items, % (one seed: a sanity check)."""
    import numpy as np

    from scoring.uncertainty import mean_distribution

    y_test = np.array([index.get(y, -1) for _, y in test])
    return round(100 * float(np.mean(mean_distribution(p).argmax(axis=1) == y_test)), 2)


def one_config(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from scoring.engines import AdapterRef
    from scoring.engines.hf import HFEngine
    from training.lora import TrainConfig

    if args.workers > 1:
        return _one_config_workers(name, args)
    cfg = CONFIGS[name]
    renderer, train, test = build(args.model, Path(args.data), args.prefix_tokens)
    index, labeled, candidates, test, rng = _split(train, test, args)
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
            path = _train_member(
                args.model,
                renderer,
                train_cfg,
                (
                    [t for t, _ in texts],
                    [index[y] for _, y in texts],
                    str(out / f"{tag}-{k}"),
                    k,
                    None if warm is None else warm[k],
                ),
            )
            refs.append(_ref(tag, k, path))
        return refs

    # The previous round's adapters (untimed): trained on the labels minus this round's batch.
    previous = train_all(labeled[: args.labels - args.batch], "previous", None)
    engine = HFEngine(args.model, **cfg["engine"])
    # Steady state: the previous round evaluated the same fixed test set (untimed here), which is
    # what lets an engine keep its trunk outputs (top-layer adapters) from one round to the next.
    engine.score(renderer, [t for t, _ in test], previous)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    scored = timed("score", lambda: engine.score(renderer, [t for t, _ in candidates], previous))
    timed("select", lambda: _select(scored.p, labeled, index, rng, args))
    refs = timed("train", lambda: train_all(labeled, "round", [r.path for r in previous]))
    evaluated = timed("evaluate", lambda: engine.score(renderer, [t for t, _ in test], refs))
    total = time.perf_counter() - started
    return _row(name, args, renderer, train_cfg, len(candidates), scored.tokens, timings, total) | {
        "test_accuracy": _accuracy(evaluated.p, test, index),
        "members": _members(refs),
        "gpu_peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20) if on_gpu else None,
        "gpu_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20) if on_gpu else None,
        "peak_rss_mib": round(_peak_rss_mib()),
    }


def _members(refs: list[Any]) -> list[dict[str, Any]]:
    """What each of the round's members recorded: which step ran (fixed_step: "graph", "eager" or
    None), its training seconds and its first and last losses (the graph and the eager step must agree)."""
    rows = []
    for ref in refs:
        info = json.loads((Path(ref.path) / "training.json").read_text())
        losses = info["losses"]
        rows.append({"fixed_step": info.get("fixed_step"), "seconds": info["seconds"], "steps": info["steps"],
                     "phases": info.get("phase_seconds"), "first_loss": losses[0],
                     "last_loss": losses[-1]})  # fmt: skip
    return rows


def _ref(tag: str, k: int, path: str) -> Any:
    from scoring.engines import AdapterRef

    return AdapterRef(f"{tag}-{k}", k + 1 + (100 if tag == "round" else 0), path)


def _row(
    name: str,
    args: argparse.Namespace,
    renderer: Any,
    train_cfg: Any,
    n_candidates: int,
    tokens: int,
    timings: dict[str, float],
    total: float,
) -> dict[str, Any]:
    import torch

    return {
        "config": name,
        "options": CONFIGS[name],
        "workers": args.workers,
        "eval": "sharded" if args.workers > 1 and getattr(args, "shard_eval", False) else "one task",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "prefix_tokens": len(renderer.prefix_ids),
        "mean_prompt_tokens": round(float(tokens) / max(1, n_candidates), 1),
        "seconds": timings,
        "round_seconds": round(total, 3),
        "train_steps_per_member": min(
            train_cfg.max_steps or 10**9,
            max(train_cfg.epochs * -(-args.labels // train_cfg.batch_size), train_cfg.min_steps),
        ),
    }


def _train_member(model: str, renderer: Any, train_cfg: Any, job: tuple[Any, ...]) -> str:
    """Member k of ``job`` = (texts, label indices, out dir, k, warm-start path or None), seed k; its
    path. A finished adapter already there is an error: nothing would be timed."""
    from training.lora import train_adapter

    texts, labels, out_dir, k, warm = job
    trained = train_adapter(
        model_dir=model,
        renderer=renderer,
        texts=texts,
        label_indices=labels,
        out_dir=out_dir,
        config=replace(train_cfg, seed=k),
        warm_from=warm,
    )
    if trained.reused:
        raise RuntimeError(f"{out_dir} was already trained: pass an empty --work")
    return str(trained.path)


def _serve(conn: Any, name: str, options: dict[str, Any]) -> None:
    """A warm gpu worker: one engine and the trainer, serving ("train" | "score" | "reset" | "memory",
    payload) messages until None, one at a time, as a Celery gpu-worker with concurrency 1 does."""
    import traceback

    import torch

    from scoring.engines.hf import HFEngine
    from training.lora import TrainConfig

    args = argparse.Namespace(**options)
    # The cores split between the workers, as separate worker processes on one machine would be
    # given them: W processes of all-cores thread pools oversubscribe the CPU (4x slower on 2 cores).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.workers))
    cfg = CONFIGS[name]
    renderer, _, _ = build(args.model, Path(args.data), args.prefix_tokens)
    engine = HFEngine(args.model, **cfg["engine"])
    train_cfg = replace(TrainConfig(), **cfg["train"])
    on_gpu = torch.cuda.is_available()
    while (message := conn.recv()) is not None:
        op, payload = message
        try:
            result: Any = None
            if op == "train":
                result = _train_member(args.model, renderer, train_cfg, payload)
            elif op == "score":
                scored = engine.score(renderer, payload[0], payload[1])
                result = (scored.p, int(scored.tokens))
            elif op == "reset" and on_gpu:
                torch.cuda.reset_peak_memory_stats()
            elif op == "memory":
                reserved = round(torch.cuda.max_memory_reserved() / 2**20) if on_gpu else None
                allocated = round(torch.cuda.max_memory_allocated() / 2**20) if on_gpu else None
                result = (allocated, reserved, round(_peak_rss_mib()))
            if on_gpu:
                torch.cuda.synchronize()
            conn.send(("ok", result))
        except Exception:  # the caller raises it with the worker's traceback
            conn.send(("error", traceback.format_exc()))


class _Workers:
    """W worker processes (spawned, like separate Celery workers) and a blocking fan-out over them."""

    def __init__(self, n: int, name: str, args: argparse.Namespace) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, name, vars(args)), daemon=True)
            proc.start()
            child.close()  # the worker's end lives in the worker alone: its death is an EOF here, not a hang
            self.conns.append(parent)
            self.procs.append(proc)

    def run(self, jobs: list[tuple[int, str, Any]]) -> list[Any]:
        """Each (worker, op, payload) in its worker, a worker's jobs in order, all workers at once (a
        worker gets its next job as soon as it answers); the results in the jobs' order."""
        from multiprocessing.connection import wait

        queues: dict[int, list[int]] = {}
        for j, (w, _, _) in enumerate(jobs):
            queues.setdefault(w, []).append(j)
        results: list[Any] = [None] * len(jobs)
        busy: dict[Any, tuple[int, int]] = {}  # connection -> (worker, job)
        for w, queue in queues.items():
            self.conns[w].send(jobs[queue[0]][1:])
            busy[self.conns[w]] = (w, queue.pop(0))
        while busy:
            for ready in wait(list(busy)):
                w, j = busy.pop(ready)
                conn = self.conns[w]
                try:
                    status, result = conn.recv()
                except EOFError:
                    raise RuntimeError(f"worker {w} died during {jobs[j][1]}") from None
                if status != "ok":
                    raise RuntimeError(f"worker {w}, {jobs[j][1]}:\n{result}")
                results[j] = result
                if queues[w]:
                    conn.send(jobs[queues[w][0]][1:])
                    busy[conn] = (w, queues[w].pop(0))
        return results

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs, strict=True):
            with contextlib.suppress(OSError):  # a worker that already died
                conn.send(None)
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()


def _one_config_workers(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The round of one_config, its training and scoring spread over ``args.workers`` warm workers."""
    import numpy as np

    renderer, train, test = build(args.model, Path(args.data), args.prefix_tokens)
    index, labeled, candidates, test, rng = _split(train, test, args)
    out = Path(args.work) / f"{name}-w{args.workers}"
    timings: dict[str, float] = {}
    n = args.workers
    pool = _Workers(n, name, args)
    try:

        def train_jobs(items: list[tuple[str, str]], tag: str, warm: list[str] | None) -> list[tuple[int, str, Any]]:
            texts, labels = [t for t, _ in items], [index[y] for _, y in items]
            return [
                (k % n, "train", (texts, labels, str(out / f"{tag}-{k}"), k, None if warm is None else warm[k]))
                for k in range(args.k)
            ]

        def score_jobs(items: list[tuple[str, str]], refs: list[Any]) -> list[tuple[int, str, Any]]:
            shards = np.array_split(np.arange(len(items)), n)
            return [(i, "score", ([items[j][0] for j in shard], refs)) for i, shard in enumerate(shards) if len(shard)]

        def scored(results: list[Any]) -> tuple[Any, int]:
            return np.concatenate([p for p, _ in results], axis=1), sum(t for _, t in results)

        def timed(step: str, fn: Any) -> Any:
            started = time.perf_counter()
            result = fn()
            timings[step] = round(time.perf_counter() - started, 3)
            return result

        # Untimed, as in the sequential run: the previous round's adapters and its evaluation of the
        # fixed test set (each worker keeps its own test shard's trunk outputs).
        paths = pool.run(train_jobs(labeled[: args.labels - args.batch], "previous", None))
        previous = [_ref("previous", k, path) for k, path in enumerate(paths)]

        def eval_jobs(refs: list[Any]) -> list[tuple[int, str, Any]]:
            return score_jobs(test, refs) if args.shard_eval else [(0, "score", ([t for t, _ in test], refs))]

        pool.run(eval_jobs(previous))
        pool.run([(w, "reset", None) for w in range(n)])
        started = time.perf_counter()
        p, tokens = timed("score", lambda: scored(pool.run(score_jobs(candidates, previous))))
        timed("select", lambda: _select(p, labeled, index, rng, args))
        paths = timed("train", lambda: pool.run(train_jobs(labeled, "round", [r.path for r in previous])))
        refs = [_ref("round", k, path) for k, path in enumerate(paths)]
        evaluated, _ = timed("evaluate", lambda: scored(pool.run(eval_jobs(refs))))
        total = time.perf_counter() - started
        memory = pool.run([(w, "memory", None) for w in range(n)])
    finally:
        pool.close()
    from training.lora import TrainConfig

    train_cfg = replace(TrainConfig(), **CONFIGS[name]["train"])
    gpu = [m for m in memory if m[1] is not None]
    return _row(name, args, renderer, train_cfg, len(candidates), tokens, timings, total) | {
        "test_accuracy": _accuracy(evaluated, test, index),
        # Per worker process, the largest (each worker is one process on the GPU).
        "gpu_peak_allocated_mib": max(m[0] for m in gpu) if gpu else None,
        "gpu_peak_reserved_mib": max(m[1] for m in gpu) if gpu else None,
        "gpu_peak_reserved_mib_all_workers": sum(m[1] for m in gpu) if gpu else None,
        "peak_rss_mib": max(m[2] for m in memory),
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


def _workers_tag(row: dict[str, Any]) -> str:
    """ ", 2 workers" (evaluation one task, as in the app) or ", 2 workers, evaluation sharded" (rows
    from before the "eval" field were all sharded)."""
    if row.get("workers", 1) <= 1:
        return ""
    sharded = row.get("eval", "sharded") == "sharded"
    return f", {row['workers']} workers" + (", evaluation sharded" if sharded else "")


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
            f"| {r['config']}{_workers_tag(r)} | {r['device']} | {r['mean_prompt_tokens']:.0f} | {steps}"
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
    parser.add_argument("--workers", type=int, default=1, help="gpu worker processes the round runs on (see above)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a configuration may take")
    parser.add_argument("--shard-eval", action="store_true", help="with --workers: evaluate in W shards too")
    parser.add_argument("--prefix-tokens", type=int, default=900)
    parser.add_argument("--configs", default="before,after")
    parser.add_argument("--out", default="var/round-time")
    parser.add_argument("--work", default="")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # subprocess: one configuration
    parser.add_argument(
        "--report", default="", help="print the table of an earlier round-time.json (or its .gz) and stop"
    )
    args = parser.parse_args()
    if args.report:
        from rawfiles import open_raw

        with open_raw(args.report) as f:
            record = json.load(f)
        print(f"commit {record['commit']}, {record['time']}, options: {' '.join(record['argv'])}\n")
        print(table(record["rows"]))
        return
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    args.work = args.work or str(Path(args.out) / "work")
    if args.one:
        print(json.dumps(one_config(args.one, args)))
        return
    rows = []
    for name in args.configs.split(","):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--one", name]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{name} did not finish in {args.timeout} s", file=sys.stderr)
            continue
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
