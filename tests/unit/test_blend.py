"""The round's predictor on arrays: the adapters' mean blended with the embedding proxy at a weight
fitted on held-out batches (predictor/blend.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from predictor.blend import (
    FLOOR,
    GRID,
    MIN_HELDOUT,
    BlendInputError,
    HeldOut,
    blend,
    choose_weight,
    fit_weight,
    pool,
    weight_counts,
)


def _onehot(labels: np.ndarray, n_classes: int, sharp: float = 0.9) -> np.ndarray:
    p = np.full((len(labels), n_classes), (1 - sharp) / (n_classes - 1))
    p[np.arange(len(labels)), labels] = sharp
    return p


def test_blend_mixes_rows_and_keeps_distributions():
    a = np.array([[1.0, 0.0], [0.5, 0.5]])
    b = np.array([[0.0, 1.0], [0.2, 0.8]])
    out = blend(a, b, 0.7)
    assert np.allclose(out, [[0.7, 0.3], [0.41, 0.59]])
    assert np.allclose(out.sum(axis=1), 1.0)
    assert np.array_equal(blend(a, b, 1.0), a) and np.array_equal(blend(a, b, 0.0), b)


@pytest.mark.parametrize(
    "a, b, weight",
    [
        (np.ones((2, 3)) / 3, np.ones((2, 2)) / 2, 0.5),  # class counts differ
        (np.ones(3) / 3, np.ones(3) / 3, 0.5),  # not [N, C]
        (np.ones((2, 2)) / 2, np.ones((2, 2)) / 2, 1.5),  # weight outside [0, 1]
        (np.array([[np.nan, 1.0]]), np.array([[0.5, 0.5]]), 0.5),
    ],
)
def test_blend_refuses_bad_input(a, b, weight):
    with pytest.raises(BlendInputError):
        blend(a, b, weight)


def test_no_evidence_or_too_little_keeps_the_adapters_alone():
    assert fit_weight([]).weight == 1.0 and fit_weight([]).n == 0
    y = np.array([0, 1, 0])
    few = HeldOut(y=y, p_llm=_onehot(1 - y, 2), p_proxy=_onehot(y, 2))
    fit = fit_weight([few])
    assert fit.n == 3 < MIN_HELDOUT
    assert fit.weight == 1.0 and "adapters alone" in fit.reason


def test_the_better_part_wins_and_a_complementary_pair_mixes():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, size=60)
    right, wrong = _onehot(y, 4), _onehot((y + 1) % 4, 4)
    assert fit_weight([HeldOut(y=y, p_llm=right, p_proxy=wrong)]).weight > 0.5
    assert fit_weight([HeldOut(y=y, p_llm=wrong, p_proxy=right)]).weight < 0.5
    # The adapters are fairly sure and right on the first half, unsure (and a little wrong) on the second,
    # where the proxy is right: only a mix gets both halves, and a mix is the likeliest (w ≈ 0.7).
    half = len(y) // 2
    llm = _onehot(y, 4, sharp=0.6)
    llm[half:] = 0.25
    llm[np.arange(half, len(y)), (y[half:] + 1) % 4] = 0.28
    proxy = _onehot(y, 4, sharp=0.7)
    proxy[:half] = _onehot((y[:half] + 2) % 4, 4, sharp=0.7)
    fit = fit_weight([HeldOut(y=y, p_llm=llm, p_proxy=proxy)])
    assert 0.0 < fit.weight < 1.0
    assert fit.accuracy["blend"] == 1.0 and fit.accuracy["llm"] == 0.5 and fit.accuracy["proxy"] == 0.5


def test_evidence_of_several_batches_is_pooled_and_checked():
    y = np.arange(12) % 3
    part = HeldOut(y=y, p_llm=_onehot(y, 3), p_proxy=_onehot(y, 3))
    assert fit_weight([part, part]).n == 24
    with pytest.raises(BlendInputError):
        fit_weight([HeldOut(y=y[:5], p_llm=_onehot(y, 3), p_proxy=_onehot(y, 3))])
    with pytest.raises(BlendInputError):
        fit_weight([HeldOut(y=y + 3, p_llm=_onehot(y, 3), p_proxy=_onehot(y, 3))])


def _dist(n: int, c: int) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, (n, c), elements=st.floats(0.01, 1.0)).map(lambda a: a / a.sum(axis=1, keepdims=True))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(MIN_HELDOUT, 40), st.integers(2, 6))
def test_the_fitted_blend_is_never_worse_than_the_adapters_and_never_the_proxy_alone(data, n, c):
    """On its evidence the pick gets at least as many right as the adapters alone (w = 1 is on the grid) and
    as any other weight from FLOOR up, and it is never the proxy alone however well that does."""
    y = data.draw(arrays(np.int64, n, elements=st.integers(0, c - 1)))
    fit = fit_weight([HeldOut(y=y, p_llm=data.draw(_dist(n, c)), p_proxy=data.draw(_dist(n, c)))])
    assert fit.weight in GRID and fit.weight >= FLOOR
    blended, llm = fit.accuracy["blend"], fit.accuracy["llm"]
    assert blended is not None and llm is not None and blended >= llm


def test_the_clinc150_round_that_took_the_proxy_alone_blends_now():
    """Session 26's deployed CLINC150 run, round 3 (bench/raw/2026-12-06/deployed-72b9736-clinc150.tgz, its records'
    blend evidence of rounds 2 and 3, the held-out batches the fit pools): the proxy alone got 16 of 100 right, the
    adapters 14, so the rule took w = 0 and the round's test accuracy fell from 39.1 % to 11.4 %; with the floor it
    cannot take the proxy alone."""
    round2 = {
        "n": 50,
        "gain": [0] * 11,
        "loss": [5, 1] + [0] * 9,
        "loglik": [
            -690.7755,
            -453.0222,
            -424.6031,
            -407.4499,
            -395.0795,
            -385.4844,
            -377.6445,
            -370.8781,
            -365.0028,
            -359.8203,
            -355.1844,
        ],
        "correct": [0, 4] + [5] * 9,
    }
    round3 = {
        "n": 50,
        "gain": [10, 3] + [1] * 7 + [0, 0],
        "loss": [3] + [1] * 7 + [0, 0, 0],
        "loglik": [
            -488.6284,
            -343.5551,
            -320.2989,
            -306.2523,
            -296.2463,
            -288.555,
            -282.4076,
            -277.4189,
            -273.4284,
            -270.5607,
            -273.6012,
        ],
        "correct": [16, 11, 9, 9, 9, 9, 9, 9, 10, 9, 9],
    }
    counts = pool([round2, round3])
    assert choose_weight(counts, floor=0.0) == 0.0  # what the run did: 16 right at w = 0
    # From the floor up 15 right at w = 0.1 and 0.8, 0.8 the likelier: the test set said 39.1 % (w = 0: 11.4 %)
    assert choose_weight(counts) == 0.8
    assert choose_weight(counts, by="loglik") == 1.0  # by likelihood the adapters alone
    counts["loglik"][0] = 0.0  # were the proxy alone the likeliest too, still not the proxy alone
    assert choose_weight(counts, by="loglik") >= FLOOR


def test_counts_add_up_and_replay_the_fit():
    rng = np.random.default_rng(3)
    parts = []
    for n in (30, 25, 40):
        y = rng.integers(0, 5, size=n)
        parts.append(
            HeldOut(y=y, p_llm=rng.dirichlet(np.ones(5), size=n), p_proxy=rng.dirichlet(np.ones(5) * 0.5, size=n))
        )
    counts = [weight_counts(e.p_llm, e.p_proxy, e.y) for e in parts]
    pooled = pool(counts)
    assert pooled["n"] == 95 and len(pooled["correct"]) == len(GRID)
    whole = weight_counts(*(np.concatenate([getattr(e, k) for e in parts]) for k in ("p_llm", "p_proxy", "y")))
    assert pooled["correct"] == whole["correct"] and pooled["gain"] == whole["gain"]
    # At w = 1 the blend is the adapters: nothing gained, nothing lost.
    assert pooled["gain"][-1] == pooled["loss"][-1] == 0
    assert choose_weight(pooled) == fit_weight(parts).weight  # a replay from the counts picks the same


def test_the_guard_keeps_the_adapters_unless_the_gain_is_clear():
    counts = {"n": 100, "correct": [60] * 10 + [58], "gain": [6] * 10 + [0], "loss": [4] * 10 + [0]}
    counts["loglik"] = [-50.0] * 11
    acc: dict[str, Any] = {"by": "accuracy", "floor": 0.0}
    assert choose_weight(counts, **acc) == 0.9  # two items more: the plain rule moves
    assert choose_weight(counts, guard=1.0, **acc) == 1.0  # 6 - 4 < sqrt(10): not clear
    clear = {**counts, "gain": [12] * 10 + [0], "loss": [2] * 10 + [0]}
    assert choose_weight(clear, guard=1.0, **acc) == 0.9  # 12 - 2 >= sqrt(14)
    assert choose_weight({**counts, "n": 5}, **acc) == 1.0  # too few items
    assert choose_weight(counts) == 0.9 and choose_weight(counts, by="loglik") == 0.9  # equal likelihoods
    with pytest.raises(BlendInputError):
        choose_weight({**counts, "correct": [1, 2]})
    with pytest.raises(BlendInputError):
        pool([])
