from __future__ import annotations

import numpy as np
import pytest

from scoring.rescoring import RescoringInputError, choose_candidates, first_pass_kind, second_stage, top_share


def test_candidates_are_last_rounds_top_plus_a_random_sample() -> None:
    rng = np.random.default_rng(0)
    pool = np.arange(1000)
    last_ids = np.arange(0, 200)
    last_unc = np.linspace(0, 1, 200)  # ids 180..199 are the top 10 %
    out = choose_candidates(
        pool, sample=100, last_ids=last_ids, last_uncertainty=last_unc, carry_top_share=0.1, rng=rng
    )
    assert len(out) == 100 and len(np.unique(out)) == 100
    assert set(range(180, 200)) <= set(out.tolist())
    assert np.isin(out, pool).all()


def test_carried_items_no_longer_in_the_pool_are_skipped() -> None:
    rng = np.random.default_rng(1)
    pool = np.arange(100, 200)  # ids < 100 were labelled since
    out = choose_candidates(
        pool, sample=10, last_ids=np.arange(0, 20), last_uncertainty=np.ones(20), carry_top_share=1.0, rng=rng
    )
    assert len(out) == 10 and np.isin(out, pool).all()


def test_zero_or_large_sample_scores_the_whole_pool() -> None:
    rng = np.random.default_rng(2)
    pool = np.array([5, 3, 9])
    empty = np.array([], dtype=np.int64)
    for sample in (0, 3, 10):
        out = choose_candidates(
            pool, sample=sample, last_ids=empty, last_uncertainty=empty, carry_top_share=0.1, rng=rng
        )
        assert out.tolist() == [3, 5, 9]


def test_same_seed_same_candidates() -> None:
    kwargs = dict(sample=50, last_ids=np.arange(10), last_uncertainty=np.arange(10.0), carry_top_share=0.2)
    a = choose_candidates(np.arange(500), rng=np.random.default_rng(7), **kwargs)  # type: ignore[arg-type]
    b = choose_candidates(np.arange(500), rng=np.random.default_rng(7), **kwargs)  # type: ignore[arg-type]
    assert a.tolist() == b.tolist()


def test_two_stage_keeps_the_most_uncertain_share_of_the_first_pass() -> None:
    rng = np.random.default_rng(3)
    first = np.array([0.1, 0.9, 0.5, 0.8, 0.2])
    assert second_stage(first, 0.4, rng).tolist() == [1, 3]
    assert second_stage(first, 1.0, rng).tolist() == [0, 1, 2, 3, 4]
    assert first_pass_kind("bald") == "entropy" and first_pass_kind("margin") == "margin"


def test_top_share_breaks_ties_at_random_and_validates() -> None:
    picks = {int(top_share(np.zeros(10), 0.1, np.random.default_rng(s))[0]) for s in range(30)}
    assert len(picks) > 3
    with pytest.raises(RescoringInputError):
        top_share(np.zeros(3), 1.5, np.random.default_rng(0))
