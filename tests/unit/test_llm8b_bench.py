"""bench/llm8b_bench.py, the 8B stretch of issue 35: the shape is Llama-3-8B's, the MFU is the stated
formula on the stated tokens, the prompts and adapter slots are what the report says they are, the
vLLM path's accounting on a fake engine (vLLM cannot run here), and, on the tiny shape, the whole
build → adapters → score path with the hf engine. The 8B run itself is bench/gpu_8b.sh on the H200."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.vllm_fakes import FakeMetric, fake_outputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import llm8b_bench as lb  # noqa: E402


def test_the_shape_has_llama3_8b_weight_count() -> None:
    counts = lb.param_counts(lb.SHAPES["llama3-8b"])
    assert counts["total"] == 8_030_261_248  # Meta-Llama-3-8B's published parameter count
    assert counts["per_token"] == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert counts["embedding"] == counts["lm_head"] == 128_256 * 4096


def test_the_vocab_is_kept_when_the_tokenizer_fits_else_the_tokenizers() -> None:
    assert lb.decide_vocab(128_256, 49_152)[0] == 128_256
    size, why = lb.decide_vocab(512, 49_152)
    assert size == 49_152 and "tokenizer's length" in why
    assert lb.decide_vocab(128_256, None)[0] == 128_256


def test_peak_comes_from_the_gpu_table_or_the_override() -> None:
    assert lb.peak_flops("NVIDIA H200", None)[0] == 989e12
    assert lb.peak_flops("NVIDIA H100 PCIe", None)[0] == 756e12
    assert lb.peak_flops("NVIDIA H200", 500.0) == (500e12, "--peak-tflops 500")
    assert lb.peak_flops("cpu", None)[0] is None


def test_mfu_counts_all_tokens_and_computed_tokens_apart() -> None:
    counts = lb.Counts(requests=1000, prompt_tokens=256_000, wall_s=10.0, cached_tokens=224_000 - 14_336)
    fig = lb.figures(counts, n_params=7_000_000_000, peak=1e15)
    computed = 256_000 - (224_000 - 14_336)
    assert fig["computed_tokens"] == computed
    assert fig["prefix_cache_hit_share"] == pytest.approx((224_000 - 14_336) / 256_000)
    assert fig["mfu"]["on_all_prompt_tokens"] == pytest.approx(2 * 7e9 * 25_600 / 1e15)
    assert fig["mfu"]["on_computed_tokens"] == pytest.approx(2 * 7e9 * computed / 10.0 / 1e15)
    assert lb.figures(counts, n_params=7, peak=None)["mfu"]["on_computed_tokens"] is None
    with pytest.raises(lb.BenchInputError):
        lb.figures(lb.Counts(1, 1, 0.0, None), n_params=7, peak=1.0)


def test_prompts_have_exact_lengths_and_one_shared_prefix() -> None:
    prefix, suffixes = lb.make_prompts(50, 256, 224, (256, 49_152), np.random.default_rng(0))
    assert len(prefix) == 224 and len(suffixes) == 50 and {len(s) for s in suffixes} == {32}
    assert min(min(s) for s in suffixes) >= 256 and max(max(s) for s in suffixes) < 49_152
    assert len({tuple(s) for s in suffixes}) == 50
    with pytest.raises(lb.BenchInputError):
        lb.make_prompts(1, 256, 256, (256, 1000), np.random.default_rng(0))


def test_spread_mixes_adapters_and_ensemble_is_adapter_major() -> None:
    assert lb.adapter_slots(6, 4, "spread") == [0, 1, 2, 3, 0, 1]
    assert lb.adapter_slots(2, 3, "ensemble") == [0, 0, 1, 1, 2, 2]
    assert lb.adapter_slots(3, 0, "spread") == [None, None, None]


class FakeLLM:
    """generate() with one LoRA request per prompt; the prefix-cache counters as vLLM's metrics."""

    def __init__(self, hit_per_request: int) -> None:
        self.queries = self.hits = 0.0
        self.hit_per_request = hit_per_request
        self.loras: list[Any] = []

    def get_metrics(self) -> list[FakeMetric]:
        return [FakeMetric("vllm:prefix_cache_queries", self.queries), FakeMetric("vllm:prefix_cache_hits", self.hits)]

    def generate(self, prompts: list[dict[str, list[int]]], params: Any, *, lora_request: list[Any], **_: Any) -> Any:
        self.loras = lora_request
        self.queries += sum(len(p["prompt_token_ids"]) for p in prompts)
        self.hits += self.hit_per_request * len(prompts)
        logp = np.log(np.full((len(prompts), len(params.logprob_token_ids)), 0.2))
        return fake_outputs(logp, list(params.logprob_token_ids), sampled=7, flat=True)


def test_the_vllm_path_sends_each_request_its_adapter_and_counts_the_cache_hits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scoring.engines.vllm import VLLMEngine

    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)  # type: ignore[attr-defined]
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, int_id, path: (name, int_id, path)  # type: ignore[attr-defined]
    for name, module in (("vllm", vllm), ("vllm.lora", types.ModuleType("vllm.lora")), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    runner = object.__new__(lb.VLLMRunner)
    runner.engine = object.__new__(VLLMEngine)
    runner.engine.llm = FakeLLM(hit_per_request=224)
    runner.adapter_dirs = ["/a/0", "/a/1"]

    requests = [lb.Request(list(range(256)), a) for a in lb.adapter_slots(4, 2, "spread")]
    logp, counts = runner.run(requests, [300, 301, 302])

    assert [lora[1] for lora in runner.engine.llm.loras] == [1, 2, 1, 2]  # ids 1..K, one per adapter
    assert counts == lb.Counts(requests=4, prompt_tokens=1024, wall_s=counts.wall_s, cached_tokens=4 * 224.0)
    assert logp.shape == (4, 3) and np.allclose(np.exp(logp), 0.2)


@pytest.mark.slow
def test_build_adapters_and_score_the_tiny_shape_with_hf(smollm2_dir: Path, tmp_path: Path) -> None:
    model, adapters, out = tmp_path / "model", tmp_path / "adapters", tmp_path / "report.json"
    assert lb.main(["build", "--out", str(model), "--config", "tiny", "--tokenizer", str(smollm2_dir)]) == 0
    build = json.loads((model / "build.json").read_text())
    assert build["vocab"]["size"] == 128_256 and build["logits"]["finite"]
    assert build["params_in_model"] == build["params"]["total"]  # the counted weights are the model's

    assert lb.main(["adapters", "--model", str(model), "--out", str(adapters), "--k", "2"]) == 0
    argv = ["score", "--engine", "hf", "--model", str(model), "--adapters", str(adapters / "a0"), str(adapters / "a1")]
    argv += ["--n", "10", "--prompt-tokens", "32", "--prefix-tokens", "0,16", "--layout", "ensemble"]
    argv += ["--chunk", "10", "--warmup", "2", "--base-n", "4", "--peak-tflops", "0.5", "--out", str(out)]
    assert lb.main(argv) == 0

    report = json.loads(out.read_text())
    assert report["status"] == "done" and report["gpu"] and report["versions"]["peft"] != "not installed"
    assert [w["name"] for w in report["workloads"]] == ["k2-prefix0", "k2-prefix16", "base-prefix0"]
    n_params = report["params"]["per_token"]
    assert n_params == lb.param_counts(lb.SHAPES["tiny"])["per_token"] == report["mfu_definition"]["n_params"]
    for workload in report["workloads"][:2]:
        assert workload["requests"] == 20 and workload["prompt_tokens"] == 20 * 32  # 10 items x 2 adapters
        assert workload["labels"]["finite_share"] == 1.0
        assert workload["labels"]["mean_abs_diff_from_adapter0"] > 0  # random B: the adapters are not no-ops
        assert workload["prefix_cache_hit_share"] is None  # hf has no prefix cache: every token computed
        tps = workload["prompt_tokens"] / workload["wall_s"]
        assert workload["computed_tokens_per_s"] == pytest.approx(tps, rel=1e-3)
        assert workload["mfu"]["on_computed_tokens"] == pytest.approx(2 * n_params * tps / 0.5e12, rel=1e-3)
    assert report["workloads"][2]["requests"] == 4
