"""The default strategy's parts: the embedding proxy, the committee, soft-rank draws, and the
committee batch (random slice, no near-duplicates, always full)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acquisition.batch import (
    NEAR_DUPLICATE,
    SelectionInputError,
    committee_distribution,
    committee_uncertainty,
    select_committee,
    soft_rank_sample,
)
from acquisition.strategies import Inputs, strategy
from predictor.embedding_proxy import ProxyInputError, fit_proxy

FAST = settings(max_examples=50, deadline=None)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_proxy_matches_scikit_learns_logistic_regression() -> None:
    """Same objective as LogisticRegression(C=1, lbfgs, multinomial) on unit rows: same probabilities."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    centres = _unit(rng, 4, 16)
    y = rng.integers(0, 4, size=120)
    x = centres[y] + 0.6 * rng.standard_normal((120, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ours = fit_proxy(x, y, 4).predict_proba(x[:30])
    ref = LogisticRegression(C=1.0, max_iter=2000, tol=1e-10).fit(x, y).predict_proba(x[:30])
    np.testing.assert_allclose(ours, ref, atol=2e-4)


def test_proxy_gives_absent_classes_little_probability() -> None:
    rng = np.random.default_rng(1)
    x = _unit(rng, 40, 8)
    y = np.array([0, 1] * 20)
    p = fit_proxy(x, y, 5).predict_proba(x)
    assert p.shape == (40, 5)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert p[:, 2:].max() < p[:, :2].max(axis=1).min()


def test_proxy_rejects_bad_input() -> None:
    with pytest.raises(ProxyInputError, match="labels must lie in 0..2"):
        fit_proxy(np.ones((3, 2)), np.array([0, 1, 3]), 3)
    with pytest.raises(ProxyInputError, match="matching non-empty"):
        fit_proxy(np.ones((3, 2)), np.array([0, 1]), 3)
    with pytest.raises(ProxyInputError, match="NaN"):
        fit_proxy(np.array([[np.nan, 1.0]]), np.array([0]), 2)


@FAST
@given(n=st.integers(1, 60), data=st.data())
def test_soft_rank_draws_are_distinct_and_seeded(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    score = np.asarray(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    picks = soft_rank_sample(score, k, 7)
    assert len(picks) == k == len(set(picks.tolist())) and (picks >= 0).all() and (picks < n).all()
    np.testing.assert_array_equal(picks, soft_rank_sample(score, k, 7))


def test_soft_rank_prefers_high_scores_but_is_not_top_k() -> None:
    score = np.linspace(0, 1, 200)  # position 199 ranks first
    counts = np.zeros(200)
    for seed in range(300):
        counts[soft_rank_sample(score, 10, seed)] += 1
    top, bottom = counts[-20:].sum(), counts[:100].sum()
    # p ∝ 1/rank: the 20 most uncertain hold Σ_{r<=20} 1/r ≈ 3.6 of the weight, the 100 least ≈ 0.69.
    assert top > 3 * bottom
    assert counts[:-10].sum() > 0.3 * counts.sum()  # and yet most draws are not plain top-10
    # Scale-free: the same ranks give the same draws, however peaked the scores are.
    np.testing.assert_array_equal(soft_rank_sample(score**8, 10, 3), soft_rank_sample(score, 10, 3))
    # beta = 0 is uniform sampling.
    flat = np.zeros(200)
    for seed in range(300):
        flat[soft_rank_sample(score, 10, seed, beta=0.0)] += 1
    assert abs(flat[-20:].sum() - flat[:20].sum()) < 0.35 * flat[-20:].sum()


def test_committee_counts_the_proxy_as_one_member() -> None:
    llm = np.array([[0.9, 0.1], [0.5, 0.5]])
    proxy = np.array([[0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(committee_distribution(llm, proxy, 2), [[0.6, 0.4], [0.5, 0.5]])
    with pytest.raises(SelectionInputError, match="must both be"):
        committee_distribution(llm, proxy[:1], 2)
    # committee "blend": the predictor's own mixture at the fitted weight, whatever K is
    np.testing.assert_allclose(committee_distribution(llm, proxy, 2, weight=0.25), [[0.225, 0.775], [0.5, 0.5]])
    np.testing.assert_allclose(committee_distribution(llm, proxy, 7, weight=1.0), llm)
    np.testing.assert_allclose(committee_distribution(llm, proxy, 2, weight=0.0), proxy)
    for bad in (-0.1, 1.5):
        with pytest.raises(SelectionInputError, match=r"blend weight must lie in \[0, 1\]"):
            committee_distribution(llm, proxy, 2, weight=bad)


@FAST
@given(n=st.integers(1, 20), c=st.integers(2, 8), w=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_a_blend_committee_is_a_distribution_whose_uncertainty_lies_between_its_parts(
    n: int, c: int, w: float, seed: int
) -> None:
    """Each row of w·p̄ + (1 - w)·p_proxy sums to 1; with both parts sure of one label (the same one),
    its uncertainty (1 - margin) is no larger than the less sure part's."""
    rng = np.random.default_rng(seed)
    llm, proxy = rng.dirichlet(np.ones(c), size=n), rng.dirichlet(np.ones(c), size=n)
    p = committee_distribution(llm, proxy, 2, weight=w)
    np.testing.assert_allclose(p, w * llm + (1 - w) * proxy)  # w on the adapters, whatever K
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert (p >= 0).all()
    same = np.zeros((n, c))
    same[:, 0] = 1.0
    sharp = 0.5 * same + 0.5 * proxy
    mixed = committee_uncertainty(committee_distribution(same, sharp, 2, weight=w))
    assert (mixed <= np.maximum(committee_uncertainty(same), committee_uncertainty(sharp)) + 1e-9).all()


def test_committee_batch_has_the_random_slice_and_skips_near_duplicates() -> None:
    rng = np.random.default_rng(2)
    base = _unit(rng, 30, 12)
    emb = np.concatenate([base, base + 1e-3])  # every text twice (near-duplicate pairs)
    p = np.tile([[0.5, 0.5]], (60, 1))  # all equally uncertain
    sel = select_committee(p, emb, np.zeros((0, 12)), b=20, random_share=0.25, rng=0)
    assert len(sel.indices) == 20 == len(set(sel.indices.tolist())) and sel.is_random.sum() == 5
    chosen = emb[sel.indices[~sel.is_random]] / np.linalg.norm(emb[sel.indices[~sel.is_random]], axis=1)[:, None]
    all_units = emb / np.linalg.norm(emb, axis=1)[:, None]
    for i, row in zip(sel.indices[~sel.is_random], chosen, strict=True):
        others = [j for j in sel.indices if j != i]
        assert (all_units[others] @ row).max() <= NEAR_DUPLICATE + 1e-6  # no pair of a text and its copy
    # A labeled item's copy is never drawn while something else is left.
    sel2 = select_committee(p[:30], base, base[:10], b=10, random_share=0.0, rng=1)
    assert not set(sel2.indices.tolist()) & set(range(10))


def test_committee_batch_fills_up_from_duplicates_when_nothing_else_is_left() -> None:
    emb = np.tile([[1.0, 0.0]], (8, 1)).astype(np.float32)
    sel = select_committee(np.tile([[0.6, 0.4]], (8, 1)), emb, emb[:1], b=5, random_share=0.0, rng=0)
    assert len(set(sel.indices.tolist())) == 5


def test_committee_batch_prefers_uncertain_items() -> None:
    rng = np.random.default_rng(3)
    emb = _unit(rng, 400, 32)
    sure = rng.random(400) < 0.5
    p = np.where(sure[:, None], [[0.98, 0.02]], [[0.55, 0.45]])
    picked = np.zeros(400)
    for seed in range(20):
        sel = select_committee(p, emb, np.zeros((0, 32)), b=20, random_share=0.0, rng=seed)
        picked[sel.indices] += 1
    assert picked[~sure].sum() > 3 * picked[sure].sum()


def test_active_strategy_needs_the_committee() -> None:
    emb = _unit(np.random.default_rng(4), 10, 4)
    with pytest.raises(SelectionInputError, match="needs the committee"):
        strategy("active").choose(
            Inputs(n=10, uncertainty=np.zeros(10), emb=emb, labeled_emb=np.zeros((0, 4))), b=3, rng=0
        )
    inputs = Inputs(n=10, committee_p=np.full((10, 2), 0.5), emb=emb, labeled_emb=np.zeros((0, 4)))
    sel = strategy("active").choose(inputs, b=3, rng=0)
    assert len(sel.indices) == 3


def test_committee_batch_follows_the_soft_rank_exponent() -> None:
    """softrank_beta steers the committee's draws: a larger exponent concentrates them on the most
    uncertain ranks (β = 8: all from the top few ranks), β = 0 draws uniformly; every β keeps the random slice
    and the same seeded determinism."""
    rng = np.random.default_rng(5)
    emb = _unit(rng, 300, 32)
    margin = np.linspace(0.0, 0.9, 300)  # item 0 the most uncertain
    p = np.stack([(1 + margin) / 2, (1 - margin) / 2], axis=1)
    top50 = {}
    for beta in (0.0, 1.0, 2.0, 8.0):
        hits = 0
        for seed in range(10):
            sel = select_committee(p, emb, np.zeros((0, 32)), b=20, random_share=0.25, rng=seed, beta=beta)
            assert sel.is_random.sum() == 5
            hits += int((sel.indices[~sel.is_random] < 50).sum())
            again = select_committee(p, emb, np.zeros((0, 32)), b=20, random_share=0.25, rng=seed, beta=beta)
            np.testing.assert_array_equal(sel.indices, again.indices)
        top50[beta] = hits / 150  # share of the 15 committee draws x 10 seeds among the 50 most uncertain
    assert top50[0.0] < 0.35 < top50[1.0] < top50[2.0] < top50[8.0] == 1.0
    chosen = strategy("active").choose(
        Inputs(n=300, committee_p=p, emb=emb, labeled_emb=np.zeros((0, 32)), beta=8.0), b=20, rng=1
    )
    assert max(chosen.indices.tolist()) < 30  # near the top-k batch, shuffled among adjacent ranks
