"""The adaptive portfolio on arrays: the split of a batch among arms (floors, P(best), sums), the
gain estimate (an arm whose picks carry wrong labels measures below random, one whose picks are as
good as random measures near it), and the batch it draws (each arm its count, margin's picks the
most uncertain, the random slice first)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acquisition import portfolio
from acquisition.batch import committee_uncertainty, select_portfolio
from acquisition.portfolio import ARMS, MIN_SHARE, ArmGain, allocate, estimate_gains, split, split_labels
from acquisition.strategies import Inputs, strategy

shares_st = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4).map(
    lambda w: {f"a{i}": x / sum(w) for i, x in enumerate(w)}
)


@given(shares_st, st.integers(0, 200))
def test_allocate_sums_to_n_and_follows_the_shares(shares: dict[str, float], n: int) -> None:
    counts = allocate(shares, n)
    assert sum(counts.values()) == n and set(counts) == set(shares)
    if n >= len(shares):
        assert min(counts.values()) >= 1  # a share never rounds away to nothing
    for arm, share in shares.items():
        assert abs(counts[arm] - n * share) <= len(shares)


@given(
    st.lists(st.tuples(st.floats(-10, 10), st.floats(0, 5)), min_size=3, max_size=3),
    st.integers(0, 2**31),
)
@settings(max_examples=50, deadline=None)
def test_split_shares_sum_to_one_and_keep_every_floor(stats: list[tuple[float, float]], seed: int) -> None:
    gains = {arm: ArmGain(m, s, 20) for arm, (m, s) in zip(ARMS, stats, strict=True)}
    out = split(gains, np.random.default_rng(seed))
    assert abs(sum(out.shares.values()) - 1.0) < 1e-9
    assert min(out.shares.values()) >= MIN_SHARE - 1e-9
    assert out.in_charge == max(out.shares, key=lambda a: out.shares[a]) or out.shares[out.in_charge] == max(
        out.shares.values()
    )


def test_a_clear_winner_takes_the_batch_and_a_close_call_stays_mixed() -> None:
    rng = np.random.default_rng(0)
    clear = split(
        {"margin": ArmGain(6.0, 0.5, 40), "softrank": ArmGain(1.0, 0.5, 40), "random": ArmGain(0, 0, 40)}, rng
    )
    assert clear.in_charge == "margin" and clear.shares["margin"] > 0.65
    assert clear.shares["random"] == pytest.approx(MIN_SHARE, abs=0.01)
    assert "margin picks train the proxy +6.0" in clear.reason
    close = split(
        {"margin": ArmGain(0.2, 2.0, 10), "softrank": ArmGain(0.1, 2.0, 10), "random": ArmGain(0, 0, 10)}, rng
    )
    assert max(close.shares.values()) < 0.5


def test_random_leads_when_no_rule_beats_it_and_shares_are_equal_without_evidence() -> None:
    rng = np.random.default_rng(1)
    losing = split(
        {"margin": ArmGain(-4.0, 0.5, 30), "softrank": ArmGain(-2.0, 0.5, 30), "random": ArmGain(0, 0, 30)}, rng
    )
    assert losing.in_charge == "random" and "no rule beat random" in losing.reason
    early = split(
        {"margin": ArmGain(None, None, 3), "softrank": ArmGain(None, None, 3), "random": ArmGain(None, None, 3)}, rng
    )
    assert list(early.shares.values()) == pytest.approx([1 / 3] * 3) and early.reason.startswith("gathering evidence")


def _blobs(n: int, classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    centres = rng.normal(size=(classes, 16)) * 3
    y = rng.integers(0, classes, n)
    return centres[y] + rng.normal(size=(n, 16)), y


def test_picks_with_wrong_labels_measure_below_random_and_fair_picks_near_it() -> None:
    rng = np.random.default_rng(2)
    x, y = _blobs(600, 4, rng)
    noisy_y = y[400:460].copy()
    noisy_y = (noisy_y + 1 + rng.integers(0, 3, len(noisy_y))) % 4  # every label wrong
    gains = estimate_gains(
        seed_x=x[:8],
        seed_y=y[:8],
        uniform_x=x[100:200],
        uniform_y=y[100:200],
        picks={"margin": (x[300:360], y[300:360]), "softrank": (x[400:460], noisy_y)},
        n_classes=4,
        rng=np.random.default_rng(3),
    )
    assert gains["random"].mean == 0.0
    assert gains["softrank"].mean is not None and gains["softrank"].mean < -1  # they teach the wrong thing
    assert gains["margin"].mean is not None and abs(gains["margin"].mean) < 5  # as good as uniform picks
    assert gains["softrank"].mean < gains["margin"].mean - 1
    assert gains["margin"].n == 50  # the fewest any arm has: half the uniform items
    out = portfolio.split(gains, np.random.default_rng(4))
    assert out.shares["softrank"] == pytest.approx(MIN_SHARE, abs=0.02)


def test_too_few_picks_is_no_evidence() -> None:
    rng = np.random.default_rng(5)
    x, y = _blobs(100, 3, rng)
    arms = ["seed"] * 10 + ["random"] * 30 + ["margin"] * 5 + ["softrank"] * 40 + ["other"] * 15
    out = split_labels(x, y, arms, 3, rng)
    assert all(g.mean is None for g in out.gains.values()) and out.gains["margin"].n == 5


def test_the_portfolio_batch_gives_each_arm_its_count() -> None:
    rng = np.random.default_rng(6)
    n, c = 400, 5
    emb = rng.normal(size=(n, 32)).astype(np.float32)
    p = rng.dirichlet(np.ones(c) * 0.5, size=n)
    shares = {"margin": 0.5, "softrank": 0.3, "random": 0.2}
    sel = select_portfolio(p, emb, emb[:0], b=40, random_share=0.15, shares=shares, rng=7)
    assert len(set(sel.indices.tolist())) == 40 and len(sel.arms) == 40
    assert sel.is_random[:6].all() and not sel.is_random[6:].any() and set(sel.arms[:6]) == {"random"}
    counts = allocate(shares, 34)
    assert {a: sel.arms[6:].count(a) for a in ARMS} == counts
    margin = [int(i) for i, a in zip(sel.indices[6:], sel.arms[6:], strict=True) if a == "margin"]
    u = committee_uncertainty(p)
    rest = np.setdiff1d(np.arange(n), sel.indices[:6])
    top = rest[np.argsort(-u[rest], kind="stable")][: counts["margin"]]
    assert sorted(margin) == sorted(top.tolist())  # random rows share no near-duplicates here
    inputs = Inputs(n=len(emb), committee_p=p, emb=emb, labeled_emb=emb[:0], shares=shares, random_share=0.15)
    same = strategy("portfolio").choose(inputs, b=40, rng=7)
    assert same.indices.tolist() == sel.indices.tolist()  # one entry point, same draws


def test_portfolio_refuses_unknown_arms() -> None:
    p = np.full((10, 2), 0.5)
    with pytest.raises(ValueError, match="shares must name arms"):
        select_portfolio(p, np.eye(10), np.zeros((0, 10)), b=3, random_share=0.0, shares={"bald": 1.0}, rng=0)


def test_picks_that_cover_what_uniform_labels_miss_measure_above_random() -> None:
    """An imbalanced pool (one class 85 %): uniform labels are mostly that class; an arm whose picks
    cover the rare classes is worth more inside the labelled set than as many uniform labels."""
    rng = np.random.default_rng(8)
    centres = rng.normal(size=(5, 16))
    y = np.where(rng.random(4000) < 0.85, 0, rng.integers(1, 5, 4000))
    x = centres[y] + rng.normal(size=(4000, 16))
    rare = np.flatnonzero(y != 0)
    gains = estimate_gains(
        seed_x=x[:10],
        seed_y=y[:10],
        uniform_x=x[100:300],
        uniform_y=y[100:300],
        picks={"margin": (x[rare[-60:]], y[rare[-60:]]), "softrank": (x[3000:3060], y[3000:3060])},
        n_classes=5,
        rng=np.random.default_rng(9),
    )
    assert gains["margin"].mean is not None and gains["margin"].mean > 1.5  # measured: +3.6 ± 0.8
    assert gains["softrank"].mean is not None and abs(gains["softrank"].mean) < gains["margin"].mean
