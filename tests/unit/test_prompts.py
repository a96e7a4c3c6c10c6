from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scoring.prompts import LabelSpec, PrefixMismatchError, PromptRenderer, PromptSpec

SPEC = PromptSpec(
    instructions="Classify the question by the kind of answer it expects.",
    labels=(
        LabelSpec("location", "a place", "A"),
        LabelSpec("number", "a count, date or amount", "B"),
        LabelSpec("person", "a human or group", "C"),
    ),
    few_shot=(("Where is the Eiffel Tower?", "location"), ("How many legs does a spider have?", "number")),
    item_template="Text: {text}\nLabel:",
)
ITEMS = [
    "Who painted the Mona Lisa?",
    "  leading spaces and trailing  ",
    "Line one\nline two\n\n",
    "naïve café — ünïcödé 北京 🚀",
    "42",
    "Text: nested template {text} braces }{",
]

# SmolLM2's template with something item-dependent (or the date) placed in the system turn.
PER_ITEM_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if message['role'] == 'system' %} ({{ messages[-1]['content'] | length }} chars){% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DATE_TEMPLATE = PER_ITEM_TEMPLATE.replace("messages[-1]['content'] | length", "strftime_now('%Y-%m-%d')")
ITEM_COPY_TEMPLATE = PER_ITEM_TEMPLATE.replace("messages[-1]['content'] | length", "messages[-1]['content']")


@pytest.fixture(scope="module")
def load_tokenizer(smollm2_dir: Path) -> Callable[[], Any]:
    from transformers import AutoTokenizer

    return lambda: AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def renderer(load_tokenizer: Callable[[], Any]) -> PromptRenderer:
    return PromptRenderer(load_tokenizer(), SPEC, model_revision="rev1", max_context=256)


def test_every_item_is_the_shared_prefix_plus_its_suffix(renderer: PromptRenderer) -> None:
    renderer.verify(ITEMS)  # full chat-template renders equal prefix_ids + suffix_ids
    batch = renderer.render(ITEMS, verify=len(ITEMS))
    assert len(batch.suffix_ids) == len(ITEMS) and not batch.truncated.any()
    tokenizer = renderer.tokenizer
    for text, suffix in zip(ITEMS, batch.suffix_ids, strict=True):
        full = tokenizer.apply_chat_template(_messages(text), tokenize=False, add_generation_prompt=True)
        assert tokenizer(full, add_special_tokens=False)["input_ids"] == renderer.prefix_ids + suffix
        assert tokenizer.decode(suffix).endswith("<|im_start|>assistant\n")  # next token: the label code


def _messages(text: str) -> list[dict[str, str]]:
    from scoring.prompts import build_messages

    return build_messages(SPEC, text)


def test_prefix_holds_instructions_labels_and_few_shot(renderer: PromptRenderer) -> None:
    prefix = renderer.tokenizer.decode(renderer.prefix_ids)
    assert SPEC.instructions in prefix and "A: location - a place" in prefix
    assert "How many legs does a spider have?" in prefix
    assert prefix.endswith("<|im_start|>user\n")


def test_prompt_hash_follows_prefix_template_and_model(load_tokenizer: Callable[[], Any]) -> None:
    tok = load_tokenizer()
    base = PromptRenderer(tok, SPEC, model_revision="rev1").prompt_hash
    assert PromptRenderer(tok, SPEC, model_revision="rev1").prompt_hash == base
    assert PromptRenderer(tok, SPEC, model_revision="rev2").prompt_hash != base
    other = PromptSpec(SPEC.instructions, SPEC.labels, SPEC.few_shot[:1], SPEC.item_template)
    assert PromptRenderer(tok, other, model_revision="rev1").prompt_hash != base


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (PER_ITEM_TEMPLATE, "does not start with the shared prefix"),
        (DATE_TEMPLATE, "date"),
        (ITEM_COPY_TEMPLATE, "repeats"),
    ],
)
def test_template_with_per_item_or_date_text_is_a_clear_error(
    load_tokenizer: Callable[[], Any], template: str, message: str
) -> None:
    tok = load_tokenizer()
    tok.chat_template = template
    with pytest.raises(PrefixMismatchError, match=message):
        PromptRenderer(tok, SPEC, model_revision="rev1")


def test_long_items_are_truncated_with_a_marker_and_flagged(renderer: PromptRenderer) -> None:
    long_text = "The committee discussed the budget at length. " * 200
    batch = renderer.render(["short one", long_text, "another short one"])
    assert batch.truncated.tolist() == [False, True, False]
    suffix = batch.suffix_ids[1]
    assert len(renderer.prefix_ids) + len(suffix) <= renderer.max_context
    decoded = renderer.tokenizer.decode(suffix)
    assert "[...]" in decoded and decoded.endswith("<|im_start|>assistant\n")


def test_render_training_is_the_scoring_prompt_and_the_code(renderer: PromptRenderer) -> None:
    ids, target = renderer.render_training("Who wrote Hamlet?", 2)
    assert ids == renderer.prefix_ids + renderer.render(["Who wrote Hamlet?"]).suffix_ids[0]
    assert target == renderer.label_token_ids[2] == renderer.tokenizer.encode("C", add_special_tokens=False)[0]


def test_prefix_longer_than_the_context_is_rejected(load_tokenizer: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match="context tokens"):
        PromptRenderer(load_tokenizer(), SPEC, model_revision="rev1", max_context=64)


def test_max_context_0_fits_the_prompt_instead_of_cutting_it(smollm2_dir: Path) -> None:
    """The CPU profile's max_context 0 (issue 32, problem 5): an item the old 256-token cap cut short is
    rendered whole, under the model's own window."""
    from scoring.pipeline import make_renderer, model_window

    long_item = "why is the sky blue " * 60  # ~300 tokens: more than 256 less the prefix
    fitted, capped = make_renderer(smollm2_dir, SPEC, 0), make_renderer(smollm2_dir, SPEC, 256)
    assert fitted.max_context == model_window(smollm2_dir) == 8192
    assert fitted.render([long_item]).truncated.tolist() == [False]
    assert capped.render([long_item]).truncated.tolist() == [True]
