"""The transformers + PEFT engine on a tiny random llama (fast) and once on SmolLM2 (slow), plus the
vLLM output conversion checked against the hf engine's own numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scoring.engines.base import AdapterRef, adapter_set_hash, distribution_from_logprobs
from scoring.engines.hf import HFEngine
from scoring.engines.vllm import outputs_to_label_logprobs
from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec
from tests.vllm_fakes import fake_outputs

SPEC = PromptSpec(
    instructions="Classify the news headline by topic.",
    labels=(
        LabelSpec("world", "international affairs", "A"),
        LabelSpec("sports", "games and athletes", "B"),
        LabelSpec("business", "companies and markets", "C"),
        LabelSpec("science", "science and technology", "D"),
    ),
    few_shot=(("Stocks rally as oil prices fall", "business"), ("Local team wins the cup final", "sports")),
)
TEXTS = [
    "Central bank raises interest rates again",
    "New telescope spots a distant galaxy",
    "Striker signs a record contract after a season of goals, assists and endless transfer rumours",
    "Ceasefire talks resume",
    "Chipmaker shares jump on strong demand for data-centre processors and memory",
    "Rain delays the match",
    "x",
]


def make_adapter(model_dir: Path, out: Path, seed: int) -> Path:
    """A rank-8 LoRA on all linear layers with random, nonzero B (PEFT initialises B to zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    model.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def renderer(tiny_llama_dir: Path) -> PromptRenderer:
    from transformers import AutoTokenizer

    return PromptRenderer(AutoTokenizer.from_pretrained(tiny_llama_dir), SPEC, model_revision="tiny", max_context=512)


@pytest.fixture(scope="module")
def adapters(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[AdapterRef]:
    root = tmp_path_factory.mktemp("adapters")
    return [AdapterRef(f"tiny-{k}", k + 1, str(make_adapter(tiny_llama_dir, root / f"a{k}", seed=k))) for k in range(2)]


@pytest.fixture(scope="module")
def engine(tiny_llama_dir: Path) -> HFEngine:
    # A small row budget forces several length-sorted batches, so padding and regrouping are exercised.
    return HFEngine(str(tiny_llama_dir), device="cpu", batch_size=3)


def test_prefix_cached_scoring_equals_full_prompt_scoring(
    engine: HFEngine, tiny_llama_dir: Path, renderer: PromptRenderer, adapters: list[AdapterRef]
) -> None:
    plain = HFEngine(str(tiny_llama_dir), device="cpu", batch_size=64, prefix_cache=False)
    for adapter_set in ([], adapters):
        cached, full = engine.score(renderer, TEXTS, adapter_set), plain.score(renderer, TEXTS, adapter_set)
        np.testing.assert_allclose(cached.p, full.p, atol=1e-4)
        np.testing.assert_allclose(cached.mass, full.mass, rtol=1e-4, atol=1e-7)
        assert cached.computed_tokens < full.computed_tokens  # the prefix ran once, not once per item


def test_k_adapters_give_different_distributions(
    engine: HFEngine, renderer: PromptRenderer, adapters: list[AdapterRef]
) -> None:
    result = engine.score(renderer, TEXTS, adapters)
    assert result.p.shape == (2, len(TEXTS), 4) and result.p.dtype == np.float32
    assert result.mass.shape == (2, len(TEXTS))
    np.testing.assert_allclose(result.p.sum(axis=-1), 1.0, atol=1e-5)
    assert np.abs(result.p[0] - result.p[1]).max() > 1e-3
    # An adapter scored alone gives the same rows as inside the set (no state leaks between adapters).
    np.testing.assert_allclose(engine.score(renderer, TEXTS, adapters[1:]).p[0], result.p[1], atol=1e-5)


def test_least_recently_used_adapters_are_unloaded(
    tiny_llama_dir: Path, renderer: PromptRenderer, adapters: list[AdapterRef], tmp_path: Path
) -> None:
    """A long run loads K new adapters a round: only max_loaded_adapters stay in the model, and an
    evicted adapter scored again is reloaded to the same numbers."""
    third = AdapterRef("tiny-2", 3, str(make_adapter(tiny_llama_dir, tmp_path / "a2", seed=2)))
    small = HFEngine(str(tiny_llama_dir), device="cpu", max_loaded_adapters=2)
    first = small.score(renderer, TEXTS, adapters[:1]).p
    small.score(renderer, TEXTS, [adapters[1], third])
    assert set(small.model.peft_config) == {"a2", "a3"}  # a1 (adapters[0]) was dropped
    np.testing.assert_allclose(small.score(renderer, TEXTS, adapters[:1]).p, first, atol=1e-6)
    assert set(small.model.peft_config) == {"a3", "a1"}


def test_base_only_is_k1_and_unchanged_by_loaded_adapters(
    tiny_llama_dir: Path, renderer: PromptRenderer, adapters: list[AdapterRef]
) -> None:
    fresh = HFEngine(str(tiny_llama_dir), device="cpu")
    before = fresh.score(renderer, TEXTS, [])
    assert before.p.shape == (1, len(TEXTS), 4)
    fresh.score(renderer, TEXTS, adapters)
    after = fresh.score(renderer, TEXTS, [])
    np.testing.assert_allclose(after.p, before.p, atol=1e-6)
    assert adapter_set_hash([]) == "base" and adapter_set_hash(adapters) != adapter_set_hash(adapters[::-1])


def test_long_items_are_scored_truncated_and_flagged(engine: HFEngine, tiny_llama_dir: Path) -> None:
    from transformers import AutoTokenizer

    small = PromptRenderer(AutoTokenizer.from_pretrained(tiny_llama_dir), SPEC, model_revision="tiny", max_context=200)
    texts = ["short headline", "a very long article body " * 100]
    result = engine.score(small, texts, [])
    assert result.truncated.tolist() == [False, True]
    assert np.isfinite(result.p).all() and result.p.shape == (1, 2, 4)
    assert result.tokens <= 2 * 200


@pytest.mark.slow
def test_smollm2_puts_mass_on_the_label_codes(smollm2_dir: Path) -> None:
    from transformers import AutoTokenizer

    real = PromptRenderer(AutoTokenizer.from_pretrained(smollm2_dir), SPEC, model_revision="smollm2")
    result = HFEngine(str(smollm2_dir), device="cpu").score(real, TEXTS[:4], [])
    assert (result.mass > 0).all() and (result.mass <= 1.0001).all()
    np.testing.assert_allclose(result.p.sum(axis=-1), 1.0, atol=1e-5)
    assert result.mass.mean() > 0.01, "an instruct model should mostly answer with a code"


# -- vLLM conversion against the hf engine (the pure helpers: tests/unit/test_vllm_conversion.py) --


@pytest.mark.parametrize("flat", [True, False])
def test_vllm_outputs_convert_to_the_same_arrays_as_hf(
    flat: bool, engine: HFEngine, renderer: PromptRenderer, adapters: list[AdapterRef]
) -> None:
    """HF's full-vocabulary label logprobs, wrapped as vLLM outputs, give back HF's p and mass."""
    hf = engine.score(renderer, TEXTS, adapters)
    logp = np.log(hf.p.astype(np.float64) * hf.mass[..., None].astype(np.float64))
    label_ids = renderer.label_token_ids
    outputs = fake_outputs(logp, label_ids, sampled=label_ids[0], flat=flat)
    p, mass = distribution_from_logprobs(outputs_to_label_logprobs(outputs, label_ids, len(TEXTS)))
    np.testing.assert_allclose(p, hf.p, atol=1e-5)
    np.testing.assert_allclose(mass, hf.mass, rtol=1e-4)
