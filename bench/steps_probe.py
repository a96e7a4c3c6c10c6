"""Does a round's training under-fit small label sets? One adapter trained from scratch on N random
labels of a shared set with the simulation's prompt (the project defaults: one instruction line, the
label codes, no descriptions, no few-shot) for several step counts, then scored on test items.

    python bench/steps_probe.py --model DIR --data ../shared/data/snips --labels 100 --steps 12,36 \
        [--top-layers 8] [--test 300] [--seeds 0] [--out OUT.json]

The simulation's training config (bench/gpu_sim.sh: 3 epochs, batch 32, at most 48 steps) gives a
round with 100 labels 12 steps; warm starts carry earlier rounds, but a project starts at 50 labels
with 6. Prints one table (steps, final training loss, test accuracy, seconds); the JSON holds the
options and the git commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def commit() -> str:
    if os.environ.get("ALANN_COMMIT"):
        return os.environ["ALANN_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--labels", type=int, default=100)
    parser.add_argument("--steps", default="12,36")
    parser.add_argument("--top-layers", type=int, default=8)
    parser.add_argument("--test", type=int, default=300)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    import numpy as np
    from transformers import AutoTokenizer

    from annotate.simulation.proxy_loop import read_rows
    from scoring.engines import AdapterRef
    from scoring.engines.hf import HFEngine
    from scoring.labels import suggest_codes
    from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec
    from training.lora import TrainConfig, train_adapter

    data = Path(args.data)
    train, test = read_rows(data / "train.csv"), read_rows(data / "test.csv")
    names = sorted({label for _, label in train})
    index = {n: i for i, n in enumerate(names)}
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    codes = suggest_codes(tokenizer, names)
    spec = PromptSpec(
        instructions="Classify the text into exactly one label.",
        labels=tuple(LabelSpec(n, "", c) for n, c in zip(names, codes, strict=True)),
        item_template="Text: {text}\nLabel:",
    )
    renderer = PromptRenderer(tokenizer, spec, model_revision="probe", max_context=1024)
    engine = HFEngine(args.model)
    rows: list[dict[str, Any]] = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        rng = np.random.default_rng(seed)
        picked = [train[i] for i in rng.permutation(len(train))[: args.labels]]
        probe = [test[i] for i in rng.permutation(len(test))[: args.test]]
        y = np.array([index[label] for _, label in probe])
        for steps in [int(s) for s in args.steps.split(",")]:
            config = replace(
                TrainConfig(),
                epochs=1000,
                max_steps=steps,
                batch_size=32,
                lr=args.lr,
                dropout=0.0,
                checkpoint_every=0,
                micro_batch_tokens=1 << 20,
                top_layers=args.top_layers,
                seed=seed,
            )
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                trained = train_adapter(
                    model_dir=args.model,
                    renderer=renderer,
                    texts=[t for t, _ in picked],
                    label_indices=[index[label] for _, label in picked],
                    out_dir=Path(tmp) / "adapter",
                    config=config,
                )
                seconds = time.perf_counter() - started
                ref = AdapterRef(f"probe-{seed}-{steps}", 1 + len(rows), trained.path)
                scored = engine.score(renderer, [t for t, _ in probe], [ref])
            accuracy = float(np.mean(scored.p[0].argmax(axis=1) == y))
            rows.append(
                {
                    "seed": seed,
                    "steps": steps,
                    "final_loss": round(trained.final_loss, 4),
                    "accuracy": round(100 * accuracy, 1),
                    "seconds": round(seconds, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{data.name}, {args.labels} labels, top_layers {args.top_layers}, {args.test} test items\n")
    print("| seed | steps | final train loss | test acc % | train s |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['steps']} | {r['final_loss']} | {r['accuracy']} | {r['seconds']} |")
    if args.out:
        record = {"commit": commit(), "argv": sys.argv[1:], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        Path(args.out).write_text(json.dumps({**record, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
