"""When the loop can stop: the evidence on the ML page, never an automatic stop.

Two criteria, read from what each round's evaluation stored (annotate/services/evaluation.py):

- **Stabilizing predictions** (Bloodgood & Vijay-Shanker 2009, "A method for stopping active learning
  based on stabilizing predictions and the need for user-adjustable stopping", CoNLL): Cohen's κ
  between the prod ensemble's predictions of consecutive evaluated rounds on the fixed stop set
  (``metrics["stop_set"]``). Predictions are stable once κ ≥ ``STABLE_KAPPA`` for the last
  ``STABLE_WINDOW`` consecutive round pairs: more labels stopped changing what the model says.
- **Active beats random**: the accuracy gain of the active arm over the random arm at equal labels
  on the same test items, with its 95 % interval (``metrics["gain"]``, computed by
  predictor.evaluate.gain_with_uncertainty: the normal approximation for paired proportions, i.e. the
  mean of the per-item differences d_i = correct_active_i − correct_random_i ± 1.96 · sd(d)/√n).

The recommendation says "you can stop here" only when both hold, and otherwise what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from annotate.loopconfig import stop_set_size
from annotate.models import Project, Round, StopSetItem
from annotate.selectors.agreement import cohen_kappa
from predictor.stopping_rule import STABLE_KAPPA, STABLE_WINDOW, predictions_stable, stable_run


@dataclass(frozen=True)
class PairKappa:
    """κ between a round's stop-set predictions and those of the evaluated round before it."""

    number: int
    previous: int
    kappa: float | None  # None: no stop item in common
    agreement: float | None  # share of stop items predicted the same
    n: int  # stop items both rounds predicted

    @property
    def kappa_text(self) -> str:
        return f"{self.kappa:.3f}" if self.kappa is not None else "—"

    @property
    def agreement_text(self) -> str:
        return f"{100 * self.agreement:.1f} %" if self.agreement is not None else "—"


@dataclass(frozen=True)
class RoundGain:
    """Active minus random accuracy on the test set at one round, in points, with its 95 % interval."""

    number: int
    labels: int | None  # labels each arm was trained on
    gain: float | None
    ci_low: float | None  # None: no interval (fewer than two test items)
    ci_high: float | None
    n: int | None  # test items
    active_only: int | None  # test items only the active arm got right
    random_only: int | None

    @property
    def gain_text(self) -> str:
        return points(self.gain) if self.gain is not None else "—"

    @property
    def ci_text(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return "—"
        return f"{points(self.ci_low)}\u2026{points(self.ci_high)}"

    @property
    def evidence_text(self) -> str:
        """The discordant test items: the only ones the paired interval learns from."""
        if self.active_only is None or self.random_only is None:
            return "—"
        return f"{self.active_only} vs {self.random_only} of {self.n if self.n is not None else '—'}"


@dataclass(frozen=True)
class StoppingRow:
    """One row of the panel's table (a round with stop-set predictions or a gain)."""

    number: int
    pair: PairKappa | None
    gain: RoundGain | None


@dataclass(frozen=True)
class StoppingReport:
    stop_set_size: int  # items of the drawn stop set (0: not drawn, or the criterion is off)
    enabled: bool  # loop option stop_set_size > 0
    rows: list[StoppingRow]  # newest first
    stable_rounds: int  # trailing round pairs with κ ≥ STABLE_KAPPA
    stable: bool
    latest_gain: RoundGain | None
    can_stop: bool
    missing: list[str]  # what stands between the loop and the recommendation
    recommendation: str
    threshold: float = STABLE_KAPPA
    window: int = STABLE_WINDOW


# -- pure functions over stored predictions -------------------------------------------------------


def pair_kappa(number: int, previous: int, now: Mapping[int, int], before: Mapping[int, int]) -> PairKappa:
    """κ of two rounds' predictions ({item id: label id}) on the stop items both have."""
    common = sorted(set(now) & set(before))
    if not common:
        return PairKappa(number=number, previous=previous, kappa=None, agreement=None, n=0)
    classes = {label: i for i, label in enumerate(sorted({now[i] for i in common} | {before[i] for i in common}))}
    a = np.array([classes[now[i]] for i in common], dtype=np.int64)
    b = np.array([classes[before[i]] for i in common], dtype=np.int64)
    return PairKappa(
        number=number,
        previous=previous,
        kappa=cohen_kappa(a, b, len(classes)),
        agreement=float((a == b).mean()),
        n=len(common),
    )


def consecutive_kappas(predictions: Sequence[tuple[int, Mapping[int, int]]]) -> list[PairKappa]:
    """κ of each round against the one before it; ``predictions`` are (round number, {item: label})
    in round order."""
    return [
        pair_kappa(number, previous, now, before)
        for (previous, before), (number, now) in zip(predictions, predictions[1:], strict=False)
    ]


def points(x: float) -> str:
    """A share as signed points: 0.034 → '+3.4', −0.01 → '−1.0'."""
    return f"{100 * x:+.1f}".replace("-", "\u2212")


def _gain_missing(gain: RoundGain | None) -> str:
    """Why the gain does not (yet) support stopping; "" when its interval lies above 0."""
    if gain is None or gain.gain is None:
        return "no random arm yet (the active and random arms are trained once random-slice labels exist)"
    if gain.ci_low is None or gain.ci_high is None:
        return f"no interval for the gain yet (round {gain.number} has {gain.n or 0} test item(s))"
    ci = f"95 % CI {points(gain.ci_low)}\u2026{points(gain.ci_high)}"
    if gain.ci_high < 0:
        return f"random is ahead of active ({points(gain.gain)} points, {ci}, round {gain.number})"
    if gain.ci_low <= 0:
        return f"gain CI includes 0 (active {points(gain.gain)} points over random, {ci}, round {gain.number})"
    return ""


def _kappa_missing(pairs: Sequence[PairKappa], run: int, window: int, threshold: float) -> str:
    if not pairs:
        return "κ needs the stop-set predictions of two evaluated rounds"
    last = pairs[-1]
    if last.kappa is None:
        return f"round {last.number} and round {last.previous} share no stop item"
    if last.kappa < threshold:
        return f"κ {last.kappa:.3f} last round: not yet stable"
    if run < window:
        return f"κ ≥ {threshold:g} for {run} of {window} rounds: not yet stable long enough"
    return ""


def recommend(
    pairs: Sequence[PairKappa],
    gain: RoundGain | None,
    *,
    threshold: float = STABLE_KAPPA,
    window: int = STABLE_WINDOW,
) -> tuple[bool, list[str], str]:
    """(can stop, what is missing, the sentence). Both criteria must hold; it is a recommendation."""
    run = stable_run([p.kappa for p in pairs], threshold)
    missing = [m for m in (_kappa_missing(pairs, run, window, threshold), _gain_missing(gain)) if m]
    if missing or gain is None or gain.gain is None or gain.ci_low is None or gain.ci_high is None:
        return False, missing, "Not yet: " + "; ".join(missing) + "."
    return (
        True,
        [],
        f"You can stop here: predictions have been stable (κ ≥ {threshold:g}) for {window} rounds, and active "
        f"is {points(gain.gain)} points (95 % CI {points(gain.ci_low)}\u2026{points(gain.ci_high)}) over random.",
    )


# -- reading the rounds -----------------------------------------------------------------------------


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def round_gain(number: int, metrics: Mapping[str, Any]) -> RoundGain | None:
    """The gain a round's evaluation stored; None when it trained no active/random arms."""
    gain = metrics.get("gain")
    if not isinstance(gain, dict):
        return None
    arms = metrics.get("arms")
    random_arm = arms.get("random") if isinstance(arms, dict) else None
    labels = _int(random_arm.get("labels")) if isinstance(random_arm, dict) else None
    return RoundGain(
        number=number,
        labels=labels,
        gain=_float(gain.get("gain")),
        ci_low=_float(gain.get("ci_low")),
        ci_high=_float(gain.get("ci_high")),
        n=_int(gain.get("n", metrics.get("test_n"))),
        active_only=_int(gain.get("active_only_correct")),
        random_only=_int(gain.get("random_only_correct")),
    )


def _stop_predictions(metrics: Mapping[str, Any]) -> dict[int, int] | None:
    stored = metrics.get("stop_set")
    if not isinstance(stored, dict):
        return None
    ids, labels = stored.get("item_ids"), stored.get("labels")
    if not isinstance(ids, list) or not isinstance(labels, list) or len(ids) != len(labels):
        return None
    return {int(i): int(label) for i, label in zip(ids, labels, strict=True)}


def stopping_report(*, project: Project) -> StoppingReport:
    """The ML page's stopping panel: κ per round pair, the gain per round, the recommendation."""
    rows = Round.objects.filter(project=project, status=Round.Status.DONE).order_by("number")
    predictions: list[tuple[int, dict[int, int]]] = []
    gains: dict[int, RoundGain] = {}
    # Only the keys used (the page polls this every 2 s; the metrics also hold the SVG plots).
    for number, *values in rows.values_list(
        "number", "metrics__stop_set", "metrics__gain", "metrics__arms", "metrics__test_n"
    ):
        metrics = dict(zip(("stop_set", "gain", "arms", "test_n"), values, strict=True))
        stop = _stop_predictions(metrics)
        if stop is not None:
            predictions.append((number, stop))
        gain = round_gain(number, metrics)
        if gain is not None:
            gains[number] = gain
    pairs = consecutive_kappas(predictions)
    latest_gain = gains[max(gains)] if gains else None
    can_stop, missing, sentence = recommend(pairs, latest_gain)
    enabled = stop_set_size() > 0
    if not enabled and not predictions:
        missing = ["the stop set is off (loop option stop_set_size = 0)", *missing[1:]]
        sentence = "Not yet: " + "; ".join(missing) + "."
    by_number = {p.number: p for p in pairs}
    numbers = sorted({n for n, _ in predictions} | set(gains), reverse=True)
    return StoppingReport(
        stop_set_size=StopSetItem.objects.filter(project=project).count(),
        enabled=enabled,
        rows=[StoppingRow(number=n, pair=by_number.get(n), gain=gains.get(n)) for n in numbers],
        stable_rounds=stable_run([p.kappa for p in pairs]),
        stable=predictions_stable([p.kappa for p in pairs]),
        latest_gain=latest_gain,
        can_stop=can_stop,
        missing=missing,
        recommendation=sentence,
    )


__all__ = [
    "STABLE_KAPPA",
    "STABLE_WINDOW",
    "PairKappa",
    "RoundGain",
    "StoppingReport",
    "consecutive_kappas",
    "pair_kappa",
    "predictions_stable",
    "recommend",
    "round_gain",
    "stable_run",
    "stopping_report",
]
