"""bench/no_loss.py: rounds of two simulation runs paired by arm, seed and round; a batch that differs
and every configuration value that differs are reported, not hidden."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import no_loss  # noqa: E402


def _round(n: int, batch: list[int], acc: float, steps: int) -> dict[str, Any]:
    return {
        "strategy": "active",
        "seed": 0,
        "round": n,
        "labels": 50 * n,
        "batch_ids": batch,
        "accuracy": acc,
        "macro_f1": acc / 2,
        "ece": 0.1,
        "commit": "c" * 40,
        "config": {"k": 2, "train": {"max_steps": steps}},
    }


def test_rounds_pair_up_and_differences_are_named() -> None:
    old = [_round(1, [1, 2], 0.5, 12), _round(2, [3, 4], 0.7, 12)]
    new = [_round(1, [1, 2], 0.5, 48), _round(2, [3, 5], 0.75, 48)]
    text = no_loss.report(old, new)
    rows = [line for line in text.splitlines() if line.startswith("| active")]
    assert rows[0].startswith("| active | 0 | 1 | 50 | yes | 50.0 → 50.0")
    assert rows[1].startswith("| active | 0 | 2 | 100 | no | 70.0 → 75.0")
    assert "- `train.max_steps`: 12 → 48" in text and "`k`" not in text


def test_identical_configurations_say_so() -> None:
    same = [_round(1, [1], 0.5, 12)]
    assert "Frozen configuration: identical." in no_loss.report(same, same)
