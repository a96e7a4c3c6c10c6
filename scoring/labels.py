"""Label codes: the single token the model emits right after the assistant turn opens.

A label is scored by the log-probability of its code's token at that one position, so every code
must be exactly one token, and no two labels may share a first token either as written or with a
leading space (tokenizers that merge the space into the word would otherwise let one label's
probability leak into another's). vLLM's ``logprob_token_ids`` takes at most 128 ids.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

# 256: CLINC150's 151 intents must fit. The vLLM engine reads at most VLLM_MAX_LABELS label logprobs
# per request (its logprob_token_ids limit) and refuses larger label sets with a clear error.
MAX_LABELS = 256
VLLM_MAX_LABELS = 128


class LabelCodeError(ValueError):
    """Codes that cannot be scored. ``collisions`` names pairs of labels that share a first token,
    ``multi_token`` the labels whose code is not one token; ``suggestions`` maps every label name to
    a code that works with this tokenizer."""

    def __init__(
        self,
        message: str,
        *,
        collisions: list[tuple[str, str]] | None = None,
        multi_token: list[str] | None = None,
        suggestions: dict[str, str] | None = None,
    ) -> None:
        self.collisions = collisions or []
        self.multi_token = multi_token or []
        self.suggestions = suggestions or {}
        if self.suggestions:
            proposal = ", ".join(f"{name}={code}" for name, code in self.suggestions.items())
            message = f"{message}. Codes that work: {proposal}"
        super().__init__(message)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _first_tokens(tokenizer: Any, code: str) -> tuple[int, int] | None:
    """(first token as written, first token after a space), or None when the code is empty."""
    plain, spaced = _ids(tokenizer, code), _ids(tokenizer, " " + code)
    if not plain or not spaced:
        return None
    return plain[0], spaced[0]


def _check(tokenizer: Any, codes: Sequence[str], names: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    collisions: list[tuple[str, str]] = []
    multi_token: list[str] = []
    owner: dict[int, str] = {}
    for code, name in zip(codes, names, strict=True):
        firsts = _first_tokens(tokenizer, code) if code.strip() == code else None
        if firsts is None or len(_ids(tokenizer, code)) != 1:
            multi_token.append(name)
            continue
        for token in dict.fromkeys(firsts):
            other = owner.setdefault(token, name)
            if other != name and (other, name) not in collisions:
                collisions.append((other, name))
    return collisions, multi_token


def label_token_ids(tokenizer: Any, codes: Sequence[str], names: Sequence[str] | None = None) -> list[int]:
    """The token id of each code as the model emits it (no leading space). Raises LabelCodeError
    naming the colliding or multi-token labels and proposing codes that work."""
    label_names = list(names) if names is not None else list(codes)
    if len(label_names) != len(codes):
        raise LabelCodeError(f"{len(codes)} codes for {len(label_names)} label names")
    if not 1 <= len(codes) <= MAX_LABELS:
        raise LabelCodeError(f"{len(codes)} labels: between 1 and {MAX_LABELS} are supported")
    collisions, multi_token = _check(tokenizer, codes, label_names)
    if collisions or multi_token:
        problems = [f"labels {a!r} and {b!r} share a first token" for a, b in collisions]
        problems += [f"the code of label {name!r} is not a single token" for name in multi_token]
        suggestions = dict(zip(label_names, suggest_codes(tokenizer, label_names), strict=True))
        raise LabelCodeError(
            "; ".join(problems), collisions=collisions, multi_token=multi_token, suggestions=suggestions
        )
    return [_ids(tokenizer, code)[0] for code in codes]


def _candidates(name: str) -> list[str]:
    """Codes derived from the label name first (readable for annotators reading the prompt)."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in name).split() if w]
    out: list[str] = []
    if words:
        out += [words[0], words[0].capitalize(), words[0].upper(), words[0][0].upper(), words[0][0].lower()]
    return out


def _fallback_pool(tokenizer: Any) -> list[str]:
    """Letters and digits, then short alphabetic vocabulary entries, in a fixed order."""
    pool = list(string.ascii_uppercase + string.ascii_lowercase + string.digits)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    words = sorted((tid, tok) for tok, tid in vocab.items() if 2 <= len(tok) <= 4 and tok.isalpha() and tok.isascii())
    pool += [tok for _, tok in words]
    return pool


def suggest_codes(tokenizer: Any, names: Sequence[str]) -> list[str]:
    """One working code per label name: a word of the name when it is a free single token, else the
    next free letter, digit or short vocabulary word."""
    if len(names) > MAX_LABELS:
        raise LabelCodeError(f"{len(names)} labels: at most {MAX_LABELS} are supported")
    used: set[int] = set()
    used_codes: set[str] = set()
    pool: list[str] | None = None

    def take(code: str) -> bool:
        if code in used_codes or len(_ids(tokenizer, code)) != 1:
            return False
        firsts = _first_tokens(tokenizer, code)
        if firsts is None or used & set(firsts):
            return False
        used.update(firsts)
        used_codes.add(code)
        return True

    result: list[str] = []
    for name in names:
        chosen = next((c for c in _candidates(name) if take(c)), None)
        if chosen is None:
            pool = pool if pool is not None else _fallback_pool(tokenizer)
            chosen = next((c for c in pool if take(c)), None)
        if chosen is None:
            raise LabelCodeError(f"no free single-token code left for label {name!r}")
        result.append(chosen)
    return result
