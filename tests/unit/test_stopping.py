"""The stopping criteria on arrays: κ between rounds' stop-set predictions, the κ window, the
recommendation's states, and the paired interval of the active-vs-random gain it relies on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from annotate.selectors.agreement import cohen_kappa
from annotate.selectors.stopping import (
    STABLE_KAPPA,
    STABLE_WINDOW,
    PairKappa,
    RoundGain,
    consecutive_kappas,
    pair_kappa,
    predictions_stable,
    recommend,
    round_gain,
    stable_run,
)
from predictor.evaluate import gain_with_uncertainty


def _pairs(kappas: list[float | None]) -> list[PairKappa]:
    return [PairKappa(number=i + 2, previous=i + 1, kappa=k, agreement=None, n=100) for i, k in enumerate(kappas)]


def _gain(gain: float, low: float | None, high: float | None, number: int = 5) -> RoundGain:
    return RoundGain(number, 80, gain, low, high, 200, 10, 2)


def test_kappa_between_rounds_on_label_ids_and_common_items() -> None:
    rng = np.random.default_rng(3)
    ids = list(range(1000, 1200))
    before = dict(zip(ids, rng.choice([17, 42, 99], size=200).tolist(), strict=True))
    now = dict(before)
    for item in ids[:10]:
        now[item] = 42 if before[item] != 42 else 17  # 10 of 200 changed
    now[5000] = 17  # an item the other round never predicted is left out

    pair = pair_kappa(3, 2, now, before)

    index = {17: 0, 42: 1, 99: 2}
    expected = cohen_kappa(np.array([index[now[i]] for i in ids]), np.array([index[before[i]] for i in ids]), 3)
    assert pair.n == 200 and pair.agreement == pytest.approx(190 / 200)
    assert pair.kappa is not None and pair.kappa == pytest.approx(expected) and pair.kappa < STABLE_KAPPA
    assert pair_kappa(3, 2, before, before).kappa == 1.0
    assert pair_kappa(3, 2, {1: 17}, {2: 17}) == PairKappa(3, 2, None, None, 0)


def test_consecutive_kappas_pair_each_round_with_the_one_before() -> None:
    same = {1: 0, 2: 1, 3: 0, 4: 1}
    flipped = {1: 1, 2: 0, 3: 1, 4: 0}
    pairs = consecutive_kappas([(1, same), (2, same), (4, flipped)])
    assert [(p.number, p.previous) for p in pairs] == [(2, 1), (4, 2)]
    assert pairs[0].kappa == 1.0 and pairs[1].kappa == pytest.approx(-1.0)
    assert consecutive_kappas([(1, same)]) == []


def test_the_window_counts_the_last_round_pairs_in_a_row() -> None:
    assert stable_run([0.5, 0.99, 0.995, 1.0]) == 3 and predictions_stable([0.5, 0.99, 0.995, 1.0])
    assert stable_run([0.99, 0.99, 0.98, 0.99]) == 1 and not predictions_stable([0.99, 0.99, 0.98, 0.99])
    assert stable_run([0.995, None, 1.0, 1.0]) == 2  # a pair without common items breaks the run
    assert not predictions_stable([1.0, 1.0])  # two pairs are not three
    assert predictions_stable([0.9, 0.95], threshold=0.9, window=2)
    with pytest.raises(ValueError):
        predictions_stable([1.0], window=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0.9, 1.0)), max_size=8), st.integers(1, 4))
def test_stable_means_the_last_window_pairs_all_reach_the_threshold(kappas: list[float | None], window: int) -> None:
    tail = kappas[-window:]
    expected = len(kappas) >= window and all(k is not None and k >= STABLE_KAPPA for k in tail)
    assert predictions_stable(kappas, window=window) == expected


def test_recommendation_says_what_is_missing() -> None:
    stable = _pairs([0.9, 0.992, 0.995, 1.0])
    ok, missing, sentence = recommend(stable, _gain(0.034, 0.012, 0.056))
    assert ok and not missing
    assert sentence == (
        f"You can stop here: predictions have been stable (κ ≥ 0.99) for {STABLE_WINDOW} rounds, "
        "and active is +3.4 points (95 % CI +1.2…+5.6) over random."
    )

    ok, missing, _ = recommend([], None)
    assert not ok and missing[0].startswith("κ needs the stop-set predictions of two")
    assert missing[1].startswith("no random arm yet")
    _, missing, sentence = recommend(_pairs([0.995, 0.97]), _gain(0.034, 0.012, 0.056))
    assert missing == ["κ 0.970 last round: not yet stable"] and sentence.startswith("Not yet: κ 0.970")
    _, missing, _ = recommend(_pairs([0.5, 0.995]), _gain(0.034, 0.012, 0.056))
    assert missing == ["κ ≥ 0.99 for 1 of 3 rounds: not yet stable long enough"]
    _, missing, _ = recommend(stable, _gain(0.01, -0.02, 0.04))
    assert missing == ["gain CI includes 0 (active +1.0 points over random, 95 % CI −2.0…+4.0, round 5)"]
    _, missing, _ = recommend(stable, _gain(-0.05, -0.08, -0.02))
    assert missing[0].startswith("random is ahead of active (−5.0 points")
    _, missing, _ = recommend(stable, _gain(0.0, None, None))
    assert missing[0].startswith("no interval for the gain yet")


def test_round_gain_reads_what_the_evaluation_stored_and_tolerates_gaps() -> None:
    metrics = {
        "arms": {"active": {"labels": 40}, "random": {"labels": 40}},
        "gain": {"gain": 0.05, "ci_low": 0.01, "ci_high": 0.09, "n": 200, "active_only_correct": 14},
    }
    gain = round_gain(4, metrics)
    assert gain is not None and (gain.labels, gain.n, gain.active_only, gain.random_only) == (40, 200, 14, None)
    assert (gain.gain_text, gain.ci_text, gain.evidence_text) == ("+5.0", "+1.0…+9.0", "—")
    assert round_gain(4, {"accuracy": 0.8}) is None
    odd = round_gain(4, {"gain": {"gain": "x", "ci_low": None}, "arms": []})
    assert odd is not None and (odd.gain_text, odd.ci_text, odd.labels) == ("—", "—", None)


# -- the gain's paired interval (predictor.evaluate.gain_with_uncertainty) ------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=300))
def test_identical_arms_have_an_interval_around_zero(correct: list[bool]) -> None:
    arm = np.array(correct)
    gain = gain_with_uncertainty(arm.mean(), arm.mean(), len(arm), correct_active=arm, correct_random=arm)
    assert gain["gain"] == 0.0 and gain["ci_low"] <= 0.0 <= gain["ci_high"]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=2, max_size=60).filter(
        lambda rows: len({a - b for a, b in rows}) > 1  # some spread in the per-item differences
    ),
    st.integers(2, 6),
)
def test_the_interval_narrows_as_the_test_set_grows(rows: list[tuple[bool, bool]], times: int) -> None:
    """The same mix of paired outcomes on ``times`` as many items: same gain, narrower interval."""
    active, random = (np.array([r[i] for r in rows]) for i in (0, 1))

    def width(k: int) -> float:
        a, r = np.tile(active, k), np.tile(random, k)
        gain = gain_with_uncertainty(a.mean(), r.mean(), len(a), correct_active=a, correct_random=r)
        return float(gain["ci_high"] - gain["ci_low"])

    assert width(times) < width(1)
