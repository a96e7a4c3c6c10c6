"""Objects shaped like vLLM's outputs (vLLM is not installed on CPU machines), for the engine's pure
conversion helpers: RequestOutput → CompletionOutput → logprobs, either FlatLogprobs
(``flat_logprobs=True``, what the engine asks for) or the classic list[dict[token id, Logprob]]."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class FakeFlatLogprobs:  # vllm.logprobs.FlatLogprobs, flat_logprobs=True
    start_indices: list[int] = field(default_factory=list)
    end_indices: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


@dataclass
class FakeLogprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None


@dataclass
class FakeCompletion:
    logprobs: Any


@dataclass
class FakeRequestOutput:
    outputs: list[FakeCompletion]


@dataclass
class FakeMetric:
    name: str
    value: float


def fake_output(ids: list[int], values: list[float], flat: bool) -> FakeRequestOutput:
    """One request's output whose first generated position reports these (token id, logprob) pairs."""
    if flat:
        lp: Any = FakeFlatLogprobs([0], [len(ids)], list(ids), list(values))
    else:
        lp = [{t: FakeLogprob(v) for t, v in zip(ids, values, strict=True)}]
    return FakeRequestOutput([FakeCompletion(lp)])


def fake_outputs(logp: np.ndarray, label_ids: list[int], sampled: int, flat: bool) -> list[FakeRequestOutput]:
    """One output per (adapter, item), adapter-major, reporting the label ids plus the sampled token."""
    outs = []
    for row in logp.reshape(-1, logp.shape[-1]):
        # vLLM does not promise an order: report the labels reversed, after the sampled token.
        outs.append(fake_output([sampled, *label_ids[::-1]], [-0.01, *row.tolist()[::-1]], flat))
    return outs
