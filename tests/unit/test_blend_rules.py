"""bench/blend_rules.py on synthetic records: each rule's weight comes from the batches' counts of the
rounds so far, its accuracy from the test counts at that weight, and the tables say so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import blend_rules  # noqa: E402

from predictor.blend import GRID  # noqa: E402


def _counts(n: int, correct: list[int], gain: list[int] | None = None, loss: list[int] | None = None) -> dict[str, Any]:
    zeros = [0] * len(GRID)
    return {"n": n, "correct": correct, "gain": gain or zeros, "loss": loss or zeros, "loglik": [-1.0] * len(GRID)}


def _record(labels: int, round_: int, weight: float, batch: dict[str, Any] | None, test: dict[str, Any]) -> dict:
    evidence: dict[str, Any] = {"grid": list(GRID), "test": test}
    if batch is not None:
        evidence["batch"] = batch
        evidence["uniform"] = _counts(0, [0] * len(GRID))
    return {
        "data": "toy",
        "strategy": "active",
        "seed": 0,
        "round": round_,
        "labels": labels,
        "blend": {"weight": weight, "evidence": evidence},
    }


def test_rules_replay_weights_and_test_accuracy() -> None:
    # Test counts: the adapters alone (w = 1) get 80 of 100, w = 0.5 gets 90, the proxy alone 60.
    test_correct = [60, 62, 64, 66, 70, 90, 85, 84, 83, 82, 80]
    test = _counts(100, test_correct)
    # The batch says w = 0.5 is best: more right than any other weight.
    batch = _counts(
        50, [20, 21, 22, 23, 24, 40, 30, 30, 30, 30, 30], gain=[0] * 5 + [12] + [0] * 5, loss=[0] * 5 + [2] + [0] * 5
    )
    records = [
        _record(100, 1, 1.0, None, test),  # the seed round: no batch evidence, adapters alone
        _record(200, 2, 0.5, batch, test),
    ]
    (rounds,) = blend_rules.jobs(records).values()
    default = blend_rules.replay(rounds, blend_rules.RULES[blend_rules.DEFAULT])
    assert default == [(100, 1.0, 80.0), (200, 0.5, 90.0)]
    assert blend_rules.replay(rounds, blend_rules.RULES["proxy alone (w = 0)"])[1] == (200, 0.0, 60.0)
    # The guard: 12 gained against 2 lost clears sqrt(14), so the weight moves here too.
    assert blend_rules.replay(rounds, blend_rules.RULES["batches, last 3, by accuracy, guard z = 1"])[1][1] == 0.5
    # The random slice is empty: its rules keep the adapters.
    assert blend_rules.replay(rounds, blend_rules.RULES["random slice, all rounds, by accuracy"])[1][1] == 1.0
    text = blend_rules.tables(records)
    assert (
        "of their 2 rounds, the recorded weight is the one the rule until 2026-12-06 gives in 2 and the default's in 2"
        in text
    )
    assert f"| toy | active | {blend_rules.DEFAULT} | 90.0 | – | – | +10.0 | – | – |" in text
    assert f"| {blend_rules.DEFAULT} | +10.00 | +10.0 | 0 | 1 |" in text
    assert "| proxy alone (w = 0) | -20.00 | -20.0 | 1 | 1 |" in text


def test_runs_of_one_set_at_two_batch_sizes_are_two_jobs() -> None:
    # Seed 0 of "toy" at B=50 and at B=100: two jobs named by their shape, not one job whose rounds
    # overwrite each other's.
    test = _counts(100, [60, 62, 64, 66, 70, 90, 85, 84, 83, 82, 80])
    records = [{**_record(100, 1, 1.0, None, test), "batch_size": b, "seed_labels": 100} for b in (50, 100)]
    by_job = blend_rules.jobs(records)
    assert sorted(by_job) == [("toy-B100", "active", 0), ("toy-B50", "active", 0)]
    assert all(len(rounds) == 1 for rounds in by_job.values())
    # One shape only: the plain name.
    assert sorted(blend_rules.jobs(records[:1])) == [("toy", "active", 0)]


def test_records_without_counts_are_said_to_be_missing() -> None:
    assert "No record carries blend evidence" in blend_rules.tables([{"data": "toy", "blend": {"weight": 1.0}}])


def _bumped(n: int, base: int, bumps: dict[int, int]) -> dict[str, Any]:
    """Counts where grid weight i gets ``base + bumps[i]`` right (the adapters alone, i = 10, ``base``):
    the gain and loss against the adapters alone follow."""
    bump = [bumps.get(i, 0) for i in range(len(GRID))]
    assert bump[-1] == 0
    return _counts(n, [base + b for b in bump], gain=[max(b, 0) for b in bump], loss=[max(-b, 0) for b in bump])


def _round(
    labels: int,
    round_: int,
    batch: dict[str, Any] | None = None,
    uniform: dict[str, Any] | None = None,
    data: str = "toy",
    seed: int = 0,
) -> dict[str, Any]:
    """A round record whose test counts favour w = 0.8 on 1,000 items: any score read from them, or
    from the wrong round, comes out visibly different from the next batch's."""
    evidence: dict[str, Any] = {"grid": list(GRID), "test": _bumped(1000, 500, {8: 300})}
    if batch is not None:
        evidence["batch"] = batch
    if uniform is not None:
        evidence["uniform"] = uniform
    return {
        "data": data,
        "strategy": "active",
        "seed": seed,
        "round": round_,
        "labels": labels,
        "blend": {"weight": 1.0, "evidence": evidence},
    }


# One job: the default rule (the batches of the last 3 rounds) picks 1 (the seed round has no batch),
# 0.5 (round 2's batch), then 0.2 (round 3's batch outweighs it) in rounds 3, 4 and 5. Each random
# slice is best at a weight no rule picks from it in the same round, so a score read from the same
# round, a round late, with the next round peeked at, or from the test counts is another number.
PREQUENTIAL = [
    _round(100, 1),
    _round(200, 2, _bumped(50, 30, {5: 10}), _bumped(100, 60, {5: 3, 0: -10})),
    _round(300, 3, _bumped(50, 30, {2: 20}), _bumped(100, 70, {5: 6, 2: 1, 0: -10})),
    _round(400, 4, _bumped(50, 30, {}), _bumped(100, 80, {2: 4, 5: -2, 0: -10})),
    _round(500, 5, _bumped(50, 30, {2: 5}), _bumped(0, 0, {})),  # an empty random slice
]


def test_prequential_scores_each_weight_on_the_next_rounds_counts() -> None:
    (rounds,) = blend_rules.jobs(PREQUENTIAL).values()
    default = blend_rules.RULES[blend_rules.DEFAULT]
    assert [w for _, w, _ in blend_rules.replay(rounds, default)] == [1.0, 0.5, 0.2, 0.2, 0.2]
    # Round r's weight on round r+1's random slice at that weight: 60 (w = 1 on round 2's), 76 (w = 0.5
    # on round 3's; its own round's slice would say 63, round 3's pick 0.2 on it 71, the test 500+),
    # 84 (w = 0.2 on round 4's). Round 4's weight meets an empty slice and round 5 has no next round.
    assert blend_rules.prequential(rounds, default) == [
        (100, 1.0, 60, 100, 0, 0, -1.0),
        (200, 0.5, 76, 100, 6, 0, -1.0),
        (300, 0.2, 84, 100, 4, 0, -1.0),
    ]
    # On the whole next batch round 4's weight is scored too (round 5's batch is not empty).
    assert blend_rules.prequential(rounds, default, "batch") == [
        (100, 1.0, 30, 50, 0, 0, -1.0),
        (200, 0.5, 30, 50, 0, 0, -1.0),
        (300, 0.2, 30, 50, 0, 0, -1.0),
        (400, 0.2, 35, 50, 5, 0, -1.0),
    ]
    # The random slice of the last 3 rounds stays at 0.5: its own evidence, scored the same way.
    assert [
        s.correct for s in blend_rules.prequential(rounds, blend_rules.RULES["random slice, last 3, by accuracy"])
    ] == [
        60,
        76,
        78,
    ]

    text = blend_rules.tables(PREQUENTIAL)
    choice, test = text.split("**The test set")
    assert "(and not the test tables below) is the one that may choose a rule" in choice
    assert "300 random-slice items in 3 rounds, 200 batch items in 4 rounds" in choice
    # 220 of 300 against the adapters' 210; gain 10, loss 0: z = 10 / sqrt(10). Batch: 125 of 200, 120.
    assert (
        f"| {blend_rules.DEFAULT} | 73.3 | +3.3 | +3.3 | +3.2 | 0.010 | +0.000 | +0.000 | 62.5 | +2.5 | +2.5 |"
        in choice
    )
    assert (
        "| adapters alone (w = 1) | 70.0 | +0.0 | +0.0 | – | 0.010 | +0.000 | +0.000 | 60.0 | +0.0 | +0.0 |" in choice
    )
    assert (
        "| proxy alone (w = 0) | 60.0 | -10.0 | -10.0 | -5.5 | 0.010 | +0.000 | +0.000 | 60.0 | +0.0 | +0.0 |" in choice
    )
    assert blend_rules.UPPER_BOUND not in choice  # it reads the test counts
    assert blend_rules.UPPER_BOUND in test


def test_prequential_skips_missing_rounds_and_counts_and_pools_sets() -> None:
    gap = [_round(100, 1, seed=1), _round(300, 3, _bumped(50, 0, {}), _bumped(100, 0, {}), seed=1)]
    no_counts = [_round(100, 1, seed=2), _round(200, 2, seed=2)]  # round 2 without batch or random slice
    other = [_round(100, 1, data="other"), _round(200, 2, _bumped(10, 5, {}), _bumped(100, 50, {0: 30}), "other")]
    records = PREQUENTIAL + gap + no_counts + other
    by_job = blend_rules.jobs(records)
    for rounds in (by_job[("toy", "active", 1)], by_job[("toy", "active", 2)]):
        for key in blend_rules.KEYS:
            assert blend_rules.prequential(rounds, blend_rules.RULES[blend_rules.DEFAULT], key) == []

    choice = blend_rules.tables(records).split("**The test set")[0]
    assert "400 random-slice items in 4 rounds, 210 batch items in 5 rounds" in choice
    # The proxy alone: 180 of 300 on toy (−10 points), 80 of 100 on other (+30): 260 of 400 pooled, as
    # the adapters alone; the worst set is toy's. The default keeps w = 1 on other's seed round.
    assert (
        "| proxy alone (w = 0) | 65.0 | +0.0 | -10.0 | +0.0 | 0.010 | +0.000 | +0.000 | 59.5 | +0.0 | +0.0 |" in choice
    )
    assert (
        f"| {blend_rules.DEFAULT} | 67.5 | +2.5 | +0.0 | +3.2 | 0.010 | +0.000 | +0.000 | 61.9 | +2.4 | +0.0 |"
        in choice
    )


def test_random_slice_window_keeps_the_last_rounds() -> None:
    # The first round's random slice favours the proxy alone by far; the last three favour w = 0.5.
    history = [{"grid": list(GRID), "uniform": _bumped(100, 50, {0: 40})}] + [
        {"grid": list(GRID), "uniform": _bumped(100, 50, {5: 5})} for _ in range(3)
    ]
    assert blend_rules.RULES["random slice, all rounds, by accuracy"](history) == 0.0
    assert blend_rules.RULES["random slice, last 3, by accuracy"](history) == 0.5
    assert blend_rules.RULES[blend_rules.DEFAULT](history) == 1.0  # no batch counts: the adapters alone


def test_no_next_round_means_no_choice() -> None:
    text = blend_rules.tables([_round(100, 1), _round(300, 3, _bumped(50, 30, {}), _bumped(20, 10, {}))])
    assert "No round has a next round with counts: no next-batch score, nothing to choose a rule by." in text


def test_the_min_held_out_rule_keeps_the_adapters_until_enough_batches_pool() -> None:
    test = _counts(100, [60, 62, 64, 66, 70, 90, 85, 84, 83, 82, 80])
    batch = _counts(100, [20, 21, 22, 23, 24, 60, 30, 30, 30, 30, 30])  # w = 0.5 wins each batch
    records = [_record(100, 1, 1.0, None, test), _record(200, 2, 0.5, batch, test), _record(300, 3, 0.5, batch, test)]
    (rounds,) = blend_rules.jobs(records).values()
    rule = blend_rules.RULES["batches, last 3, by accuracy, from 200 held-out"]
    # 100 held-out items after round 2: the adapters alone; 200 after round 3: the fitted weight.
    assert [w for _, w, _ in blend_rules.replay(rounds, rule)] == [1.0, 1.0, 0.5]
    assert [w for _, w, _ in blend_rules.replay(rounds, blend_rules.RULES[blend_rules.DEFAULT])] == [1.0, 0.5, 0.5]
