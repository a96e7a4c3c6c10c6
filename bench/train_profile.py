"""Where one training step's time goes (torch.profiler), and the hf engine's scoring rate by rows
per forward: the evidence behind the trainer's and engine's GPU settings.

    python bench/train_profile.py --model DIR [--data ../shared/data/trec] [--prefix-tokens 900] [--out OUT]

Trains SmolLM2 + LoRA for a few steps per configuration (batch size, prefix sharing, precision),
printing wall seconds per step; profiles one configuration's steps (top ops by self CPU and by
device time); then scores 2,000 items with K=2 random adapters at several rows-per-forward.
OUT/train-profile.json keeps the numbers with the git commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def steps_per_second(args: argparse.Namespace, renderer: Any, texts: list[str], labels: list[int], **train: Any) -> Any:
    import torch

    from training.lora import TrainConfig, _render, _Run

    config = replace(TrainConfig(), checkpoint_every=0, micro_batch_tokens=1 << 20, **train)
    examples = _render(renderer, texts, labels)
    run = _Run(Path(args.model), renderer, examples, Path(args.work) / "p", config, None, "x", "cuda")
    model = run._model(None)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    model.train()
    for step in range(3):
        run._step(model, optimizer, params, step)  # warm-up (allocator, kernels)
    torch.cuda.synchronize()
    started = time.perf_counter()
    n = args.steps
    for step in range(n):
        run._step(model, optimizer, params, step)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / n, model, optimizer, params, run


def main() -> None:
    import numpy as np
    import torch
    from round_time import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "trec"))
    parser.add_argument("--prefix-tokens", type=int, default=900)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="var/train-profile")
    parser.add_argument("--work", default="/tmp/train-profile")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    renderer, train, _ = build(args.model, Path(args.data), args.prefix_tokens)
    names = sorted({y for _, y in train})
    texts, labels = [t for t, _ in train[:512]], [names.index(y) for _, y in train[:512]]
    rows = []
    for cfg in (
        {"batch_size": 32, "prefix_sharing": True, "precision": "auto"},
        {"batch_size": 32, "prefix_sharing": True, "precision": "float32"},
        {"batch_size": 128, "prefix_sharing": True, "precision": "auto"},
        {"batch_size": 16, "prefix_sharing": False, "precision": "float32", "gradient_checkpointing": False},
        {"batch_size": 32, "prefix_sharing": True, "precision": "auto", "dropout": 0.0},
    ):
        seconds, *_ = steps_per_second(args, renderer, texts, labels, **cfg)
        rows.append(
            {**cfg, "s_per_step": round(seconds, 4), "peak_alloc_mib": round(torch.cuda.max_memory_allocated() / 2**20)}
        )
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    from torch.profiler import ProfilerActivity, profile

    profiled: Any = steps_per_second(args, renderer, texts, labels, batch_size=32)
    model, optimizer, params, run_step = profiled[1], profiled[2], profiled[3], profiled[4]._step
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for step in range(5):
            run_step(model, optimizer, params, step)
        torch.cuda.synchronize()
    cpu_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    dev_table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)
    print(cpu_table[-6000:])
    print(dev_table[-3000:])
    (out / "profile-cpu.txt").write_text(cpu_table)
    (out / "profile-device.txt").write_text(dev_table)
    del model, optimizer, params, run_step, profiled
    torch.cuda.empty_cache()
    from scoring.engines import AdapterRef
    from scoring.engines.hf import HFEngine

    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    engine_rows = []
    adapters = []
    for k in range(2):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        m = get_peft_model(
            AutoModelForCausalLM.from_pretrained(args.model), LoraConfig(r=8, target_modules="all-linear")
        )
        m.save_pretrained(f"{args.work}/a{k}")
        adapters.append(AdapterRef(f"a{k}", k + 1, f"{args.work}/a{k}"))
    items = [t for t, _ in train[:2000]]
    for batch, tokens in ((64, 262144), (256, 262144), (256, 65536), (1024, 1 << 20)):
        engine = HFEngine(args.model, batch_size=batch, max_batch_tokens=tokens)
        engine.score(renderer, items[:200], adapters)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        engine.score(renderer, items, adapters)
        torch.cuda.synchronize()
        engine_rows.append(
            {
                "rows": batch,
                "max_batch_tokens": tokens,
                "items_per_s": round(2 * len(items) / (time.perf_counter() - started)),
                "peak_alloc_mib": round(torch.cuda.max_memory_allocated() / 2**20),
            }
        )
        print(engine_rows[-1], flush=True)
        del engine
        torch.cuda.empty_cache()
    record = {
        "commit": os.environ.get("ALANN_COMMIT", ""),
        "prefix_tokens": len(renderer.prefix_ids),
        "train": rows,
        "engine": engine_rows,
    }
    (out / "train-profile.json").write_text(json.dumps(record, indent=1))
    print(np.__version__)


if __name__ == "__main__":
    main()
