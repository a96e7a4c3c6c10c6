"""The scoring bench's own bookkeeping: GPU busy share from nvidia-smi samples (the number that says
whether the host or the GPU limits vLLM) and the selection of vLLM configurations."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import score_bench  # noqa: E402


def stamp(second: float) -> str:
    return datetime.fromtimestamp(1_800_000_000 + second).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_gpu_busy_is_the_mean_of_samples_inside_the_window(tmp_path: Path) -> None:
    samples = tmp_path / "gpu.csv"
    lines = [f"{stamp(t)}, {u}" for t, u in [(0.0, 100), (1.0, 20), (2.0, 40), (3.0, 90), (9.0, 100)]]
    samples.write_text("\n".join([*lines, "garbage line", f"{stamp(2.5)}, [N/A]"]) + "\n")
    sampler = score_bench.GpuSampler.__new__(score_bench.GpuSampler)
    sampler.path, sampler.proc = samples, None
    base = 1_800_000_000
    assert sampler.mean_between(base + 0.5, base + 3.5) == pytest.approx((20 + 40 + 90) / 3)
    assert sampler.mean_between(base + 4, base + 8) is None  # no sample in the window


def test_vllm_configs_follow_the_option_and_k() -> None:
    cfg = {"adapters": 4, "vllm_configs": ["k", "base"]}
    assert score_bench.vllm_configs(cfg) == [("vllm K=4 mixed", 4), ("vllm base", 0)]
    assert score_bench.vllm_configs({"adapters": 0, "vllm_configs": ["base", "1"]}) == [("vllm base", 0)]
