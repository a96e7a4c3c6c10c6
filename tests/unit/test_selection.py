"""Batch selection: valid, diverse, deterministic batches, and named errors for bad inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acquisition.batch import (
    SelectionInputError,
    kcenter_greedy,
    label_mass_filter,
    select_batch,
    select_cold_start,
    select_hedged,
    select_typical,
    spherical_kmeans,
)
from acquisition.strategies import STRATEGIES, Choice, Inputs, strategy

FAST = settings(max_examples=60, deadline=None)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute_force_farthest_first(cand: np.ndarray, seeds: np.ndarray, k: int, first: int = 0) -> list[int]:
    """The textbook definition in float64: recompute every distance from scratch at every step."""
    cand = cand.astype(np.float64)
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    centres = [s / np.linalg.norm(s) for s in seeds.astype(np.float64)]
    picks: list[int] = []
    for _ in range(k):
        if not centres:
            best = first
        else:
            dist = np.array([min(1 - c @ x for c in centres) for x in cand])
            dist[picks] = -np.inf
            best = int(np.argmax(dist))
        picks.append(best)
        centres.append(cand[best])
    return picks


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, float, int]:
    n = draw(st.integers(1, 40))
    d = draw(st.integers(2, 6))
    n_labeled = draw(st.integers(0, 10))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # Coarse uncertainty values make ties common, which is where determinism usually breaks.
    u = rng.integers(0, 4, size=n).astype(np.float64)
    b = draw(st.integers(1, n))
    m = draw(st.integers(1, 2 * n))
    share = draw(st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]))
    return u, _unit(rng, n, d), _unit(rng, n_labeled, d), b, m, share, seed


@FAST
@given(pools())
def test_batch_is_b_distinct_in_range_rows_and_deterministic(pool: tuple) -> None:
    u, emb, labeled, b, m, share, seed = pool
    first = select_batch(u, emb, labeled, b=b, m=m, random_share=share, rng=seed)
    again = select_batch(u, emb, labeled, b=b, m=m, random_share=share, rng=seed)

    assert len(first.indices) == b == len(np.unique(first.indices))
    assert first.indices.min() >= 0 and first.indices.max() < len(u)
    assert first.is_random.sum() == int(np.floor(share * b + 0.5))
    np.testing.assert_array_equal(first.indices, again.indices)
    np.testing.assert_array_equal(first.is_random, again.is_random)


@FAST
@given(pools())
def test_non_random_picks_come_from_the_top_m_most_uncertain(pool: tuple) -> None:
    u, emb, labeled, b, m, share, seed = pool
    sel = select_batch(u, emb, labeled, b=b, m=m, random_share=share, rng=seed)
    rest = np.setdiff1d(np.arange(len(u)), sel.indices[sel.is_random])
    if sel.is_random.all():
        return
    m_eff = min(max(m, b), len(rest))
    cutoff = np.sort(u[rest])[::-1][m_eff - 1]
    assert (u[sel.indices[~sel.is_random]] >= cutoff).all()


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 25), st.integers(0, 8), st.integers(2, 5))
def test_kcenter_matches_brute_force_farthest_first(seed: int, n: int, n_seeds: int, d: int) -> None:
    rng = np.random.default_rng(seed)
    cand, seeds = _unit(rng, n, d), _unit(rng, n_seeds, d)
    k = int(rng.integers(1, n + 1))
    first = int(rng.integers(n))

    picks = kcenter_greedy(cand, seeds, k, device="cpu", first=first)

    expected = _brute_force_farthest_first(cand, seeds, k, first=first)
    # Exact equality unless two distances tie within float32 rounding; then check the property.
    for step, pick in enumerate(picks):
        if pick != expected[step]:
            centres = np.concatenate([seeds, cand[picks[:step]]]).astype(np.float64)
            dist = 1 - (cand.astype(np.float64) @ centres.T).max(axis=1)
            dist[picks[:step]] = -np.inf
            assert dist[pick] >= dist.max() - 1e-5
            break
    assert len(set(picks.tolist())) == k


def test_kcenter_spreads_out_instead_of_picking_near_duplicates() -> None:
    rng = np.random.default_rng(0)
    centre = _unit(rng, 1, 16)
    clump = centre + 0.01 * rng.standard_normal((50, 16)).astype(np.float32)
    far = _unit(rng, 5, 16)
    cand = np.concatenate([clump, far])
    picks = kcenter_greedy(cand, np.empty((0, 16), np.float32), 6, device="cpu")
    assert sum(p < 50 for p in picks) == 1  # one item from the clump, then the five far ones


def test_empty_labeled_set_starts_from_the_most_uncertain_candidate() -> None:
    rng = np.random.default_rng(1)
    emb = _unit(rng, 30, 8)
    u = np.linspace(0, 1, 30)
    sel = select_batch(u, emb, np.empty((0, 8), np.float32), b=5, m=10, random_share=0.0, rng=0)
    assert sel.indices[0] == 29
    assert set(sel.indices) <= set(range(20, 30))


def test_all_equal_uncertainty_is_a_seeded_tie_break() -> None:
    rng = np.random.default_rng(2)
    emb, labeled = _unit(rng, 200, 8), _unit(rng, 5, 8)
    u = np.full(200, 0.5)
    a = select_batch(u, emb, labeled, b=10, m=20, random_share=0.0, rng=7)
    b = select_batch(u, emb, labeled, b=10, m=20, random_share=0.0, rng=7)
    c = select_batch(u, emb, labeled, b=10, m=20, random_share=0.0, rng=8)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert set(a.indices) != set(c.indices)


def test_m_below_b_is_clamped_up_to_b() -> None:
    rng = np.random.default_rng(3)
    emb, labeled = _unit(rng, 50, 8), _unit(rng, 3, 8)
    sel = select_batch(rng.random(50), emb, labeled, b=20, m=5, random_share=0.0, rng=0)
    assert len(np.unique(sel.indices)) == 20


def test_whole_pool_batch_returns_every_row() -> None:
    rng = np.random.default_rng(4)
    emb = _unit(rng, 12, 4)
    sel = select_batch(rng.random(12), emb, emb[:2], b=12, m=3, random_share=0.25, rng=0)
    assert sorted(sel.indices.tolist()) == list(range(12))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"uncertainty": np.array([0.1, np.nan, 0.3, 0.4])}, "NaN"),
        ({"uncertainty": np.array([0.1, np.inf, 0.3, 0.4])}, "NaN or inf"),
        ({"emb": np.full((4, 3), np.nan, np.float32)}, "emb contains NaN"),
        ({"labeled_emb": np.full((1, 3), np.nan, np.float32)}, "labeled_emb contains NaN"),
        ({"uncertainty": np.zeros(5)}, "5 rows"),
        ({"labeled_emb": np.ones((2, 4), np.float32)}, "dimension 4"),
        ({"b": 5}, "exceeds"),
        ({"b": 0}, "positive"),
        ({"m": 0}, "positive"),
        ({"random_share": 1.5}, "random_share"),
        ({"emb": np.zeros((4, 3), np.float32)}, "all-zero"),
    ],
)
def test_bad_inputs_raise_the_named_error(change: dict, message: str) -> None:
    args: dict[str, Any] = {
        "uncertainty": np.array([0.1, 0.2, 0.3, 0.4]),
        "emb": np.eye(4, 3, dtype=np.float32) + 0.1,
        "labeled_emb": np.ones((1, 3), np.float32),
        "b": 2,
        "m": 3,
        "random_share": 0.0,
    }
    args.update(change)
    with pytest.raises(SelectionInputError, match=message):
        select_batch(args.pop("uncertainty"), args.pop("emb"), args.pop("labeled_emb"), rng=0, **args)


def test_selection_input_error_is_a_value_error() -> None:
    assert issubclass(SelectionInputError, ValueError)


def test_chunked_similarity_equals_one_big_tile() -> None:
    rng = np.random.default_rng(5)
    cand, seeds = _unit(rng, 300, 16), _unit(rng, 250, 16)
    np.testing.assert_array_equal(
        kcenter_greedy(cand, seeds, 40, device="cpu", chunk=7),
        kcenter_greedy(cand, seeds, 40, device="cpu", chunk=4096),
    )


@pytest.mark.parametrize("mode", ["random", "diversity", "typical", "hedged"])
def test_cold_start_modes(mode: str) -> None:
    rng = np.random.default_rng(6)
    emb = _unit(rng, 100, 8)
    sel = select_cold_start(emb, np.empty((0, 8), np.float32), b=10, rng=3, mode=mode)  # type: ignore[arg-type]
    again = select_cold_start(emb, np.empty((0, 8), np.float32), b=10, rng=3, mode=mode)  # type: ignore[arg-type]
    assert len(np.unique(sel.indices)) == 10
    assert sel.is_random.sum() == {"random": 10, "hedged": 5}.get(mode, 0)
    np.testing.assert_array_equal(sel.indices, again.indices)


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_returns_a_valid_batch(name: str) -> None:
    rng = np.random.default_rng(7)
    emb, labeled, u = _unit(rng, 80, 8), _unit(rng, 4, 8), rng.random(80)
    committee = np.stack([u, 1 - u], axis=1)
    shares = {"margin": 0.4, "softrank": 0.3, "random": 0.3}
    inputs = Inputs(
        n=80, uncertainty=u, committee_p=committee, emb=emb, labeled_emb=labeled, shares=shares,
        random_share=0.25, oversample=3.0,
    )  # fmt: skip
    sel = strategy(name).choose(inputs, b=8, rng=0)
    assert isinstance(sel, Choice) and sel.explanation
    assert len(np.unique(sel.indices)) == 8
    if name == "uncertainty-only":
        assert set(sel.indices) == set(np.argsort(-u)[:8])


def test_unknown_strategy_is_rejected() -> None:
    with pytest.raises(SelectionInputError, match="unknown strategy"):
        strategy("greedy")


def test_label_mass_filter_flags_low_mass_rows() -> None:
    flags = label_mass_filter(np.array([0.95, 0.2, 0.5, 0.49]), 0.5)
    assert flags.tolist() == [False, True, False, True]
    with pytest.raises(SelectionInputError):
        label_mass_filter(np.array([0.5, np.nan]), 0.5)
    with pytest.raises(SelectionInputError):
        label_mass_filter(np.array([0.5]), 2.0)


def _blobs(rng: np.random.Generator, sizes: list[int], d: int = 16, spread: float = 0.15) -> tuple[np.ndarray, ...]:
    """Unit rows around len(sizes) random orthogonal directions (blob j has sizes[j] rows), and each
    row's blob."""
    centres = np.linalg.qr(rng.standard_normal((d, d)))[0][: len(sizes)].astype(np.float32)
    blob = np.repeat(np.arange(len(sizes)), sizes)
    x = centres[blob] + spread * rng.standard_normal((len(blob), d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), blob


def test_typical_cold_start_takes_one_central_item_per_region() -> None:
    rng = np.random.default_rng(11)
    x, blob = _blobs(rng, [300, 120, 60, 30, 12], spread=0.08)  # imbalanced: a random 5 would mostly land in blob 0
    sel = select_typical(x, np.empty((0, 16), np.float32), b=5, rng=0)
    assert sorted(blob[sel.indices].tolist()) == [0, 1, 2, 3, 4]
    assert not sel.is_random.any()
    for i in sel.indices:  # each pick is nearer its blob's mean direction than most of its blob
        members = x[blob == blob[i]]
        centre = members.mean(axis=0)
        assert (members @ centre < x[i] @ centre).mean() > 0.7


def test_typical_cold_start_fills_the_regions_the_labels_miss() -> None:
    rng = np.random.default_rng(12)
    x, blob = _blobs(rng, [100, 100, 100, 100])
    labeled = x[blob != 2][::10]  # every blob but 2 already has labels
    sel = select_typical(x, labeled, b=1, rng=0)
    assert blob[sel.indices[0]] == 2


@pytest.mark.parametrize("pick", [select_typical, select_hedged])
@FAST
@given(n=st.integers(2, 60), b=st.integers(1, 60), n_labeled=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_typical_and_hedged_cold_batches_are_valid_and_deterministic(
    pick: Any, n: int, b: int, n_labeled: int, seed: int
) -> None:
    b = min(b, n)
    rng = np.random.default_rng(seed)
    x, labeled = _unit(rng, n, 4), _unit(rng, n_labeled, 4)
    sel = pick(x, labeled, b=b, rng=seed)
    assert len(sel.indices) == b == len(np.unique(sel.indices))
    assert sel.is_random.sum() == (b - b // 2 if pick is select_hedged else 0)  # the uniform half
    assert ((sel.indices >= 0) & (sel.indices < n)).all()
    np.testing.assert_array_equal(sel.indices, pick(x, labeled, b=b, rng=seed).indices)


def test_hedged_cold_start_is_half_typical_half_uniform() -> None:
    """The typical half takes one central item per region; the uniform half follows the pool's mix,
    so a class the regions miss still gets its share."""
    rng = np.random.default_rng(14)
    x, blob = _blobs(rng, [300, 120, 60, 30, 12], spread=0.08)
    sel = select_hedged(x, np.empty((0, 16), np.float32), b=11, rng=0)
    typical, uniform = sel.indices[~sel.is_random], sel.indices[sel.is_random]
    assert len(typical) == 5 and len(uniform) == 6 and len(np.unique(sel.indices)) == 11
    assert sorted(blob[typical].tolist()) == [0, 1, 2, 3, 4]
    picks = [select_hedged(x, np.empty((0, 16), np.float32), b=41, rng=s) for s in range(20)]
    uniform_share = np.mean(np.concatenate([blob[p.indices[p.is_random]] for p in picks]) == 0)
    typical_share = np.mean(np.concatenate([blob[p.indices[~p.is_random]] for p in picks]) == 0)
    # the uniform half follows the pool's mix (blob 0: 300 of 522), the typical half the regions'
    assert abs(uniform_share - 300 / 522) < 0.06 and typical_share < uniform_share - 0.1


def test_typical_cold_start_clusters_a_sample_of_a_large_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    import acquisition.batch as selection

    monkeypatch.setattr(selection, "TYPICAL_MAX_POINTS", 50)
    rng = np.random.default_rng(13)
    x, _ = _blobs(rng, [100, 100, 100])
    sel = select_typical(x, np.empty((0, 16), np.float32), b=10, rng=1)
    assert len(np.unique(sel.indices)) == 10 and sel.indices.max() < 300


@FAST
@given(n=st.integers(1, 80), k=st.integers(1, 80), seed=st.integers(0, 2**16))
def test_spherical_kmeans_uses_every_cluster(n: int, k: int, seed: int) -> None:
    k = min(k, n)
    x = _unit(np.random.default_rng(seed), n, 3)
    assign = spherical_kmeans(x, k, seed)
    assert assign.shape == (n,) and set(assign.tolist()) == set(range(k))


def test_spherical_kmeans_recovers_separated_blobs() -> None:
    x, blob = _blobs(np.random.default_rng(14), [50, 40, 30], spread=0.05)
    assign = spherical_kmeans(x, 3, 0)
    assert len({(int(a), int(b)) for a, b in zip(assign, blob, strict=True)}) == 3  # a bijection


def test_typical_cold_start_refuses_bad_input() -> None:
    x = _unit(np.random.default_rng(15), 10, 4)
    with pytest.raises(SelectionInputError):
        select_typical(x, np.empty((0, 4), np.float32), b=11, rng=0)
    with pytest.raises(SelectionInputError):
        select_typical(x, np.empty((0, 5), np.float32), b=2, rng=0)
    with pytest.raises(SelectionInputError):
        spherical_kmeans(x, 0, 0)


def test_typical_cold_start_caps_the_clusters_and_still_fills_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import acquisition.batch as selection

    monkeypatch.setattr(selection, "TYPICAL_MAX_CLUSTERS", 4)
    rng = np.random.default_rng(16)
    x, blob = _blobs(rng, [60, 60, 60, 60])
    labeled = x[blob != 3][::3]  # many labels, none in blob 3
    sel = select_typical(x, labeled, b=6, rng=0)
    assert len(np.unique(sel.indices)) == 6
    assert (blob[sel.indices] == 3).sum() >= 3  # the uncovered region gives several picks


def test_typical_cold_start_keeps_enough_rows_for_a_batch_larger_than_the_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import acquisition.batch as selection

    monkeypatch.setattr(selection, "TYPICAL_MAX_POINTS", 10)
    x = _unit(np.random.default_rng(17), 40, 4)
    sel = select_typical(x, np.empty((0, 4), np.float32), b=25, rng=0)
    assert len(np.unique(sel.indices)) == 25
