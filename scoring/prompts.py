"""Scoring prompts: a frozen shared prefix (instructions, label descriptions, few-shot turns) followed
by the item, rendered with the tokenizer's own chat template so that the model's next token is the
label code.

The prefix token ids are computed once. Every prompt is ``prefix_ids + suffix_ids[i]``, where the
suffix is the tokenized item turn plus the fixed tail (end of the user turn, assistant header).
Engines rely on that split for prefix caching, so it is verified against full renders: a chat
template that puts a date or per-item text before the item raises PrefixMismatchError instead of
silently missing the cache (or worse, scoring a prompt other than the one trained on).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.labels import label_token_ids

SENTINEL = "\u2063ITEM-SENTINEL\u2063"
TRUNCATION_MARKER = " [...]"
# Texts rendered fully at construction to prove the prefix/suffix split; varied on purpose
# (leading space, newline, digits, non-ASCII) because tokenizer merges differ at those boundaries.
PROBE_TEXTS = ("hello world", " leading space and a newline\nhere", "42 ünïcödé items?")


class PrefixMismatchError(ValueError):
    """A full render of an item does not equal ``prefix_ids + suffix_ids``."""


@dataclass(frozen=True)
class LabelSpec:
    name: str
    description: str
    code: str


@dataclass(frozen=True)
class PromptSpec:
    instructions: str
    labels: tuple[LabelSpec, ...]
    few_shot: tuple[tuple[str, str], ...] = ()  # (text, label name)
    item_template: str = "Text: {text}"


@dataclass(frozen=True)
class RenderedBatch:
    suffix_ids: list[list[int]]
    truncated: np.ndarray  # bool[N]: item text was cut to fit the context (marker appended)


def _system_text(spec: PromptSpec) -> str:
    lines = [spec.instructions.strip(), "", "Labels (answer with the code only):"]
    for label in spec.labels:
        described = f" - {label.description.strip()}" if label.description.strip() else ""
        lines.append(f"{label.code}: {label.name}{described}")
    return "\n".join(lines)


def build_messages(spec: PromptSpec, item_text: str) -> list[dict[str, str]]:
    """The chat: system (instructions + labels), one user/assistant pair per few-shot example, the item."""
    code_of = {label.name: label.code for label in spec.labels}
    messages = [{"role": "system", "content": _system_text(spec)}]
    for text, label_name in spec.few_shot:
        if label_name not in code_of:
            raise ValueError(f"few-shot example labelled {label_name!r}, which is not one of the labels")
        messages.append({"role": "user", "content": spec.item_template.format(text=text)})
        messages.append({"role": "assistant", "content": code_of[label_name]})
    messages.append({"role": "user", "content": spec.item_template.format(text=item_text)})
    return messages


class PromptRenderer:
    """Renders item texts into token ids sharing one prefix. See the module docstring."""

    def __init__(self, tokenizer: Any, spec: PromptSpec, *, model_revision: str, max_context: int = 2048) -> None:
        if "{text}" not in spec.item_template:
            raise ValueError("item_template must contain '{text}'")
        self.tokenizer = tokenizer
        self.spec = spec
        self.max_context = max_context
        self.label_token_ids: list[int] = label_token_ids(
            tokenizer, [label.code for label in spec.labels], [label.name for label in spec.labels]
        )
        self._reject_dynamic_template()
        self._prefix_text, self._tail_text = self._split_sentinel_render()
        self.prefix_ids: list[int] = self._encode(self._prefix_text)
        self.max_suffix = max_context - len(self.prefix_ids)
        if self.max_suffix < 32:
            raise ValueError(f"the prefix takes {len(self.prefix_ids)} of {max_context} context tokens")
        self._marker_ids = self._encode(TRUNCATION_MARKER)
        self.prompt_hash: str = self._hash(model_revision)
        self.verify(PROBE_TEXTS)

    # -- construction -------------------------------------------------------------------------

    def _chat(self, item_text: str) -> str:
        rendered = self.tokenizer.apply_chat_template(
            build_messages(self.spec, item_text), tokenize=False, add_generation_prompt=True
        )
        return str(rendered)

    def _reject_dynamic_template(self) -> None:
        template = getattr(self.tokenizer, "chat_template", None) or ""
        if "strftime_now" in template or "date_string" in template:
            raise PrefixMismatchError(
                "the chat template injects the current date: prompts (and the prefix cache) would change "
                "with the clock; use a template without strftime_now/date_string"
            )

    def _split_sentinel_render(self) -> tuple[str, str]:
        full = self._chat(SENTINEL)
        item = self.spec.item_template.format(text=SENTINEL)
        if full.count(SENTINEL) != 1 or full.count(item) != 1:
            raise PrefixMismatchError(
                "the chat template repeats or rewrites the item text; the prompt has no fixed prefix"
            )
        start = full.index(item)
        return full[:start], full[start + len(item) :]

    def _hash(self, model_revision: str) -> str:
        payload = {
            "prefix": self._prefix_text,
            "template": self.spec.item_template,
            "tail": self._tail_text,
            "codes": [label.code for label in self.spec.labels],
            "model_revision": model_revision,
            "max_context": self.max_context,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """One batched call; the Rust backend's encode_batch_fast (no offsets, parallel) when there is
        one: the main process tokenizes every item of the pool, so this is on the scoring hot path.
        Its ids are checked against the transformers path on the verified items."""
        if not texts:
            return []
        backend = getattr(self.tokenizer, "_tokenizer", None)
        fast = getattr(backend, "encode_batch_fast", None)
        if fast is not None:
            return [encoding.ids for encoding in fast(list(texts), add_special_tokens=False)]
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    # -- rendering ------------------------------------------------------------------------------

    def _suffix_text(self, text: str) -> str:
        return self.spec.item_template.format(text=text) + self._tail_text

    def _truncate(self, text: str) -> list[int]:
        """Cut the item text (in tokens) until its suffix fits, then append the marker."""
        text_ids = self._encode(text)
        excess = len(self._encode(self._suffix_text(text))) - self.max_suffix
        keep = max(0, len(text_ids) - excess - len(self._marker_ids) - 2)
        while True:
            cut = self.tokenizer.decode(text_ids[:keep]) + TRUNCATION_MARKER
            ids = self._encode(self._suffix_text(cut))
            if len(ids) <= self.max_suffix or keep == 0:
                return ids
            keep = max(0, keep - max(4, len(ids) - self.max_suffix))

    def render(self, texts: Sequence[str], *, verify: int = 1) -> RenderedBatch:
        """Suffix ids of every text (one batched tokenizer call). Long items are truncated with a
        marker and flagged, never dropped. The first ``verify`` items are checked against a full
        chat-template render."""
        suffix_ids = self._encode_batch([self._suffix_text(text) for text in texts])
        truncated = np.zeros(len(texts), dtype=bool)
        for i, ids in enumerate(suffix_ids):
            if len(ids) > self.max_suffix:
                suffix_ids[i] = self._truncate(texts[i])
                truncated[i] = True
        untruncated = [i for i in range(len(texts)) if not truncated[i]][:verify]
        self._check([texts[i] for i in untruncated], [suffix_ids[i] for i in untruncated])
        return RenderedBatch(suffix_ids=suffix_ids, truncated=truncated)

    def verify(self, texts: Sequence[str]) -> None:
        """Render ``texts`` fully with the chat template; raise PrefixMismatchError unless each equals
        ``prefix_ids + suffix``."""
        self._check(texts, self._encode_batch([self._suffix_text(t) for t in texts]))

    def _check(self, texts: Sequence[str], suffix_ids: Sequence[list[int]]) -> None:
        n = len(self.prefix_ids)
        for text, suffix in zip(texts, suffix_ids, strict=True):
            full = self._encode(self._chat(text))
            if full[:n] != self.prefix_ids:
                raise PrefixMismatchError(
                    f"the rendered prompt for item {text[:40]!r} does not start with the shared prefix: the chat "
                    "template puts per-item or changing text (a date, the item length...) before the item"
                )
            if full[n:] != suffix:
                raise PrefixMismatchError(
                    f"tokenizing item {text[:40]!r} apart from the prefix gives different tokens than the full "
                    "prompt (a token merges across the prefix/item boundary); end the prefix with a newline"
                )

    def render_training(self, text: str, label_index: int) -> tuple[list[int], int]:
        """The exact scoring prompt of ``text`` and the code token the model should emit."""
        batch = self.render([text], verify=0)
        return self.prefix_ids + batch.suffix_ids[0], self.label_token_ids[label_index]
