"""Reads for the ML page: rounds with their progress counters, the learning curve, the test set."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from annotate.models import Annotation, BatchItem, Item, Project, Round
from annotate.services.rounds import ACTIVE_STATUSES


@dataclass(frozen=True)
class TestSetStatus:
    size: int
    labelled: int  # test items with a gold label

    @property
    def percent(self) -> int:
        return round(100 * self.labelled / self.size) if self.size else 0


def _count(qs: QuerySet) -> Coalesce:  # type: ignore[type-arg]
    return Coalesce(Subquery(qs.values("n")[:1], output_field=IntegerField()), 0)


def rounds_with_progress(*, project: Project) -> QuerySet[Round]:
    """Newest first, each with batch_size and labels_collected (subqueries: no join fan-out)."""
    batch = BatchItem.objects.filter(round=OuterRef("pk")).order_by().values("round").annotate(n=Count("id"))
    labels = Annotation.objects.filter(round=OuterRef("pk")).order_by().values("round").annotate(n=Count("id"))
    return (
        Round.objects.filter(project=project)
        .select_related("requested_by")
        .annotate(batch_size=_count(batch), labels_collected=_count(labels))
        .order_by("-number")
    )


def any_round_active(*, project: Project) -> bool:
    return Round.objects.filter(project=project, status__in=ACTIVE_STATUSES).exists()


def test_set_status(*, project: Project) -> TestSetStatus:
    test = Item.objects.filter(project=project, is_test=True)
    return TestSetStatus(size=test.count(), labelled=test.filter(gold_label__isnull=False).count())


def learning_curve_data_uri(*, project: Project) -> str | None:
    """The newest round's learning-curve SVG as a data: URI. Shown through <img>, so any script inside
    the SVG never runs in the page."""
    for metrics in Round.objects.filter(project=project).order_by("-number").values_list("metrics", flat=True):
        svg = (metrics or {}).get("curve_svg") if isinstance(metrics, dict) else None
        if svg:
            return "data:image/svg+xml;base64," + base64.b64encode(str(svg).encode()).decode("ascii")
    return None


def scalar_metrics(metrics: dict[str, object]) -> list[tuple[str, object]]:
    """The round's top-level numeric metrics (accuracy, macro_f1, ...) for the round table."""
    return [(k, v) for k, v in sorted(metrics.items()) if isinstance(v, int | float) and not isinstance(v, bool)]
