"""Issue 32, problem 5: "the training ETA grew while steps advanced (1 min 21 s → 3 min 23 s)". A
round trains its adapters one run after another, each paying a start-up (the model loaded, the frozen
trunk run once) before its first step; the ETA from the measured rate (training.eta) only falls."""

from __future__ import annotations

import pytest

from training.eta import eta_seconds, seconds_per_unit

RUNS, STEPS, STARTUP_S, STEP_S = 5, 12, 30.0, 2.0  # five adapters of 12 steps, 30 s start-up each
TOTAL = RUNS * STEPS


def _timeline() -> list[tuple[float, int, float]]:
    """(wall time, steps done, the rate the worker stored) after every step, as the training service
    stores it: the current run's time per step until a run has finished, then the finished runs'."""
    events, now, finished_s, finished_steps = [], 0.0, 0.0, 0
    for _ in range(RUNS):
        run_started = now
        now += STARTUP_S
        for step in range(1, STEPS + 1):
            now += STEP_S
            rate = seconds_per_unit(
                finished_seconds=finished_s,
                finished_units=finished_steps,
                current_seconds=now - run_started,
                current_units=step,
            )
            events.append((now, finished_steps + step, rate))
        finished_s, finished_steps = finished_s + (now - run_started), finished_steps + STEPS
    return events


def test_the_eta_never_grows_while_steps_advance() -> None:
    etas = [eta_seconds(done=done, total=TOTAL, unit_seconds=rate) for _, done, rate in _timeline()]
    shown = [e for e in etas if e is not None]
    assert len(shown) == TOTAL - 1 and etas[-1] is None  # every step but the last leaves something
    assert all(later <= earlier + 1e-9 for earlier, later in zip(shown, shown[1:], strict=False))
    # from the first finished run on it is exact: what is left of this run plus whole runs after it
    now, done, rate = _timeline()[STEPS]
    runs_after = RUNS - 2
    true_left = (STEPS - 1) * STEP_S + runs_after * (STARTUP_S + STEPS * STEP_S)
    assert eta_seconds(done=done, total=TOTAL, unit_seconds=rate) == pytest.approx(true_left, rel=0.15)


def test_the_old_estimate_grew_at_every_new_adapter() -> None:
    """elapsed × left / done, the estimate this replaces: the next run's start-up shows as slower steps."""
    timeline = _timeline()
    old = [now * (TOTAL - done) / done for now, done, _ in timeline]
    assert old[STEPS] > old[STEPS - 1]  # the first step of the second adapter


def test_no_rate_no_eta() -> None:
    assert seconds_per_unit(finished_seconds=0, finished_units=0, current_seconds=5, current_units=0) == 0.0
    assert eta_seconds(done=3, total=10, unit_seconds=0.0) is None
    assert eta_seconds(done=10, total=10, unit_seconds=1.0) is None
    assert eta_seconds(done=4, total=10, unit_seconds=1.5) == 9.0
    with pytest.raises(ValueError, match="never negative"):
        seconds_per_unit(finished_seconds=-1, finished_units=1, current_seconds=0, current_units=0)
