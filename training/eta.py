"""How long the running step has left, from the rate the worker measured (issue 32, problem 5: the
training ETA grew from 1 min 21 s to 3 min 23 s while steps advanced).

The old estimate, elapsed × (total − done) / done over the whole step, counted each adapter's start-up
(loading the model, running the frozen trunk once) only after it had happened: between two adapters
the elapsed time grows while ``done`` stands still, so the ETA rose at every adapter. Here the rate
comes from whole runs once one has finished (its start-up included, since every run pays it again),
and from the current run's time per unit until then; the page multiplies it by what is left, so the
ETA only falls while units advance and holds still between runs."""

from __future__ import annotations


def seconds_per_unit(
    *, finished_seconds: float, finished_units: int, current_seconds: float, current_units: int
) -> float:
    """Seconds per unit of work (a training step, an evaluation prompt): the finished runs' average when
    there are any, else the current run's so far; 0.0 when nothing was measured yet."""
    if min(finished_seconds, current_seconds) < 0 or min(finished_units, current_units) < 0:
        raise ValueError("seconds and units are never negative")
    if finished_units > 0:
        return finished_seconds / finished_units
    if current_units > 0:
        return current_seconds / current_units
    return 0.0


def eta_seconds(*, done: int, total: int, unit_seconds: float) -> float | None:
    """Seconds left for ``total - done`` units at ``unit_seconds`` each; None when there is no rate yet
    or nothing is left."""
    if unit_seconds <= 0 or done >= total:
        return None
    return (total - done) * unit_seconds
