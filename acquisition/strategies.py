"""Acquisition strategies as components (in the manner of small-text's ``QueryStrategy.query`` and
modAL's strategy functions). Each registered strategy declares the inputs it reads and is a pure
``choose(inputs, *, b, rng) -> Choice``: positions into the eligible rows plus a sentence saying why.

Inputs fall into three kinds, and a strategy's kinds decide what a round computes for it:
- scores: ``uncertainty`` (the ensemble's, per eligible row) and ``committee_p`` (the committee's
  label distributions — the K adapters and the embedding proxy, so it needs the labels too);
- embeddings: ``emb`` (the eligible rows) and ``labeled_emb`` (the labelled items);
- labels: ``committee_p`` (its proxy member trains on them) and ``shares`` (the portfolio's split,
  measured on the labels each arm brought).
A round whose strategy reads no scores is not scored at all and picks from the whole eligible pool
(annotate/services/planning.py). The round service gathers exactly the declared inputs and calls
``choose``; the cheap-learner simulation calls the same objects. Nothing here knows about items,
rounds or Django. tests/unit/test_strategies.py runs every registered strategy through one contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from acquisition.batch import (
    COLD_MODES,
    DEFAULT_SOFTRANK_BETA,
    ColdMode,
    RngLike,
    Selection,
    SelectionInputError,
    select_batch,
    select_cold_start,
    select_committee,
    select_portfolio,
    select_top_uncertainty,
)

Input = Literal["uncertainty", "committee_p", "emb", "labeled_emb", "shares"]
SCORE_INPUTS: frozenset[Input] = frozenset({"uncertainty", "committee_p"})
EMBEDDING_INPUTS: frozenset[Input] = frozenset({"emb", "labeled_emb"})
LABEL_INPUTS: frozenset[Input] = frozenset({"committee_p", "shares"})
# What a missing input is called in the error a strategy raises without it.
INPUT_NAMES: dict[str, str] = {
    "uncertainty": "uncertainty scores",
    "committee_p": "the committee's distributions",
    "emb": "embeddings",
    "labeled_emb": "the labelled items' embeddings",
    "shares": "the arms' shares",
}


class UnknownStrategyError(SelectionInputError):
    """A name that is not in the REGISTRY."""


@dataclass(frozen=True)
class Inputs:
    """What a strategy may read about the ``n`` eligible rows (row i of every array is eligible row
    i). Only the inputs the strategy declares need be given; the knobs come from the round's
    selection options (acquisition.batch.SelectionConfig)."""

    n: int
    uncertainty: np.ndarray | None = None  # float[N], higher = more uncertain
    committee_p: np.ndarray | None = None  # float[N, C]
    emb: np.ndarray | None = None  # float32[N, d]
    labeled_emb: np.ndarray | None = None  # float32[L, d]
    shares: dict[str, float] | None = None  # the portfolio's arm → share of the non-random picks
    random_share: float = 0.0  # share of b drawn uniformly first (the random slice)
    oversample: float = 1.0  # margin-kcenter's candidate set: top max(b, round(oversample · b))
    beta: float = DEFAULT_SOFTRANK_BETA  # the soft-rank draws' rank exponent


@dataclass(frozen=True)
class Choice:
    """Positions into the eligible rows (distinct, the random slice first), whether each came from a
    uniform draw, the portfolio's arm of each (empty for the other strategies), and why."""

    indices: np.ndarray  # int64[b]
    is_random: np.ndarray  # bool[b]
    arms: tuple[str, ...]
    explanation: str


Pick = Callable[[Inputs, int, np.random.Generator], Selection]
Explain = Callable[[Inputs, int, Selection], str]


@dataclass(frozen=True)
class Strategy:
    """One acquisition strategy: its name, the inputs it reads, how it picks and how it says why."""

    name: str
    needs: frozenset[Input]
    pick: Pick = field(repr=False)
    explain: Explain = field(repr=False)
    cold: bool = False  # a cold-start strategy: runs before any adapter can score

    @property
    def needs_scores(self) -> bool:
        return bool(self.needs & SCORE_INPUTS)

    @property
    def needs_embeddings(self) -> bool:
        return bool(self.needs & EMBEDDING_INPUTS)

    @property
    def needs_labels(self) -> bool:
        return bool(self.needs & LABEL_INPUTS)

    def choose(self, inputs: Inputs, *, b: int, rng: RngLike) -> Choice:
        """``b`` of the eligible rows (all of them when fewer). Deterministic for a given seed;
        raises SelectionInputError when a declared input is missing or b is not positive."""
        missing = sorted(name for name in self.needs if getattr(inputs, name) is None)
        if missing:
            what = " and ".join(INPUT_NAMES[m] for m in missing)
            raise SelectionInputError(f"strategy {self.name!r} needs {what}")
        if b <= 0:
            raise SelectionInputError(f"b must be positive, got {b}")
        b = min(b, inputs.n)
        if b == 0:
            return Choice(np.empty(0, np.int64), np.empty(0, bool), (), "no eligible item")
        sel = self.pick(inputs, b, np.random.default_rng(rng))
        return Choice(sel.indices, sel.is_random, sel.arms, self.explain(inputs, b, sel))


# --- the strategies -------------------------------------------------------------------------------


def _emb(inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
    """The embeddings, or a stand-in of ones for strategies that ignore them."""
    if inputs.emb is not None and inputs.labeled_emb is not None:
        return inputs.emb, inputs.labeled_emb
    return np.ones((inputs.n, 1), np.float32), np.zeros((0, 1), np.float32)


def _pick_random(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    return select_cold_start(*_emb(inputs), b=b, rng=gen, mode="random")


def _pick_kcenter(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    return select_cold_start(*_emb(inputs), b=b, rng=gen, mode="diversity")


def _pick_active(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    assert inputs.committee_p is not None  # checked by choose
    emb, labeled = _emb(inputs)
    return select_committee(
        inputs.committee_p, emb, labeled, b=b, random_share=inputs.random_share, rng=gen, beta=inputs.beta
    )


def _pick_portfolio(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    assert inputs.committee_p is not None and inputs.shares is not None  # checked by choose
    emb, labeled = _emb(inputs)
    return select_portfolio(
        inputs.committee_p,
        emb,
        labeled,
        b=b,
        random_share=inputs.random_share,
        shares=inputs.shares,
        rng=gen,
        beta=inputs.beta,
    )


def _pick_margin_kcenter(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    assert inputs.uncertainty is not None  # checked by choose
    emb, labeled = _emb(inputs)
    m = max(b, int(round(inputs.oversample * b)))
    return select_batch(inputs.uncertainty, emb, labeled, b=b, m=m, random_share=inputs.random_share, rng=gen)


def _pick_uncertainty(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
    assert inputs.uncertainty is not None  # checked by choose
    if len(inputs.uncertainty) != inputs.n:
        raise SelectionInputError(f"uncertainty has {len(inputs.uncertainty)} rows, expected {inputs.n}")
    return select_top_uncertainty(inputs.uncertainty, b=b, rng=gen)


def _cold_pick(mode: ColdMode) -> Pick:
    def pick(inputs: Inputs, b: int, gen: np.random.Generator) -> Selection:
        return select_cold_start(*_emb(inputs), b=b, rng=gen, mode=mode)

    return pick


def _said(text: str) -> Explain:
    """An explanation: ``text`` formatted with n, b, r (the random slice), beta and m."""

    def explain(inputs: Inputs, b: int, sel: Selection) -> str:
        r = int(sel.is_random.sum())
        m = max(b, int(round(inputs.oversample * b)))
        return text.format(n=inputs.n, b=b, r=r, rest=b - r, beta=inputs.beta, m=m)

    return explain


def _explain_portfolio(inputs: Inputs, b: int, sel: Selection) -> str:
    counts = {arm: sel.arms.count(arm) for arm in dict.fromkeys(sel.arms)}
    split = ", ".join(f"{arm} {count}" for arm, count in counts.items())
    return f"{b} of {inputs.n} eligible items split among the arms by their measured gain: {split}"


_COLD_TEXT: dict[str, str] = {
    "random": "cold start: {b} of {n} eligible items drawn uniformly",
    "diversity": "cold start: {b} of {n} eligible items by farthest-first k-center over the embeddings",
    "typical": "cold start: the most typical item of {b} embedding clusters among {n} eligible items",
    "hedged": "cold start: {rest} typical items and {r} drawn uniformly, of {n} eligible items",
}

_SCORES_EMB_LABELS: frozenset[Input] = frozenset({"committee_p", "emb", "labeled_emb"})
_ALL: tuple[Strategy, ...] = (
    Strategy(
        "active",
        _SCORES_EMB_LABELS,
        _pick_active,
        _said(
            "{r} of {n} eligible items drawn uniformly, {rest} by soft rank (β {beta:g}) of the committee's"
            " margin, near-duplicates of labelled or chosen items skipped"
        ),
    ),
    Strategy("random", frozenset(), _pick_random, _said("{b} of {n} eligible items drawn uniformly")),
    Strategy(
        "uncertainty-only",
        frozenset({"uncertainty"}),
        _pick_uncertainty,
        _said("the {b} most uncertain of {n} eligible items"),
    ),
    Strategy(
        "kcenter-only",
        frozenset({"emb", "labeled_emb"}),
        _pick_kcenter,
        _said("{b} of {n} eligible items by farthest-first k-center, away from the labelled items"),
    ),
    Strategy(
        "margin-kcenter",
        frozenset({"uncertainty", "emb", "labeled_emb"}),
        _pick_margin_kcenter,
        _said(
            "{r} of {n} eligible items drawn uniformly, {rest} by farthest-first k-center among the {m} most uncertain"
        ),
    ),
    Strategy("portfolio", _SCORES_EMB_LABELS | {"shares"}, _pick_portfolio, _explain_portfolio),
    *(
        Strategy(
            f"cold-start:{mode}",
            frozenset() if mode == "random" else frozenset({"emb", "labeled_emb"}),
            _cold_pick(mode),  # type: ignore[arg-type]  # one of COLD_MODES
            _said(_COLD_TEXT[mode]),
            cold=True,
        )
        for mode in COLD_MODES
    ),
)
REGISTRY: dict[str, Strategy] = {s.name: s for s in _ALL}
# What a round may be asked to run (the cold-start strategies are chosen by the round flow itself).
STRATEGIES: tuple[str, ...] = tuple(s.name for s in _ALL if not s.cold)


def strategy(name: str) -> Strategy:
    """The registered strategy of that name; UnknownStrategyError otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownStrategyError(f"unknown strategy {name!r}; expected one of {STRATEGIES}") from None


def cold_strategy(mode: str) -> Strategy:
    """The cold-start strategy of a cold mode (random, diversity, typical, hedged)."""
    if mode not in COLD_MODES:
        raise UnknownStrategyError(f"unknown cold-start mode {mode!r}; expected one of {COLD_MODES}")
    return REGISTRY[f"cold-start:{mode}"]
