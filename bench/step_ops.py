"""How many operators one training step dispatches (torch.profiler on the CPU), per trainer
configuration: on a GPU each is at least one kernel launch, and a step of a 135M model is bound by
launches, not arithmetic (bench/RESULTS.md). The count, unlike a CPU timing, carries over to the GPU.

    python bench/step_ops.py --model DIR [--data ../shared/data/trec] [--prefix-tokens 900] [--out OUT.json]

Configurations: all 30 layers with the shared prefix ("after"), LoRA in the top 8 with the two-pass
step ("top8"), and packed ("top8p"); batch 32, float32, no dropout, as bench/round_time.py. Prints
one table: operators per step (all, and the aten ops that do arithmetic on tensors), CPU seconds
per step, and the compute ops again with AdamW's multi-tensor (foreach) step, which is what CUDA
runs by default (on the CPU AdamW loops over the LoRA tensors one by one). The JSON keeps the
numbers with the git commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CONFIGS: dict[str, dict[str, Any]] = {
    "after": {"top_layers": 0},
    "top8": {"top_layers": 8, "packed": False},
    "top8p": {"top_layers": 8, "packed": True},
}
# Operators that only describe or re-view a tensor (no kernel on a GPU).
VIEWS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::expand", "aten::slice",
         "aten::select", "aten::transpose", "aten::t", "aten::unsqueeze", "aten::squeeze", "aten::permute",
         "aten::detach", "aten::alias", "aten::empty", "aten::empty_strided", "aten::lift_fresh", "aten::size",
         "aten::stride", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::resolve_conj",
         "aten::resolve_neg", "aten::contiguous", "aten::_unsafe_view", "aten::split", "aten::chunk",
         "aten::unbind", "aten::narrow", "aten::numpy_T", "aten::result_type"}  # fmt: skip


def count_step(config_name: str, args: argparse.Namespace, renderer: Any, texts: list[str], labels: list[int]) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from training.lora import TrainConfig, _render, _Run

    config = replace(
        TrainConfig(), checkpoint_every=0, micro_batch_tokens=1 << 20, batch_size=32, dropout=0.0,
        precision="float32", lr=1e-3, **CONFIGS[config_name],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        run = _Run(
            Path(args.model), renderer, _render(renderer, texts, labels), Path(tmp) / "a", config, None, "x", "cpu"
        )
        model = run._model(None)
        params = [p for p in model.parameters() if p.requires_grad]
        model.train()
        run._split = run._split_stack(model)
        out: dict[str, Any] = {"config": config_name, "trainable_tensors": len(params)}
        # The trainer's AdamW(foreach=None) steps tensor by tensor on the CPU, but with the
        # multi-tensor (foreach) kernels on CUDA, PyTorch's default there: both counts, the second
        # being what a GPU step dispatches.
        for key, foreach in (("", None), ("_foreach", True)):
            optimizer = torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
            run._step(model, optimizer, params, 0)  # warm-up
            started = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run._step(model, optimizer, params, 1)
            seconds = time.perf_counter() - started
            # Outermost operator calls only (an aten op called inside another is not another
            # dispatch); the backward's ops sit under autograd-engine events, not an enclosing op.
            events = [e for e in prof.events() if e.name.startswith("aten::") and not _inside_op(e)]
            compute = [e for e in events if e.name not in VIEWS]
            out.update({f"ops{key}": len(events), f"compute_ops{key}": len(compute)})
            out[f"cpu_seconds{key}"] = round(seconds, 2)
    return out


def _inside_op(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def main() -> None:
    import torch
    from round_time import build

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "trec"))
    parser.add_argument("--prefix-tokens", type=int, default=900)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    renderer, train, _ = build(args.model, Path(args.data), args.prefix_tokens)
    names = sorted({label for _, label in train})
    picked = train[:64]
    texts, labels = [t for t, _ in picked], [names.index(label) for _, label in picked]
    rows = [count_step(name, args, renderer, texts, labels) for name in args.configs.split(",")]
    print(f"\none training step, batch 32, {len(renderer.prefix_ids)}-token prefix, CPU\n")
    print(
        "| config | aten ops | of them compute (not views) | CPU s | compute ops, foreach AdamW (as on CUDA) |"
        "\n|---|---|---|---|---|"
    )
    for r in rows:
        print(f"| {r['config']} | {r['ops']} | {r['compute_ops']} | {r['cpu_seconds']} | {r['compute_ops_foreach']} |")
    if args.out:
        from steps_probe import commit

        record = {"commit": commit(), "argv": sys.argv[1:], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        Path(args.out).write_text(json.dumps({**record, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
