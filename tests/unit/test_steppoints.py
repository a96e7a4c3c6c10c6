"""Step points: production runs nothing at them; a configured hook (the crash tests' stall) runs at
each, and the stall stops only the first process to reach a listed point with a given key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotate import steppoints
from devtools.stall import stall, stall_env

SEEN: list[tuple[str, object]] = []


def record(point: str, key: object) -> None:
    SEEN.append((point, key))


def test_no_hook_runs_nothing_and_a_named_hook_runs_at_every_point(settings: Any) -> None:
    SEEN.clear()
    settings.STEP_HOOK = None
    steppoints.reached("select", 1)
    assert SEEN == []
    settings.STEP_HOOK = "tests.unit.test_steppoints.record"
    steppoints.reached("select", 1)
    steppoints.reached("train", "p-prod:0")
    assert SEEN == [("select", 1), ("train", "p-prod:0")]


def test_the_stall_marks_a_listed_point_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**stall_env("select,score", tmp_path), "ALANN_TEST_STALL_S": "0"}.items():
        monkeypatch.setenv(name, value)
    stall("select", 2)
    stall("select", 2)  # the marker exists: the resumed run passes
    stall("evaluate", 2)  # not listed
    assert [p.name for p in tmp_path.iterdir()] == ["select-2"]
