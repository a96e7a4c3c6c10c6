"""LoRA training: the loss on the label token falls, warm starts continue, runs are deterministic,
idempotent and survive being killed mid-way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring.prompts import LabelSpec, PromptRenderer, PromptSpec
from training.lora import TrainConfig, TrainedAdapter, TrainingStateError, label_probabilities, train_adapter

WORDS = ("great", "awful", "fine")
TEXTS = [WORDS[i % 3] for i in range(24)]
LABELS = [i % 3 for i in range(24)]  # balanced: a mean p(target) above 1/3 needs item-dependent output
# High rate and 6 epochs: the tiny random model has to move far in 18 steps.
LEARN = TrainConfig(lr=2e-2, epochs=6, batch_size=8, warmup_ratio=0.0, checkpoint_every=0)
SHORT = TrainConfig(lr=2e-2, epochs=1, batch_size=8, max_steps=3, checkpoint_every=0)


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_llama_dir with its (tied) embeddings scaled ×25. LoRA adapts neither embeddings nor
    norms, and with 0.02-std random embeddings every logit of the tiny model stays within ±0.6: no
    adapter could make it put real probability on a label. Scaled, it can."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("sharp-tiny-llama")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    embeddings: Any = model.get_input_embeddings()
    with torch.no_grad():
        embeddings.weight.mul_(25.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> PromptRenderer:
    from transformers import AutoTokenizer

    spec = PromptSpec(
        instructions="Classify the sentiment of the text.",
        labels=(LabelSpec("positive", "", "A"), LabelSpec("negative", "", "B"), LabelSpec("neutral", "", "C")),
    )
    return PromptRenderer(AutoTokenizer.from_pretrained(model_dir), spec, model_revision="tiny")


@pytest.fixture(scope="module")
def trained(model_dir: Path, renderer: PromptRenderer, tmp_path_factory: pytest.TempPathFactory) -> TrainedAdapter:
    out = tmp_path_factory.mktemp("trained") / "adapter-0"
    return train(model_dir, renderer, out, LEARN)


def train(
    model_dir: Path, renderer: PromptRenderer, out: Path, config: TrainConfig, **kwargs: object
) -> TrainedAdapter:
    return train_adapter(
        model_dir=model_dir,
        renderer=renderer,
        texts=TEXTS,
        label_indices=LABELS,
        out_dir=out,
        config=config,
        **kwargs,  # type: ignore[arg-type]
    )


def target_probabilities(
    model_dir: Path, renderer: PromptRenderer, adapter: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Full-vocabulary probability of each item's target label, and the label distributions."""
    p = label_probabilities(model_dir=model_dir, adapter_path=adapter, renderer=renderer, texts=TEXTS)
    return p[np.arange(len(LABELS)), LABELS], p / p.sum(axis=1, keepdims=True)


def test_training_raises_target_probability(model_dir: Path, renderer: PromptRenderer, trained: TrainedAdapter) -> None:
    base_mass, _ = target_probabilities(model_dir, renderer, None)
    tuned_mass, tuned = target_probabilities(model_dir, renderer, trained.path)

    assert trained.steps == 18 and len(trained.losses) == 18
    assert np.mean(trained.losses[-3:]) < trained.losses[0] - 3
    assert np.log(tuned_mass).mean() > np.log(base_mass).mean() + 3  # loss on the label token fell
    assert (Path(trained.path) / "DONE").is_file()
    assert not any(p.name.startswith(".") for p in Path(trained.path).parent.iterdir())  # no tmp/ckpt left


def test_scoring_engine_reads_what_training_optimised(
    model_dir: Path, renderer: PromptRenderer, trained: TrainedAdapter
) -> None:
    """The hf engine (prefix-cached, right-padded) and training's forward (full prompt, left-padded)
    give the same label distribution for the trained adapter: training optimises the scored number."""
    from scoring.engines import AdapterRef, get_engine

    _, tuned = target_probabilities(model_dir, renderer, trained.path)
    scored = get_engine("hf", str(model_dir)).score(renderer, TEXTS, [AdapterRef("trained", 1, trained.path)])

    np.testing.assert_allclose(scored.p[0], tuned, atol=1e-4)


def test_label_softmax_learns_which_label_each_item_has(
    model_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    """The random tiny model's full-vocabulary loss is spent on raising the label mass first; the
    label-restricted loss shows the item-dependent part within a few dozen steps."""
    config = replace(LEARN, epochs=12, loss="label_softmax")
    adapter = train(model_dir, renderer, tmp_path / "adapter-0", config)
    _, before = target_probabilities(model_dir, renderer, None)
    _, after = target_probabilities(model_dir, renderer, adapter.path)

    assert (after.argmax(axis=1) == LABELS).mean() > 0.9
    assert after[np.arange(len(LABELS)), LABELS].mean() > before[np.arange(len(LABELS)), LABELS].mean() + 0.3


def test_rerun_returns_published_adapter_without_training(
    model_dir: Path, renderer: PromptRenderer, trained: TrainedAdapter
) -> None:
    calls: list[tuple[int, int]] = []
    again = train(model_dir, renderer, Path(trained.path), LEARN, progress=lambda d, t: calls.append((d, t)))

    assert again.reused and not calls
    assert again.content_hash == trained.content_hash and again.steps == trained.steps


def test_out_dir_of_other_training_is_refused(
    model_dir: Path, renderer: PromptRenderer, trained: TrainedAdapter
) -> None:
    with pytest.raises(TrainingStateError):
        train(model_dir, renderer, Path(trained.path), replace(LEARN, seed=7))


def test_warm_start_continues_from_previous_weights(
    model_dir: Path, renderer: PromptRenderer, trained: TrainedAdapter, tmp_path: Path
) -> None:
    scratch = train(model_dir, renderer, tmp_path / "scratch", SHORT)
    warm = train(model_dir, renderer, tmp_path / "warm", SHORT, warm_from=trained.path)

    assert warm.losses[0] < scratch.losses[0] - 3
    assert warm.losses[0] < trained.losses[0]


def test_seed_determines_the_adapter(model_dir: Path, renderer: PromptRenderer, tmp_path: Path) -> None:
    first = train(model_dir, renderer, tmp_path / "a", SHORT)
    same = train(model_dir, renderer, tmp_path / "b", SHORT)
    other = train(model_dir, renderer, tmp_path / "c", replace(SHORT, seed=1))

    assert first.content_hash == same.content_hash
    assert other.content_hash != first.content_hash


def test_killed_run_resumes_to_the_uninterrupted_result(
    model_dir: Path, renderer: PromptRenderer, tmp_path: Path
) -> None:
    config = replace(SHORT, max_steps=5, epochs=2, checkpoint_every=2)
    uninterrupted = train(model_dir, renderer, tmp_path / "whole", config)

    def kill_at_step_3(done: int, total: int) -> None:
        if done == 3:
            raise Killed

    with pytest.raises(Killed):
        train(model_dir, renderer, tmp_path / "resumed", config, progress=kill_at_step_3)
    assert not (tmp_path / "resumed").exists()
    seen: list[tuple[int, int]] = []
    resumed = train(model_dir, renderer, tmp_path / "resumed", config, progress=lambda d, t: seen.append((d, t)))

    assert seen[0] == (2, 5) and seen[-1] == (5, 5)  # restarted from the step-2 checkpoint
    assert resumed.content_hash == uninterrupted.content_hash
    assert resumed.losses == uninterrupted.losses


@pytest.mark.slow
def test_smollm2_adapter_loads_in_peft(smollm2_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = PromptSpec(
        instructions="Classify the sentiment of the text.",
        labels=(LabelSpec("positive", "", "A"), LabelSpec("negative", "", "B"), LabelSpec("neutral", "", "C")),
        few_shot=(("I love it", "positive"), ("It broke", "negative")),
    )
    real = PromptRenderer(AutoTokenizer.from_pretrained(smollm2_dir), spec, model_revision="smollm2")
    adapter = train_adapter(
        model_dir=smollm2_dir,
        renderer=real,
        texts=TEXTS[:8],
        label_indices=LABELS[:8],
        out_dir=tmp_path / "adapter-0",
        config=TrainConfig(batch_size=4, max_steps=2),
    )

    assert adapter.steps == 2 and np.isfinite(adapter.final_loss)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(smollm2_dir), adapter.path)
    assert any("lora_A" in name for name, _ in model.named_parameters())


def test_shared_prefix_step_equals_full_prompts(model_dir: Path, renderer: PromptRenderer, tmp_path: Path) -> None:
    """The prefix run once and expanded over the rows gives the full prompts' logits and gradients
    (no dropout, so the two paths compute the same function); items of different lengths."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.lora import _last_logits, _last_logits_shared

    texts = ["great", "an awful, long and winding review of it", "fine I guess"]
    prompts = [renderer.render_training(t, 0)[0] for t in texts]
    prefix = list(renderer.prefix_ids)
    assert all(p[: len(prefix)] == prefix for p in prompts)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    for name, param in model.named_parameters():  # B starts at zero: give the adapter a real effect
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    model.train()
    grads = []
    outputs = []
    for shared in (False, True):
        model.zero_grad()
        if shared:
            logits = _last_logits_shared(model, prefix, [p[len(prefix) :] for p in prompts], "cpu")
        else:
            logits = _last_logits(model, prompts, "cpu")
        torch.nn.functional.cross_entropy(logits, torch.tensor([5, 7, 9])).backward()
        outputs.append(logits.detach().clone())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None})
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-4, rtol=1e-4)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-5, rtol=1e-3, msg=name)


def test_full_prompt_path_still_trains(model_dir: Path, renderer: PromptRenderer, tmp_path: Path) -> None:
    """prefix_sharing=False (the reference path) learns the same task."""
    adapter = train(model_dir, renderer, tmp_path / "full", replace(LEARN, prefix_sharing=False))
    assert np.mean(adapter.losses[-3:]) < adapter.losses[0] - 3


def test_min_steps_trains_past_the_epochs(model_dir: Path, renderer: PromptRenderer, tmp_path: Path) -> None:
    """24 labels in batches of 8, one epoch = 3 steps; min_steps 7 runs 7 (epochs continue in
    fresh seeded orders), and the loss keeps falling past the epoch."""
    adapter = train(model_dir, renderer, tmp_path / "floor", replace(LEARN, epochs=1, min_steps=7))
    assert adapter.steps == 7 and len(adapter.losses) == 7
    assert np.mean(adapter.losses[-2:]) < np.mean(adapter.losses[:2])
