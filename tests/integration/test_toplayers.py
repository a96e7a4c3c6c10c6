"""Adapters on the top layers only (TrainConfig.top_layers) and the split forward that serves them
(scoring/toplayers.py): the same logits and gradients as the whole model on full prompts, in the
trainer and in the hf engine, on a tiny random llama (2 layers: the trunk is layer 0) and once on
SmolLM2 (30 layers, the real cut)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring.engines.base import AdapterRef
from scoring.engines.hf import HFEngine
from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec
from scoring.toplayers import SplitStack, adapter_start_layer, model_start_layer
from training.lora import TrainConfig, train_adapter

SPEC = PromptSpec(
    instructions="Classify the sentiment of the text.",
    labels=(LabelSpec("positive", "", "A"), LabelSpec("negative", "", "B"), LabelSpec("neutral", "", "C")),
    few_shot=(("lovely", "positive"), ("dreadful", "negative")),
)
TEXTS = ["great", "an awful, long and winding review of it", "fine I guess", "x", "great"]
LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def renderer(tiny_llama_dir: Path) -> PromptRenderer:
    from transformers import AutoTokenizer

    return PromptRenderer(AutoTokenizer.from_pretrained(tiny_llama_dir), SPEC, model_revision="tiny", max_context=512)


def top_model(model_dir: Path, top: int, seed: int = 0, dropout: float = 0.0) -> Any:
    """A LoRA on the last ``top`` layers with random, nonzero B (PEFT starts B at zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    n = len(base.get_decoder().layers)
    config = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=dropout, target_modules=LINEAR, layers_to_transform=list(range(n - top, n))
    )
    model = get_peft_model(base, config)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.3)
    return model


def full_prompt_logits(model: Any, prompts: list[list[int]]) -> Any:
    import torch

    return torch.stack([model(input_ids=torch.tensor([p])).logits[0, -1] for p in prompts])


def split_logits(model: Any, prefix: list[int], suffixes: list[list[int]], packed: bool = False) -> Any:
    stack = SplitStack(model, model_start_layer(model))
    prefix_hidden, trunk_kv = stack.trunk_prefix(prefix)
    hidden = [h.detach() for h in stack.trunk_suffixes(trunk_kv, len(prefix), suffixes)]
    if packed:
        return stack.logits(stack.top_last_packed(prefix_hidden.detach(), hidden))
    kv = stack.top_prefix(prefix_hidden.detach())
    return stack.logits(stack.top_last(kv, len(prefix), hidden))


def test_split_forward_equals_full_prompts_logits_and_gradients(tiny_llama_dir: Path, renderer: PromptRenderer) -> None:
    import torch

    model = top_model(tiny_llama_dir, top=1)
    assert model_start_layer(model) == 1
    prefix = list(renderer.prefix_ids)
    prompts = [renderer.render_training(t, 0)[0] for t in TEXTS]
    targets = torch.tensor([5, 7, 9, 11, 13])
    results = []
    for path in ("full", "split", "packed"):
        model.zero_grad()
        suffixes = [p[len(prefix) :] for p in prompts]
        logits = (
            full_prompt_logits(model, prompts)
            if path == "full"
            else split_logits(model, prefix, suffixes, packed=path == "packed")
        )
        torch.nn.functional.cross_entropy(logits, targets).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logits.detach(), grads))
    for other in results[1:]:
        torch.testing.assert_close(other[0], results[0][0], atol=1e-4, rtol=1e-4)
        assert results[0][1].keys() == other[1].keys() and len(results[0][1]) == 2 * len(LINEAR)
        for name, grad in results[0][1].items():
            assert ".layers.1." in name  # the trunk holds no LoRA weights: none get gradients
            torch.testing.assert_close(other[1][name], grad, atol=1e-5, rtol=1e-3, msg=name)


def test_split_forward_on_smollm2(smollm2_dir: Path) -> None:
    """The real cut: SmolLM2's 30 layers, LoRA on the last 6, a 9-label-style prefix."""
    import torch
    from transformers import AutoTokenizer

    spec = replace(SPEC, instructions="Classify the sentiment of the text. " * 5)
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(smollm2_dir), spec, model_revision="smol", max_context=512)
    model = top_model(smollm2_dir, top=6)
    assert model_start_layer(model) == 24
    prefix = list(renderer.prefix_ids)
    prompts = [renderer.render_training(t, 0)[0] for t in TEXTS[:3]]
    with torch.no_grad():
        ref = full_prompt_logits(model, prompts)
        for packed in (False, True):
            out = split_logits(model, prefix, [p[len(prefix) :] for p in prompts], packed=packed)
            torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def sharp_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with embeddings scaled ×25 (as in test_lora.py): an adapter can then move the
    label probabilities far in a few steps."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("sharp")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    embeddings: Any = model.get_input_embeddings()
    with torch.no_grad():
        embeddings.weight.mul_(25.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(out)
    return out


WORDS = ("great", "awful", "fine")
TRAIN_TEXTS = [WORDS[i % 3] + " " * (i % 4) + "!" * (i % 5) for i in range(24)]
TRAIN_LABELS = [i % 3 for i in range(24)]
CONFIG = TrainConfig(lr=2e-2, epochs=3, batch_size=8, warmup_ratio=0.0, checkpoint_every=0, dropout=0.0, top_layers=1)


def train(model_dir: Path, renderer: PromptRenderer, out: Path, config: TrainConfig, **kw: Any) -> Any:
    return train_adapter(
        model_dir=model_dir,
        renderer=renderer,
        texts=TRAIN_TEXTS,
        label_indices=TRAIN_LABELS,
        out_dir=out,
        config=config,
        **kw,
    )


def test_top_layer_training_equals_full_prompt_training(
    sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    """The trainer's split path (trunk once, top layers per step) follows the same loss curve as
    full prompts through the whole model, learns, and saves an adapter of the top layer only."""
    split = train(sharp_dir, renderer, tmp_path / "split", CONFIG)
    full = train(
        sharp_dir, renderer, tmp_path / "full", replace(CONFIG, prefix_sharing=False, gradient_checkpointing=False)
    )
    np.testing.assert_allclose(split.losses, full.losses, rtol=2e-3, atol=2e-4)
    two_pass = train(sharp_dir, renderer, tmp_path / "two-pass", replace(CONFIG, packed=False))
    np.testing.assert_allclose(two_pass.losses, full.losses, rtol=2e-3, atol=2e-4)
    # a batch split into micro-batches (gradients summed): each chunk's rows are its own examples
    chunked = train(sharp_dir, renderer, tmp_path / "chunked", replace(CONFIG, micro_batch_tokens=8))
    np.testing.assert_allclose(chunked.losses, full.losses, rtol=2e-3, atol=2e-4)
    assert np.mean(split.losses[-3:]) < split.losses[0] - 1
    info = json.loads((Path(split.path) / "training.json").read_text())
    assert info["trunk_layers"] == 1  # the split path ran (the full-prompt run is the reference)
    assert json.loads((Path(full.path) / "training.json").read_text())["trunk_layers"] == 0
    saved = json.loads((Path(split.path) / "adapter_config.json").read_text())
    assert saved["layers_to_transform"] == [1] and adapter_start_layer(split.path) == 1
    from safetensors.torch import load_file

    names = list(load_file(str(Path(split.path) / "adapter_model.safetensors")))
    assert names and all(".layers.1." in n for n in names)
    # a warm start keeps the saved layers (and the short path)
    warm = train(sharp_dir, renderer, tmp_path / "warm", replace(CONFIG, epochs=1, top_layers=0), warm_from=split.path)
    assert adapter_start_layer(warm.path) == 1 and warm.losses[0] < split.losses[0]


@pytest.mark.parametrize("loss", ["full_vocab", "label_softmax"])
def test_fixed_shape_step_equals_per_batch_step(
    sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path, loss: str
) -> None:
    """The step a CUDA graph replays (training.graphstep), run eagerly: every step padded to the
    run's widest sequence, the short last batch of each epoch (24 items in batches of 7: 3 rows)
    padded with rows of weight 0 — the same losses and the same adapter as the per-batch step."""
    config = replace(CONFIG, batch_size=7, loss=loss)  # type: ignore[arg-type]
    per_batch = train(sharp_dir, renderer, tmp_path / "per-batch", replace(config, graph_step="off"))
    fixed = train(sharp_dir, renderer, tmp_path / "fixed", replace(config, graph_step="eager"))
    assert len(fixed.losses) == len(per_batch.losses) == 12
    np.testing.assert_allclose(fixed.losses, per_batch.losses, rtol=1e-4, atol=1e-5)
    assert np.mean(fixed.losses[-3:]) < fixed.losses[0] - 1
    paths = {"f": fixed.path, "p": per_batch.path}
    step_of = {run: json.loads((Path(path) / "training.json").read_text())["fixed_step"] for run, path in paths.items()}
    assert step_of == {"f": "eager", "p": None}
    phases = json.loads((Path(fixed.path) / "training.json").read_text())["phase_seconds"]
    assert set(phases) == {"load", "trunk", "steps"} and all(v >= 0 for v in phases.values())
    from safetensors.torch import load_file

    a = load_file(str(Path(fixed.path) / "adapter_model.safetensors"))
    b = load_file(str(Path(per_batch.path) / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-3, atol=1e-5)
    # on the CPU, "auto" (capture only on CUDA) keeps the per-batch step
    auto = train(sharp_dir, renderer, tmp_path / "auto", replace(config, graph_step="auto"))
    assert json.loads((Path(auto.path) / "training.json").read_text())["fixed_step"] is None


def test_fixed_shape_step_resumes_to_the_uninterrupted_result(
    sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    """A run of fixed-shape steps killed after a checkpoint resumes (weights and AdamW state) to
    the very adapter and losses of an uninterrupted run."""
    config = replace(CONFIG, batch_size=7, checkpoint_every=4, graph_step="eager")
    whole = train(sharp_dir, renderer, tmp_path / "whole", config)

    class Killed(Exception):
        pass

    def kill_at_step_6(done: int, total: int) -> None:
        if done == 6:
            raise Killed

    with pytest.raises(Killed):
        train(sharp_dir, renderer, tmp_path / "resumed", config, progress=kill_at_step_6)
    seen: list[int] = []
    resumed = train(sharp_dir, renderer, tmp_path / "resumed", config, progress=lambda d, t: seen.append(d))
    assert seen[0] == 4
    assert resumed.content_hash == whole.content_hash and resumed.losses == whole.losses


def test_fixed_shape_step_falls_back_when_a_batch_would_be_split(
    sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    """A batch larger than micro_batch_tokens is split by the per-batch step; the fixed step does
    not split, so it steps aside rather than change what is computed at once."""
    adapter = train(sharp_dir, renderer, tmp_path / "a", replace(CONFIG, micro_batch_tokens=8, graph_step="eager"))
    assert json.loads((Path(adapter.path) / "training.json").read_text())["fixed_step"] is None


def test_graph_step_option_is_checked() -> None:
    with pytest.raises(ValueError, match="graph_step"):
        TrainConfig(graph_step="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="bf16")  # type: ignore[arg-type]


def test_tf32_precision_is_float32_on_the_cpu(sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path) -> None:
    """precision "tf32" changes only a CUDA device's matmuls: on the CPU the adapter is float32's."""
    import torch

    config = replace(CONFIG, batch_size=7, graph_step="eager")
    before = torch.backends.cuda.matmul.allow_tf32
    plain = train(sharp_dir, renderer, tmp_path / "f32", config)
    tf32 = train(sharp_dir, renderer, tmp_path / "tf32", replace(config, precision="tf32"))
    assert tf32.losses == plain.losses and tf32.content_hash == plain.content_hash
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_tf32_setting_is_scoped_to_the_run() -> None:
    """The TF32 switch is on inside a CUDA run only and put back afterwards, also when the run fails."""
    import torch

    from training.lora import _matmul_precision

    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with _matmul_precision("cpu", tf32=True):
            assert torch.backends.cuda.matmul.allow_tf32 is False
        with _matmul_precision("cuda:0", tf32=False):
            assert torch.backends.cuda.matmul.allow_tf32 is False
        with pytest.raises(KeyError), _matmul_precision("cuda:0", tf32=True):
            assert torch.backends.cuda.matmul.allow_tf32 is True
            raise KeyError("the run failed")
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_top_layers_bounds() -> None:
    with pytest.raises(ValueError):
        TrainConfig(top_layers=-1)


def test_engine_scores_top_layer_adapters_like_full_prompts(
    sharp_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    """The hf engine's trunk cache + top layers give the full prompts' numbers, for a top-layer
    adapter next to an all-layer one in the same call, again from the cache on a second call, and
    with a cache too small to hold one call's items."""
    top = train(sharp_dir, renderer, tmp_path / "top", CONFIG)
    full_layers = train(sharp_dir, renderer, tmp_path / "all", replace(CONFIG, top_layers=0, epochs=1))
    refs = [AdapterRef("top", 1, top.path), AdapterRef("all", 2, full_layers.path)]
    plain = HFEngine(str(sharp_dir), device="cpu", batch_size=64, prefix_cache=False)
    cached = HFEngine(str(sharp_dir), device="cpu", batch_size=2)
    tiny_cache = HFEngine(str(sharp_dir), device="cpu", batch_size=2, trunk_cache_bytes=1)
    texts = [*TEXTS, *TRAIN_TEXTS[:6]]
    want = plain.score(renderer, texts, refs)
    for engine in (cached, cached, tiny_cache):
        got = engine.score(renderer, texts, refs)
        np.testing.assert_allclose(got.p, want.p, atol=1e-4)
        np.testing.assert_allclose(got.mass, want.mass, atol=1e-4)
    assert len(cached._trunk) == len(set(texts)) and cached._starts[top.path] == 1
    assert len(tiny_cache._trunk) == 1  # evicted down to the newest entry, results still right
    # the adapter moved the predictions (the comparison is not between two copies of the base)
    base = plain.score(renderer, texts, [])
    assert np.abs(want.p[0] - base.p[0]).max() > 0.05
    # packed scoring (one sequence of prefix + suffixes per batch): the same numbers, with batches
    # of one item, of a few, and of everything at once, on a second call from the trunk cache too
    for tokens in (1, 12, 4096):
        packed = HFEngine(str(sharp_dir), device="cpu", packed_scoring=True, packed_tokens=tokens)
        for _ in range(2):
            got = packed.score(renderer, texts, refs)
            np.testing.assert_allclose(got.p, want.p, atol=1e-4)
            np.testing.assert_allclose(got.mass, want.mass, atol=1e-4)
        assert len(packed._trunk) == len(set(texts)) and not packed._top_kv  # the packed path ran
    assert cached._top_kv  # (the per-row path keeps the top layers' prefix keys/values)
    assert not cached.packed_scoring and plain.packed_scoring is False  # packed is the GPU default only
    from scoring.engines.hf import packed_choice

    assert packed_choice(None, on_gpu=True) and not packed_choice(None, on_gpu=False)
    assert (
        packed_choice(1.0, on_gpu=False) and not packed_choice(0, on_gpu=True) and not packed_choice(False, on_gpu=True)
    )
    bad_values: list[Any] = ["false", "true", 2, []]  # e.g. a shell's string edit of the loop options
    for bad in bad_values:
        with pytest.raises(ValueError, match="packed_scoring must be true, false, 0 or 1"):
            HFEngine(str(sharp_dir), device="cpu", packed_scoring=bad)
    with pytest.raises(ValueError, match="packed_tokens must be positive"):
        HFEngine(str(sharp_dir), device="cpu", packed_scoring=True, packed_tokens=0)
