"""The stabilizing-predictions stopping rule on plain numbers (Bloodgood & Vijay-Shanker 2009): the
ML page's recommendation (annotate/selectors/stopping.py) and the simulation report both read it."""

from __future__ import annotations

from collections.abc import Sequence

STABLE_KAPPA = 0.99  # Bloodgood & Vijay-Shanker's threshold: "the models agree almost perfectly"
STABLE_WINDOW = 3  # consecutive round pairs at or over it (their k = 3): one lucky pair is not a trend


def stable_run(kappas: Sequence[float | None], threshold: float = STABLE_KAPPA) -> int:
    """How many of the last κ values in a row are at or over the threshold (None breaks the run)."""
    run = 0
    for kappa in reversed(kappas):
        if kappa is None or kappa < threshold:
            break
        run += 1
    return run


def predictions_stable(
    kappas: Sequence[float | None], *, threshold: float = STABLE_KAPPA, window: int = STABLE_WINDOW
) -> bool:
    """The stabilizing-predictions criterion: κ ≥ threshold for the last ``window`` round pairs."""
    if window < 1:
        raise ValueError("window must be at least 1")
    return stable_run(kappas, threshold) >= window


def first_stable(
    kappas: Sequence[float | None], *, threshold: float = STABLE_KAPPA, window: int = STABLE_WINDOW
) -> int | None:
    """The index of the first round at which ``predictions_stable`` holds over the κ values so far
    (κ of round i against round i−1; None where there is none), or None if it never does."""
    if window < 1:
        raise ValueError("window must be at least 1")
    run = 0
    for i, kappa in enumerate(kappas):
        run = run + 1 if kappa is not None and kappa >= threshold else 0
        if run >= window:
            return i
    return None
