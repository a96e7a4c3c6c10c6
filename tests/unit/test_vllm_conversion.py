"""The vLLM engine's pure helpers on CPU (vLLM is not installed here): request building, and the
conversion of its outputs, shaped like vLLM's (tests/vllm_fakes.py), into the label distribution and
label mass the rest of the loop uses. The parity of the same conversion with the hf engine's numbers:
tests/integration/test_hf_engine.py."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from scoring.engines.base import AdapterRef, distribution_from_logprobs
from scoring.engines.vllm import (
    build_requests,
    chunked_label_logprobs,
    engine_core_in_process,
    label_chunks,
    outputs_to_label_logprobs,
    prefix_cache_counts,
)
from tests.vllm_fakes import FakeMetric, fake_output, fake_outputs

K, N, C = 4, 50, 128  # a K=4 ensemble, a shard of 50 items, the most labels vLLM reports (VLLM_MAX_LABELS)
VOCAB = 49_152  # SmolLM2's vocabulary


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeLoRARequest:
    def __init__(self, name: str, int_id: int, path: str) -> None:
        self.name, self.int_id, self.path = name, int_id, path


def install_fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm.SamplingParams and vllm.lora.request.LoRARequest as plain records, for score() without vLLM."""
    import sys
    import types

    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest  # type: ignore[attr-defined]
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)


def realistic_scores(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(full-vocabulary label logprobs [K,N,C], the renormalised distribution, log label mass): most
    rows put most mass on the labels, some almost none (1e-30), some so little that exp() underflows
    (logprobs near -800: still a finite p), a few labels exactly none (-inf), and one row no label at
    all (every logprob -inf)."""
    p = rng.dirichlet(np.full(C, 0.3), size=(K, N))
    p[rng.random((K, N, C)) < 0.05] = 0.0  # -inf logprobs: masked or underflowed tokens
    p /= p.sum(axis=-1, keepdims=True)
    log_mass = np.log(rng.uniform(0.2, 1.0, size=(K, N)))
    log_mass[:, :5] = np.log(1e-30)  # the model answers with something else: the review bucket's items
    log_mass[:, 5:8] = -800.0
    log_mass[0, 3] = -np.inf
    with np.errstate(divide="ignore"):
        logp = np.log(p) + log_mass[..., None]
    return logp, p, log_mass


@pytest.mark.parametrize("flat", [True, False])
def test_outputs_become_label_distributions_and_mass(flat: bool) -> None:
    rng = np.random.default_rng(17)
    logp, p_true, log_mass = realistic_scores(rng)
    label_ids = [int(t) for t in rng.choice(VOCAB, size=C, replace=False)]
    outputs = fake_outputs(logp, label_ids, sampled=VOCAB - 1, flat=flat)  # sampled: not a label

    label_logp = outputs_to_label_logprobs(outputs, label_ids, N)
    assert label_logp.shape == (K, N, C) and label_logp.dtype == np.float32
    np.testing.assert_array_equal(label_logp, logp.astype(np.float32))  # adapter-major, label order kept
    p, mass = distribution_from_logprobs(label_logp)

    assert np.isfinite(p).all() and np.isfinite(mass).all()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(mass, np.exp(log_mass), rtol=1e-4)  # 0 where exp() underflows
    assert (mass <= 1.0 + 1e-5).all()
    scored = np.isfinite(log_mass)
    np.testing.assert_allclose(p[scored], p_true[scored], atol=1e-5)  # renormalised, also at logprob -800
    assert (p[np.isneginf(logp) & scored[..., None]] == 0).all()
    np.testing.assert_allclose(p[0, 3], 1.0 / C)  # no mass on any label: uniform, not NaN
    assert mass[0, 3] == 0.0


def test_a_sampled_label_reported_twice_counts_once() -> None:
    """The sampled token comes first in vLLM's list; when it is a label it is there twice."""
    outputs = [fake_output([8, 7, 8], [-0.2, -1.8, -0.2], flat=True)]
    p, mass = distribution_from_logprobs(outputs_to_label_logprobs(outputs, [7, 8], 1))
    np.testing.assert_allclose(mass, [[np.exp(-1.8) + np.exp(-0.2)]], rtol=1e-6)
    np.testing.assert_allclose(p[0, 0], [np.exp(-1.8), np.exp(-0.2)] / mass[0, 0], rtol=1e-6)


@pytest.mark.parametrize("flat", [True, False])
def test_a_label_vllm_did_not_report_is_an_error(flat: bool) -> None:
    """vLLM returns the requested ids, not a top-k: a missing label means a wrong request, never p=0."""
    outputs = [fake_output([7, 8, 9], [-1.0, -2.0, -3.0], flat), fake_output([7, 9], [-1.0, -3.0], flat)]
    with pytest.raises(RuntimeError, match="no logprob for some label tokens in 1 requests"):
        outputs_to_label_logprobs(outputs, [7, 8, 9], 1)


def test_outputs_that_do_not_split_into_adapters_are_an_error() -> None:
    outputs = [fake_output([7], [-1.0], flat=True)] * 5
    with pytest.raises(ValueError, match="5 outputs do not split into adapters of 2 items"):
        outputs_to_label_logprobs(outputs, [7], 2)


def test_build_requests_is_adapter_major_with_matching_lora_list() -> None:
    adapters = [AdapterRef("a", 1, "/a"), AdapterRef("b", 2, "/b")]
    prompts, loras = build_requests([1, 2], [[3], [4, 5], [6]], adapters, lambda *args: args)
    assert [p["prompt_token_ids"] for p in prompts] == [[1, 2, 3], [1, 2, 4, 5], [1, 2, 6]] * 2
    assert loras == [("a", 1, "/a")] * 3 + [("b", 2, "/b")] * 3
    base_prompts, base_loras = build_requests([1], [[2]], [], None)
    assert base_prompts == [{"prompt_token_ids": [1, 2]}] and base_loras is None


def test_prefix_cache_counts_reads_vllm_metrics() -> None:
    metrics = [
        FakeMetric("vllm:prefix_cache_queries", 1000.0),
        FakeMetric("vllm:prefix_cache_hits", 880.0),
        FakeMetric("vllm:external_prefix_cache_hits", 5.0),
        FakeMetric("vllm:num_requests_running", 3.0),
    ]
    assert prefix_cache_counts(metrics) == (1000.0, 880.0)


def test_one_request_never_asks_for_more_label_ids_than_vllm_reports() -> None:
    """vLLM returns at most 128 requested logprobs per request: score() asks in chunks, and a request
    built with more ids is a clear error before vLLM sees it."""
    from scoring.engines.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # no engine start: the check needs none
    with pytest.raises(ValueError, match="151 label ids in one request: this engine asks for at most 128"):
        engine._sampling_params(list(range(151)))


def test_label_chunks_keep_label_order_within_the_limit() -> None:
    assert label_chunks(list(range(151)), 128) == [list(range(128)), list(range(128, 151))]
    assert label_chunks([5, 3], 128) == [[5, 3]]
    assert label_chunks(list(range(256)), 128)[1][-1] == 255
    with pytest.raises(ValueError, match="at least one label id"):
        label_chunks([1], 0)


@pytest.mark.parametrize("flat", [True, False])
def test_a_label_set_over_the_limit_joins_its_chunks_exactly(flat: bool) -> None:
    """CLINC150's 151 labels: two requests per (adapter, item), chunk-major; the joined columns are
    the full-vocabulary logprobs in label order, so p and the label mass are those of one request."""
    rng = np.random.default_rng(5)
    labels = 151
    label_ids = [int(t) for t in rng.choice(VOCAB, size=labels, replace=False)]
    p = rng.dirichlet(np.full(labels, 0.5), size=(2, 7))
    logp = np.log(p) + np.log(rng.uniform(0.3, 1.0, size=(2, 7)))[..., None]
    chunks = label_chunks(label_ids, 128)
    outputs = [
        out
        for c, chunk in enumerate(chunks)
        for out in fake_outputs(logp[..., c * 128 : c * 128 + len(chunk)], chunk, sampled=VOCAB - 1, flat=flat)
    ]
    joined = chunked_label_logprobs(outputs, chunks, 7)
    np.testing.assert_array_equal(joined, logp.astype(np.float32))
    p_joined, mass = distribution_from_logprobs(joined)
    np.testing.assert_allclose(p_joined, p, atol=1e-5)
    np.testing.assert_allclose(mass, np.exp(logp).sum(axis=-1), rtol=1e-5)
    with pytest.raises(ValueError, match="do not split into 2 label chunks"):
        chunked_label_logprobs(outputs[:-1], chunks, 7)


def test_the_engine_core_runs_in_process_in_a_daemonic_worker() -> None:
    """A Celery prefork child is daemonic; vLLM's engine-core process would be its child, which
    multiprocessing forbids: the engine core must run in-process there, and only there."""
    import multiprocessing

    # spawn, not fork: a fork of the test process (its threads) can hang in the child under load
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    for daemon in (True, False):
        proc = ctx.Process(target=_report_engine_core_mode, args=(results,), daemon=daemon)
        proc.start()
        proc.join(180)
        assert proc.exitcode == 0
    assert [results.get(timeout=5), results.get(timeout=5)] == [(True, "0"), (False, None)]


def _report_engine_core_mode(results: Any) -> None:
    import os

    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    in_process = engine_core_in_process()
    results.put((in_process, os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")))


def test_cuda_graph_sizes_reach_vllm_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture-size option (a faster engine start, to be measured) becomes vLLM's compilation_config;
    without it vLLM's own defaults stand (no compilation_config passed at all)."""
    from scoring.engines.vllm import VLLMEngine

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: seen.append(options))
    VLLMEngine("/nowhere", cudagraph_capture_sizes=[64, 1, 8])
    VLLMEngine("/nowhere")
    assert seen[0]["compilation_config"] == {"cudagraph_capture_sizes": [1, 8, 64]}
    assert "compilation_config" not in seen[1]


def test_cuda_graph_mode_reaches_vllm_by_name_and_a_wrong_one_fails_before_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cudagraph_mode (prefill-only scoring never replays FULL graphs) joins the capture sizes in
    compilation_config; a name vLLM does not have is refused in the constructor, before any import of vLLM."""
    from scoring.engines.vllm import VLLMEngine

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: seen.append(options))
    VLLMEngine("/nowhere", cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=[512, 8])
    VLLMEngine("/nowhere", cudagraph_mode="NONE")
    assert seen[0]["compilation_config"] == {"cudagraph_capture_sizes": [8, 512], "cudagraph_mode": "PIECEWISE"}
    assert seen[1]["compilation_config"] == {"cudagraph_mode": "NONE"}
    with pytest.raises(ValueError, match="cudagraph_mode must be one of"):
        VLLMEngine("/nowhere", cudagraph_mode="piecewise-ish")
    assert len(seen) == 2


def test_float32_with_lora_is_refused_before_vllm_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's LoRA kernels take bfloat16 / float16 only (on the GPU, dtype float32 with adapters failed at engine
    start on an assertion inside the memory profiling): the constructor says so first; without LoRA float32 stays."""
    from scoring.engines.vllm import VLLMEngine

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: seen.append(options))
    with pytest.raises(ValueError, match="cannot score LoRA adapters"):
        VLLMEngine("/nowhere", dtype="float32")
    assert seen == []
    VLLMEngine("/nowhere", dtype="float16")
    VLLMEngine("/nowhere", dtype="float32", enable_lora=False)
    assert [o["dtype"] for o in seen] == ["float16", "float32"]


def test_a_fixed_kv_cache_reaches_vllm_only_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from scoring.engines.vllm import VLLMEngine

    seen: list[dict] = []
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: seen.append(options))
    VLLMEngine("/nowhere", kv_cache_memory_bytes=7 * 2**30)
    VLLMEngine("/nowhere")
    assert seen[0]["kv_cache_memory_bytes"] == 7 * 2**30
    assert "kv_cache_memory_bytes" not in seen[1]


def test_batch_invariance_is_asked_for_before_vllm_is_imported_and_refused_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """batch_invariant sets VLLM_BATCH_INVARIANT (vLLM reads it at import); once vLLM was imported without
    it, asking is refused with the fix named rather than silently scoring batch-dependent numbers."""
    import sys
    import types

    from scoring.engines.vllm import VLLMEngine, batch_invariance

    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert batch_invariance(False) is False
    assert "VLLM_BATCH_INVARIANT" not in os.environ  # off: the deployment's environment is left alone
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: None)
    assert VLLMEngine("/nowhere", batch_invariant=True).batch_invariant is True
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1"

    monkeypatch.delenv("VLLM_BATCH_INVARIANT")
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # imported without it
    with pytest.raises(ValueError, match="imported in this process without VLLM_BATCH_INVARIANT=1"):
        VLLMEngine("/nowhere", batch_invariant=True)
    assert VLLMEngine("/nowhere").batch_invariant is False
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # set by the deployment: on, whatever the option says
    assert VLLMEngine("/nowhere", batch_invariant=True).batch_invariant is True


def test_block_size_and_prefix_hash_reach_vllm_and_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KV block size and the prefix-cache hash (host cost per prompt block) go to vLLM as given; none given
    leaves vLLM's defaults; a size or hash vLLM does not have is refused before vLLM is imported."""
    from scoring.engines.vllm import VLLMEngine

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: seen.append(options))
    VLLMEngine("/nowhere", block_size=64, prefix_caching_hash_algo="xxhash")
    VLLMEngine("/nowhere")
    assert seen[0]["block_size"] == 64 and seen[0]["prefix_caching_hash_algo"] == "xxhash"
    assert "block_size" not in seen[1] and "prefix_caching_hash_algo" not in seen[1]
    with pytest.raises(ValueError, match="block_size must be one of"):
        VLLMEngine("/nowhere", block_size=48)
    with pytest.raises(ValueError, match="prefix_caching_hash_algo must be one of"):
        VLLMEngine("/nowhere", prefix_caching_hash_algo="md5")
    assert len(seen) == 2


def test_every_score_call_puts_the_prefix_in_the_cache_per_adapter_before_its_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh worker's first step computes the shared prefix in the same pass as its items, which gives other
    bits than reading it from the cache (session 26): so score() first sends one request per adapter (the prefix
    and a fixed one-item suffix) and only then the items, each adapter's LoRA with it; the warm-up's outputs are
    not part of the result."""
    from scoring.engines.vllm import WARMUP_TEXT, VLLMEngine
    from scoring.prompts import RenderedBatch

    install_fake_vllm(monkeypatch)

    label_ids = [101, 102, 103]
    texts = ["first item", "second item"]

    class Renderer:
        prefix_ids = [1, 2, 3, 4]
        label_token_ids = label_ids
        max_context = 64

        def render(self, items: list[str]) -> RenderedBatch:
            return RenderedBatch([[10 + len(t), 7] for t in items], np.zeros(len(items), dtype=bool))

    logp = np.log(np.full((2, len(texts), 3), 0.2))
    calls: list[tuple[list[Any], Any, Any]] = []

    class LLM:
        def generate(self, prompts: list[Any], params: Any, lora_request: Any = None, use_tqdm: bool = True) -> Any:
            calls.append((prompts, params, lora_request))
            return fake_outputs(logp, label_ids, 0, True) if len(calls) == 2 else [None] * len(prompts)

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.enable_lora, engine.max_model_len, engine.llm = True, 128, LLM()
    adapters = [AdapterRef("a", 1, "/a"), AdapterRef("b", 2, "/b")]
    result = engine.score(Renderer(), texts, adapters)  # type: ignore[arg-type]

    warm, scored = calls
    assert [p["prompt_token_ids"] for p in warm[0]] == [[1, 2, 3, 4, 10 + len(WARMUP_TEXT), 7]] * 2
    assert [lr.name for lr in warm[2]] == ["a", "b"] and warm[1].kwargs["max_tokens"] == 1
    assert len(scored[0]) == 4 and [lr.name for lr in scored[2]] == ["a", "a", "b", "b"]
    assert result.p.shape == (2, 2, 3) and np.allclose(result.p, 1 / 3)
    assert engine.last_timings["warm_s"] >= 0.0


def test_widening_sets_vllms_cap_in_both_modules_that_bind_it() -> None:
    """vLLM 0.26 binds MAX_LOGPROB_TOKEN_IDS by name in SamplingParams' module and in the sampler's (which sizes
    its per-request row of ids by it): both are raised, never lowered; a vLLM without it is a clear error."""
    import types

    from scoring.engines.vllm import widen_logprob_token_ids

    params, sampler = types.SimpleNamespace(MAX_LOGPROB_TOKEN_IDS=128), types.SimpleNamespace(MAX_LOGPROB_TOKEN_IDS=128)
    assert widen_logprob_token_ids(256, [params, sampler]) == 256
    assert params.MAX_LOGPROB_TOKEN_IDS == sampler.MAX_LOGPROB_TOKEN_IDS == 256
    assert widen_logprob_token_ids(151, [params, sampler]) == 256  # already wider: left as it is
    with pytest.raises(RuntimeError, match="has no MAX_LOGPROB_TOKEN_IDS"):
        widen_logprob_token_ids(256, [params, types.SimpleNamespace()])


def test_wide_check_allows_bfloat16_batching_noise_but_not_other_scores() -> None:
    """The wide and the chunked scoring batch differently, and bfloat16 scores move with the batch (session 31's
    first check at 1e-3 failed on every worker with max |Δp| 0.013-0.049): the check takes engine parity's bound
    on the mean (distribution and label mass) and a cap on the largest difference; other scores fail it."""
    from scoring.engines.base import ScoreResult
    from scoring.engines.vllm import WIDE_CHECK_MAX_DP, WIDE_CHECK_MAX_MEAN_DP, wide_check

    def result(p: np.ndarray, mass: np.ndarray) -> ScoreResult:
        return ScoreResult(p=p, mass=mass, truncated=np.zeros(p.shape[1], dtype=bool), tokens=0)

    rng = np.random.default_rng(0)
    p, mass = rng.dirichlet(np.ones(151), size=(4, 16)), rng.uniform(0.2, 1.0, size=(4, 16))
    ok, figures = wide_check(result(p, mass), result(p.copy(), mass.copy()))
    assert ok and figures == {"mean_dp": 0.0, "max_dp": 0.0, "mean_dmass": 0.0, "agreement": 1.0}
    noisy = p.copy()
    noisy[0, 0, 0] += 0.04  # one item moved by 0.04, as two batchings did: the mean stays small
    ok, figures = wide_check(result(p, mass), result(noisy, mass))
    assert ok and figures["max_dp"] == pytest.approx(0.04) and figures["mean_dp"] == pytest.approx(0.04 / 64)
    assert not wide_check(result(p, mass), result(p + 2 * WIDE_CHECK_MAX_MEAN_DP, mass))[0]  # every item moved
    assert not wide_check(result(p, mass), result(p, mass * 0.9))[0]  # same distribution, other label mass
    jumped = p.copy()
    jumped[1, 2, 0] += 2 * WIDE_CHECK_MAX_DP  # one item far off: a wrong label read
    assert not wide_check(result(p, mass), result(jumped, mass))[0]
    shuffled = p[..., rng.permutation(151)]  # the labels' columns in another order: another distribution
    ok, figures = wide_check(result(p, mass), result(shuffled, mass))
    assert not ok and figures["agreement"] < 0.2
    assert not wide_check(result(p, mass), result(p[:, :3], mass[:, :3]))[0]


def _label_llm(logp: np.ndarray, label_ids: list[int], wide_bias: float = 0.0) -> Any:
    """A fake offline LLM over ``logp`` (float[K, N, C] full-vocabulary label logprobs): every request (one per
    prompt, adapter-major within a chunk, chunk-major) reports its SamplingParams' label ids; requests with more
    than 128 ids get ``wide_bias`` added (a sampler that mishandles a widened cap)."""
    column = {t: c for c, t in enumerate(label_ids)}

    class LLM:
        def __init__(self) -> None:
            self.calls: list[int] = []

        def generate(self, prompts: list[Any], params: Any, lora_request: Any = None, use_tqdm: bool = True) -> Any:
            per = params if isinstance(params, list) else [params] * len(prompts)
            self.calls.append(len(prompts))
            outs = []
            for prompt, sp, lora in zip(prompts, per, lora_request or [None] * len(prompts), strict=True):
                ids = sp.kwargs["logprob_token_ids"]
                item = max(0, prompt["prompt_token_ids"][3] - 10)  # after the 3 prefix ids; the warm-up: 0
                k = 0 if lora is None else lora.int_id - 1
                row = logp[k, item, [column[t] for t in ids]]
                if len(ids) > 128:
                    row = row + wide_bias
                outs.append(fake_output([0, *ids], [-0.01, *row.tolist()], True))
            return outs

    return LLM()


@pytest.mark.parametrize("wide_bias", [0.0, 0.5])
def test_a_wide_engine_asks_once_per_item_after_its_check_and_falls_back_to_chunks_when_they_differ(
    monkeypatch: pytest.MonkeyPatch, wide_bias: float
) -> None:
    """label_logprob_width=256 on a 151-label task (CLINC150): the first call scores a few items both ways;
    where the two agree, every later request asks for all 151 labels at once (half the requests); where
    they differ (a sampler that does not honour the raised cap), the engine asks in 128-label chunks for good
    and its scores are the chunked ones. Without the option: chunks, as before."""
    from scoring.engines import vllm as vllm_engine
    from scoring.engines.vllm import VLLMEngine
    from scoring.prompts import RenderedBatch

    install_fake_vllm(monkeypatch)
    monkeypatch.setattr(vllm_engine, "widen_logprob_token_ids", lambda width: width)
    monkeypatch.setattr(VLLMEngine, "_start", lambda self, model_dir, **options: None)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    label_ids = list(range(1000, 1151))
    rng = np.random.default_rng(1)
    n_items = 40
    logp = np.log(rng.dirichlet(np.ones(151), size=(2, n_items)) * 0.9)

    class Renderer:
        prefix_ids = [1, 2, 3]
        label_token_ids = label_ids
        max_context = 64

        def render(self, items: list[str]) -> RenderedBatch:
            suffixes = [[int(t.split()[-1]) + 10 if t != "." else 5, 7] for t in items]  # "." : the warm-up
            return RenderedBatch(suffixes, np.zeros(len(items), dtype=bool))

    texts = [f"item {i}" for i in range(n_items)]
    adapters = [AdapterRef("a", 1, "/a"), AdapterRef("b", 2, "/b")]

    plain = VLLMEngine("/nowhere")
    plain.enable_lora, plain.max_model_len, plain.llm = True, 128, _label_llm(logp, label_ids, wide_bias)
    chunked = plain.score(Renderer(), texts, adapters).p  # type: ignore[arg-type]
    assert plain.llm.calls == [2, 2 * n_items * 2]  # the warm-up, then two chunks of every request

    wide = VLLMEngine("/nowhere", label_logprob_width=256)
    wide.enable_lora, wide.max_model_len, wide.llm = True, 128, _label_llm(logp, label_ids, wide_bias)
    first = wide.score(Renderer(), texts, adapters).p  # type: ignore[arg-type]
    again = wide.score(Renderer(), texts, adapters).p  # type: ignore[arg-type]
    checked = 16 * 2
    # the check (wide, then chunked, each after its warm-up), then the call itself, then the next call
    per_call = 2 * n_items * (1 if wide_bias == 0 else 2)
    assert wide.llm.calls == [2, checked, 2, 2 * checked, 2, per_call, 2, per_call]
    assert wide.wide_checked is (wide_bias == 0)
    assert wide.label_width == (256 if wide_bias == 0 else 128)
    assert np.allclose(first, chunked) and np.allclose(again, chunked)

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # a core in its own process cannot be widened
    with pytest.raises(ValueError, match="needs vLLM's engine core in the worker's process"):
        VLLMEngine("/nowhere", label_logprob_width=256)
    with pytest.raises(ValueError, match="label_logprob_width must be within"):
        VLLMEngine("/nowhere", label_logprob_width=300)
