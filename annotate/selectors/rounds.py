"""Reads for the ML page: rounds with their progress counters, the learning curve, the test set, the
selection strategy in charge."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce

from annotate.models import Annotation, BatchItem, Item, Project, Round
from annotate.selectors import curve_chart
from annotate.selectors.round_display import comparison_sentence

# Below this many labelled test items one item moves the accuracy by more than 3 points: the ML page
# withholds the accuracy and the curve instead of plotting noise ("Test accuracy 0.0 % · Test items: 1").
# A smaller test set needs every one of its items.
MIN_TEST_LABELS = 30


@dataclass(frozen=True)
class TestSetStatus:
    __test__ = False  # not a pytest class

    size: int
    labelled: int  # test items with a final label (imported gold, or agreed by annotators): what evaluation uses

    @property
    def percent(self) -> int:
        return round(100 * self.labelled / self.size) if self.size else 0

    @property
    def required(self) -> int:
        """Labelled test items a round's accuracy is shown from."""
        return min(MIN_TEST_LABELS, self.size) if self.size else MIN_TEST_LABELS

    @property
    def missing(self) -> int:
        return max(0, self.required - self.labelled)


def curve_withheld(*, test_set: TestSetStatus, evaluation: Mapping[str, object] | None) -> str:
    """Why the learning curve and the latest accuracy are not shown ("" when they are): the newest
    evaluated round (the last of ``evaluations``) was measured on fewer labelled test items than
    ``test_set.required``."""
    evaluated_on = evaluation.get("test_n") if evaluation else None
    if not isinstance(evaluated_on, int) or evaluated_on >= test_set.required:
        return ""
    now = f"{test_set.labelled} are labelled now"
    if test_set.missing:
        now += f"; {test_set.missing} more are missing"
    return (
        f"Accuracy withheld: the latest round was measured on {evaluated_on} labelled test "
        f"item{'s' * (evaluated_on != 1)}, and it takes {test_set.required} to mean something ({now}). "
        "Annotators label them in the Test set queue, or import gold labels."
    )


def _count(qs: QuerySet) -> Coalesce:  # type: ignore[type-arg]
    return Coalesce(Subquery(qs.values("n")[:1], output_field=IntegerField()), 0)


def rounds_with_progress(*, project: Project) -> list[Round]:
    """Newest first, each with batch_size and labels_collected (subqueries: no join fan-out); the
    ML page words each round with annotate.selectors.round_display."""
    batch = BatchItem.objects.filter(round=OuterRef("pk")).order_by().values("round").annotate(n=Count("id"))
    labels = Annotation.objects.filter(round=OuterRef("pk")).order_by().values("round").annotate(n=Count("id"))
    return list(
        Round.objects.filter(project=project)
        .select_related("requested_by")
        .annotate(batch_size=_count(batch), labels_collected=_count(labels))
        .order_by("-number")
    )


def any_round_active(*, project: Project) -> bool:
    return Round.objects.filter(project=project, status__in=Round.ACTIVE_STATUSES).exists()


def pool_end_round(*, project: Project) -> Round | None:
    """The finished round that found the pool fully labelled (``Round.pool_exhausted``), while nothing
    new is eligible since: no further round can select anything. None otherwise (also once more items
    are imported)."""
    from annotate.selectors.loop import eligible_pool

    last = Round.objects.filter(project=project, status=Round.Status.DONE).order_by("-number").first()
    if last is None or not last.pool_exhausted or eligible_pool(project=project).exists():
        return None
    return last


def pool_end_sentence(row: Round) -> str:
    """Why no round can start after the pool's end, and what to do instead (the refusal's message)."""
    labels = (row.metrics or {}).get("labels")
    on = f" on all {int(labels)} labels" if isinstance(labels, int | float) else ""
    return (
        f"the pool is fully labelled: round {row.number} found nothing left to select and trained the final"
        f" model from scratch{on}. Import more items to go on, or auto-label and export"
    )


def in_review(*, project: Project) -> int:
    """Pool items in the leads' review bucket (never selected until a lead returns them)."""
    items = Item.objects.filter(project=project, is_test=False, state=Item.State.REVIEW, final_label__isnull=True)
    return items.count()


def test_set_status(*, project: Project) -> TestSetStatus:
    test = Item.objects.filter(project=project, is_test=True)
    return TestSetStatus(size=test.count(), labelled=test.filter(final_label__isnull=False).count())


def learning_curve_data_uri(*, project: Project) -> str | None:
    """The project's learning curve as an SVG data: URI, drawn (curve_chart) from every round's own
    points — so a round's comparison arms evaluated after the round (loop option arms_timing) join it
    whenever they finish — or, without any, the newest stored matplotlib SVG. Shown through <img>, so
    any script inside the SVG never runs in the page."""
    points: list[Any] = []
    stored = None
    for number, metrics in Round.objects.filter(project=project).order_by("number").values_list("number", "metrics"):
        if not isinstance(metrics, dict):
            continue
        own = metrics.get("points")
        if isinstance(own, list):
            points.extend(p for p in own if isinstance(p, dict) and p.get("round") == number)
        stored = metrics.get("curve_svg") or stored
    svg = curve_chart.curve_svg(points) if points else stored
    return "data:image/svg+xml;base64," + base64.b64encode(str(svg).encode()).decode("ascii") if svg else None


def comparison_running(*, project: Project) -> bool:
    """Whether a done round's comparison arms are training or being evaluated after it (the ML page
    keeps polling until their points are in)."""
    return Round.objects.filter(project=project, metrics__comparison__state="running").exists()


def evaluations(*, project: Project) -> list[dict[str, object]]:
    """Every evaluated round, oldest first, in words and numbers: the active-vs-random gain sentence,
    headline metrics, model-vs-human kappa, cost, and the reliability diagram. (Human-human kappa is
    not here: it is the Agreement page's, ``agreement.agreement_summary``.)"""
    rows = (
        Round.objects.filter(project=project, metrics__has_key="accuracy")
        .order_by("number")
        .values("number", "metrics", "cost")
    )
    return [_evaluation(row["number"], row["metrics"] or {}, row["cost"] or {}) for row in rows]


def _evaluation(number: int, metrics: dict[str, Any], cost: dict[str, Any]) -> dict[str, object]:
    reliability = metrics.get("reliability_svg")
    return {
        "round": number,
        "gain_text": metrics.get("gain_text"),
        "comparison_text": comparison_sentence(metrics),
        "accuracy": metrics.get("accuracy"),
        "macro_f1": metrics.get("macro_f1"),
        "ece": metrics.get("ece"),
        "kappa_model_human": metrics.get("kappa_model_human"),
        "labels": metrics.get("labels"),
        "test_n": int(metrics.get("test_n") or 0),
        "gain_per_100": cost.get("accuracy_gain_per_100_labels"),
        "reliability_uri": "data:image/svg+xml;base64," + base64.b64encode(str(reliability).encode()).decode("ascii")
        if reliability
        else None,
    }


@dataclass(frozen=True)
class StrategyArm:
    """One arm of the selection portfolio as the ML page shows it: missing values are '—'."""

    name: str
    share: str  # of the batch
    gain: str  # the arm's mean gain so far
    n: str  # rounds (or batches) that gain is averaged over
    in_charge: bool


@dataclass(frozen=True)
class SelectionInCharge:
    round: int
    in_charge: str  # the strategy in charge
    reason: str  # why, in one sentence ("" when the round only names its strategy)
    arms: list[StrategyArm]
    from_selection: bool  # True: read from metrics["selection"]; False: the round's strategy field only
    note: str = ""


def _share(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{100 * float(value):.0f} %"
    return "—"


def _signed(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{float(value):+.3f}".replace("-", "\u2212")
    return "—"


def _portfolio_arms(selection: dict[str, object], in_charge: str) -> list[StrategyArm]:
    raw_shares, raw_gains = selection.get("shares"), selection.get("gains")
    shares = raw_shares if isinstance(raw_shares, dict) else {}
    gains = raw_gains if isinstance(raw_gains, dict) else {}
    arms = []
    for name in sorted(set(shares) | set(gains), key=str):
        gain = gains.get(name)
        gain = gain if isinstance(gain, dict) else {}
        n = gain.get("n")
        arms.append(
            StrategyArm(
                name=str(name),
                share=_share(shares.get(name)),
                gain=_signed(gain.get("mean")),
                n=str(int(n)) if isinstance(n, int | float) and not isinstance(n, bool) else "—",
                in_charge=str(name) == in_charge,
            )
        )
    return arms


# Why a cold-start round picked what it did, by its recorded mode (annotate.services.planning.cold_mode).
COLD_REASONS = {
    "typical": "no adapter yet, so the most typical item of each region of the pool (k-means over the "
    "text embeddings) rather than a uniform draw",
    "random": "no adapter yet, so a uniform draw (a project run as random always starts that way)",
    "diversity": "no adapter yet, so items far from each other and from the labels (farthest-first over the "
    "text embeddings)",
    "hedged": "no adapter yet, so half the most typical items of the pool's regions and half a uniform draw "
    "(a class the regions miss keeps its share)",
}


def _cold_reason(mode: object) -> str:
    return COLD_REASONS.get(str(mode), "no adapter yet: nothing to rank by")


def selection_in_charge(*, project: Project) -> SelectionInCharge | None:
    """Which selection strategy is in charge and why: ``metrics["selection"]`` of the newest round
    that has it (written by the adaptive portfolio strategy: in_charge, shares, gains, reason), read
    defensively (a missing or malformed value shows as "—"); without one, the newest round's
    ``strategy``. A newer round that chose another strategy is named in ``note``. None before the
    first round."""
    latest = (
        Round.objects.filter(project=project)
        .order_by("-number")
        .values("number", "strategy", cold_mode=KeyTransform("cold_mode", "metrics"))
        .first()
    )
    if latest is None:
        return None
    row = (
        Round.objects.filter(project=project, metrics__has_key="selection")
        .order_by("-number")
        .values("number", "strategy", selection=KeyTransform("selection", "metrics"))
        .first()
    )
    selection = row["selection"] if row else None
    if row is None or not isinstance(selection, dict):
        return SelectionInCharge(
            round=latest["number"],
            in_charge=latest["strategy"] or "—",
            reason=_cold_reason(latest["cold_mode"]) if latest["strategy"] == "cold-start" else "",
            arms=[],
            from_selection=False,
        )
    in_charge = str(selection.get("in_charge") or row["strategy"] or "—")
    note = ""
    if latest["number"] > row["number"]:
        note = f"Round {latest['number']} (newer) has strategy {latest['strategy'] or '—'} and no portfolio record yet."
    return SelectionInCharge(
        round=row["number"],
        in_charge=in_charge,
        reason=str(selection.get("reason") or "—"),
        arms=_portfolio_arms(selection, in_charge),
        from_selection=True,
        note=note,
    )
