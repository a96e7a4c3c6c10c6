"""bench/blend_rules.py on synthetic records: each rule's weight comes from the batches' counts of the
rounds so far, its accuracy from the test counts at that weight, and the tables say so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import blend_rules  # noqa: E402

from training.blend import GRID  # noqa: E402


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
    assert blend_rules.replay(rounds, blend_rules.RULES["batches, last 3, guard z = 1"])[1][1] == 0.5
    # The random slice is empty: its rules keep the adapters.
    assert blend_rules.replay(rounds, blend_rules.RULES["random slice, all rounds"])[1][1] == 1.0
    text = blend_rules.tables(records)
    assert "the default rule gives the recorded weight in 2 of 2 rounds" in text
    assert "| toy | active | batches, last 3 (the default) | 90.0 | – | – | +10.0 | – | – |" in text
    assert "| batches, last 3 (the default) | +10.00 | +10.0 | 0 | 1 |" in text
    assert "| proxy alone (w = 0) | -20.00 | -20.0 | 1 | 1 |" in text


def test_records_without_counts_are_said_to_be_missing() -> None:
    assert "No record carries blend evidence" in blend_rules.tables([{"data": "toy", "blend": {"weight": 1.0}}])
