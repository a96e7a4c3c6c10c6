"""Does a round's training under-fit small label sets? One adapter trained from scratch on N random
labels of a shared set with the simulation's prompt (the project defaults: one instruction line, the
label codes, no descriptions, no few-shot) for several step counts, then scored on test items.

    python bench/steps_probe.py --model DIR --data ../shared/data/snips --labels 100 --steps 12,36 \
        [--top-layers 8] [--test 300] [--seeds 0] [--out OUT.json]

The simulation's training config (bench/gpu_sim.sh: 3 epochs, batch 32, at most 48 steps) gives a
round with 100 labels 12 steps; warm starts carry earlier rounds, but a project starts at 50 labels
with 6. Prints one table (steps, final training loss, test accuracy, seconds); the JSON holds the
options and the git commit.

``--mix`` also fits the cheap proxy (predictor.embedding_proxy: logistic regression on MiniLM embeddings, as the
selection committee's extra member) on the same labels and reports its test accuracy and that of the
LLM and proxy distributions averaged ((p_llm + p_proxy) / 2): would the proxy help as a member of
the predicting ensemble, not only of the selecting committee?
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
    parser.add_argument("--mix", action="store_true", help="also the proxy and the LLM + proxy average")
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
    embed = _embedder() if args.mix else None
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
            if embed is not None:
                rows[-1].update(_mix(embed, picked, probe, index, scored.p[0], y))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{data.name}, {args.labels} labels, top_layers {args.top_layers}, {args.test} test items\n")
    mixed = ["proxy_accuracy", "mix_accuracy"] if args.mix else []
    print("| seed | steps | final train loss | test acc % | " + "".join(f"{m} % | " for m in mixed) + "train s |")
    print("|---|---|---|---|" + "---|" * len(mixed) + "---|")
    for r in rows:
        cells = [r["seed"], r["steps"], r["final_loss"], r["accuracy"], *(r[m] for m in mixed), r["seconds"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if args.out:
        record = {"commit": commit(), "argv": sys.argv[1:], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        Path(args.out).write_text(json.dumps({**record, "rows": rows}, indent=1))


def _embedder() -> Any:
    from scoring.bundled import encoder_path
    from scoring.cache import text_hash
    from scoring.embeddings import EmbeddingCache

    cache = EmbeddingCache(ROOT / "var" / "embeddings", encoder_path(os.environ.get("ENCODER_DIR") or None))
    return lambda texts: cache.embed(texts, [text_hash(t) for t in texts])


def _mix(
    embed: Any, picked: list[tuple[str, str]], probe: list[tuple[str, str]], index: dict[str, int], p_llm: Any, y: Any
) -> dict[str, float]:
    """The proxy on the same labels, and the LLM + proxy average, on the same test items."""
    import numpy as np

    from predictor.embedding_proxy import fit_proxy

    proxy = fit_proxy(embed([t for t, _ in picked]), np.array([index[label] for _, label in picked]), len(index))
    p_proxy = proxy.predict_proba(embed([t for t, _ in probe]))
    return {
        "proxy_accuracy": round(100 * float(np.mean(p_proxy.argmax(axis=1) == y)), 1),
        "mix_accuracy": round(100 * float(np.mean((np.asarray(p_llm) + p_proxy).argmax(axis=1) == y)), 1),
    }


if __name__ == "__main__":
    main()
