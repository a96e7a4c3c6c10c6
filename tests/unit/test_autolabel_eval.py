"""The simulation's auto-labelling check, per class: accepted items against their oracle labels."""

from __future__ import annotations

import pytest

from annotate.simulation.autolabel_eval import class_outcomes


def test_class_outcomes_count_precision_and_alarm() -> None:
    # class 1: 40 accepted, 39 right; class 2: 30 accepted, 20 right (its interval lies under 0.9);
    # class 3: nothing accepted
    pairs = [(1, 1)] * 39 + [(1, 2)] + [(2, 2)] * 20 + [(2, 3)] * 10
    rows = class_outcomes(pairs, [1, 2, 3], ["a", "b", "c"], target=0.9, delta=0.05)
    a, b, c = rows
    assert (a["label"], a["accepted"], a["correct"], a["meets"], a["alarm"]) == ("a", 40, 39, True, False)
    assert a["precision"] == pytest.approx(39 / 40) and a["ci"][0] < 39 / 40 < a["ci"][1]
    assert (b["accepted"], b["correct"], b["meets"], b["alarm"]) == (30, 20, False, True)
    assert b["ci"][1] < 0.9
    assert (c["accepted"], c["precision"], c["meets"], c["alarm"]) == (0, None, False, False)


def test_a_miss_inside_the_noise_is_no_alarm() -> None:
    rows = class_outcomes([(1, 1)] * 18 + [(1, 2)] * 2, [1], ["a"], target=0.95, delta=0.05)
    assert rows[0]["precision"] == 0.9 and not rows[0]["meets"] and not rows[0]["alarm"]
