"""The managed-batch road: a batch-API request manifest for the items still to label, and the
results file read back (no Django here).

One JSON line per item: ``custom_id`` = ``<prompt version>:<item id>``, the rendered chat (the same
messages the local engines render through their chat template), ``max_tokens`` 1 and the allowed
labels (the label codes, one token each). The prompt version is a hash of the prompt specification
(instructions, labels and their codes, few-shot examples, item template): a results line whose
custom_id carries another version answers another prompt, and is refused.

A results line is either ``{"custom_id", "label": CODE}`` or a chat-completions batch output
(``{"custom_id", "response": {"body": {"choices": [{"message": {"content": CODE}}]}}}``).

Where the provider returns logprobs, the answer carries a distribution over the labels, which the
auto-labelling thresholds need (annotate/services/batch_api.py): ``"logprobs": {CODE: logprob, ...}``
(or ``"logprob"``, the answered code's alone) on a plain line; the chat output's
``choices[0].logprobs.content[0]`` (``logprob`` and ``top_logprobs``). From the top logprobs, a label
code among them gets its probability and one not among them 0, normalised over the labels (the label
mass, their sum, is kept); from the answered code's probability q alone, the other labels share 1 − q
equally and the mass is unknown. A line without logprobs has no distribution.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from scoring.prompts import PromptSpec, build_messages

MAX_TOKENS = 1  # one label code is one token: the answer is the code, nothing else


class ManifestError(ValueError):
    """A results file that cannot be imported: another prompt version, a malformed line, an answer
    outside the allowed labels. The message is for people."""


def prompt_version(spec: PromptSpec) -> str:
    return hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:16]


def custom_id(version: str, item_id: int) -> str:
    return f"{version}:{int(item_id)}"


def manifest_lines(spec: PromptSpec, items: Iterable[tuple[int, str]], *, model: str = "") -> Iterator[str]:
    """One request line per (item id, text)."""
    version, codes = prompt_version(spec), [label.code for label in spec.labels]
    for item_id, text in items:
        body: dict[str, Any] = {"messages": build_messages(spec, text), "max_tokens": MAX_TOKENS}
        if model:
            body["model"] = model
        record = {"custom_id": custom_id(version, item_id), "body": body, "allowed_labels": codes}
        yield json.dumps(record, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class Answer:
    item_id: int
    label_index: int
    version: str
    probs: tuple[float, ...] = ()  # over the labels, in label order, summing to 1; () without logprobs
    mass: float | None = None  # probability on the label codes; None: not known


def _logprobs(record: dict[str, Any]) -> tuple[dict[str, float], float | None]:
    """({token: logprob} of the top logprobs, the answered token's logprob) as the line reports them."""
    if "label" in record:
        top = record.get("logprobs") or {}
        if not isinstance(top, dict):
            raise ManifestError(f"{record.get('custom_id')!r}: logprobs must map label codes to logprobs")
        return {str(k).strip(): v for k, v in top.items()}, record.get("logprob")
    try:
        first = record["response"]["body"]["choices"][0]["logprobs"]["content"][0]
    except (KeyError, IndexError, TypeError):
        return {}, None
    top = {str(t.get("token", "")).strip(): t.get("logprob") for t in first.get("top_logprobs") or []}
    return top, first.get("logprob")


def _probability(value: Any, where: str) -> float:
    try:
        logprob = float(value)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{where}: logprob {value!r} is not a number") from exc
    if math.isnan(logprob) or logprob > 1e-6:  # a rounding hair over 0 is 0
        raise ManifestError(f"{where}: logprob {value!r} is not a log probability (at most 0)")
    return math.exp(min(logprob, 0.0))


def distribution(record: dict[str, Any], codes: list[str], answered: int) -> tuple[tuple[float, ...], float | None]:
    """The answer's distribution over the labels and its label mass, from the line's logprobs."""
    top, own = _logprobs(record)
    where = str(record.get("custom_id"))
    if top:
        p = [_probability(top[code], where) if code in top else 0.0 for code in codes]
        mass = sum(p)
        if mass <= 0.0:
            raise ManifestError(f"{where}: no label code among the top logprobs")
        return tuple(x / mass for x in p), mass
    if own is None:
        return (), None
    q = _probability(own, where)
    rest = (1.0 - q) / (len(codes) - 1) if len(codes) > 1 else 0.0
    return tuple(q if i == answered else rest for i in range(len(codes))), None


def _answer_text(record: dict[str, Any]) -> str:
    if "label" in record:
        return str(record["label"])
    try:
        return str(record["response"]["body"]["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError) as exc:
        raise ManifestError(f"{record.get('custom_id')!r}: no label and no chat completion in the line") from exc


def parse_results(lines: Iterable[str], spec: PromptSpec) -> list[Answer]:
    """Every answer of a results file, or ManifestError for the first line that cannot be taken (the
    file is refused whole: nothing of it is imported)."""
    version, codes = prompt_version(spec), [label.code for label in spec.labels]
    answers = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            line_version, _, raw_id = str(record["custom_id"]).rpartition(":")
            item_id = int(raw_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"line {number}: not a results line with a custom_id ({exc})") from exc
        if line_version != version:
            raise ManifestError(
                f"line {number}: prompt version {line_version or '(none)'} is not the current one ({version}): "
                "the manifest was exported under another prompt; export a new one"
            )
        code = _answer_text(record).strip()
        if code not in codes:
            raise ManifestError(f"line {number}: answer {code!r} is not one of the allowed labels {codes}")
        probs, mass = distribution(record, codes, codes.index(code))
        answers.append(Answer(item_id, codes.index(code), version, probs, mass))
    return answers
