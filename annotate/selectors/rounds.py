"""Reads for the ML page: rounds with their progress counters, the learning curve, the test set."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from annotate.models import Annotation, BatchItem, Item, Project, Round


@dataclass(frozen=True)
class TestSetStatus:
    size: int
    labelled: int  # test items with a final label (imported gold, or agreed by annotators): what evaluation uses

    @property
    def percent(self) -> int:
        return round(100 * self.labelled / self.size) if self.size else 0


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


def test_set_status(*, project: Project) -> TestSetStatus:
    test = Item.objects.filter(project=project, is_test=True)
    return TestSetStatus(size=test.count(), labelled=test.filter(final_label__isnull=False).count())


def learning_curve_data_uri(*, project: Project) -> str | None:
    """The newest round's learning-curve SVG as a data: URI. Shown through <img>, so any script inside
    the SVG never runs in the page."""
    for metrics in Round.objects.filter(project=project).order_by("-number").values_list("metrics", flat=True):
        svg = (metrics or {}).get("curve_svg") if isinstance(metrics, dict) else None
        if svg:
            return "data:image/svg+xml;base64," + base64.b64encode(str(svg).encode()).decode("ascii")
    return None


def latest_evaluation(*, project: Project) -> dict[str, object] | None:
    """What the newest evaluated round says, in words and numbers: the active-vs-random gain sentence,
    headline metrics, model-vs-human and human-human kappa, cost, and the reliability diagram."""
    row = (
        Round.objects.filter(project=project, metrics__has_key="accuracy")
        .order_by("-number")
        .values("number", "metrics", "cost")
        .first()
    )
    if row is None:
        return None
    metrics, cost = row["metrics"] or {}, row["cost"] or {}
    reliability = metrics.get("reliability_svg")
    return {
        "round": row["number"],
        "gain_text": metrics.get("gain_text"),
        "accuracy": metrics.get("accuracy"),
        "macro_f1": metrics.get("macro_f1"),
        "ece": metrics.get("ece"),
        "kappa_model_human": metrics.get("kappa_model_human"),
        "kappa_human_human": metrics.get("kappa_human_human"),
        "labels": metrics.get("labels"),
        "gain_per_100": cost.get("accuracy_gain_per_100_labels"),
        "reliability_uri": "data:image/svg+xml;base64," + base64.b64encode(str(reliability).encode()).decode("ascii")
        if reliability
        else None,
    }
