"""Annotator reads: progress counts, label buttons with their keys, the model's suggestion, guidelines."""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import markdown
import nh3
from django.core.cache import cache
from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from annotate.models import Annotation, BatchItem, Item, Label, Prediction, Project, Round

# Keys the annotate page reserves for actions: s skip, u undo, h guidelines (and ? help).
RESERVED_KEYS = frozenset("suh")
SHORTCUT_KEYS = tuple("123456789") + tuple(c for c in string.ascii_lowercase if c not in RESERVED_KEYS)
_PROJECT_COUNTS_TTL = 3  # seconds; see progress_for


@dataclass(frozen=True)
class Bar:
    done: int
    total: int

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


@dataclass(frozen=True)
class Progress:
    batch: Bar  # items of the labelling batch that have all their labels / batch size
    round: Bar  # labels given in the labelling round / labels it needs (overlap items need k)
    overall: Bar  # pool items with a final label / pool size (test set excluded)
    test: Bar  # test-set items with a final label / test-set size
    mine: int  # this annotator's labels in the project
    mine_round: int  # ... in the round(s) now labelling


@dataclass(frozen=True)
class LabelButton:
    label: Label
    key: str | None  # None past the 32nd label: click only


def shortcut_keys(n: int) -> list[str | None]:
    """Keys for n label buttons: 1–9, then letters a… without s, u, h."""
    return [SHORTCUT_KEYS[i] if i < len(SHORTCUT_KEYS) else None for i in range(n)]


def label_buttons(*, project: Project) -> list[LabelButton]:
    labels = list(Label.objects.filter(project=project))
    return [LabelButton(label, key) for label, key in zip(labels, shortcut_keys(len(labels)), strict=True)]


def _cached(project: Project, name: str, compute: Callable[[], dict[str, int]]) -> dict[str, int]:
    key = f"alann:progress:{name}:{project.pk}:{project.created_at.timestamp()}"
    counts: dict[str, int] | None = cache.get(key)
    if counts is None:
        counts = compute()
        cache.set(key, counts, _PROJECT_COUNTS_TTL)
    return counts


def _pool_counts(project: Project) -> dict[str, int]:
    final = Q(final_label__isnull=False)
    return Item.objects.filter(project=project).aggregate(
        pool=Count("id", filter=Q(is_test=False)),
        pool_final=Count("id", filter=Q(is_test=False) & final),
        test=Count("id", filter=Q(is_test=True)),
        test_final=Count("id", filter=Q(is_test=True) & final),
    )


def _labeling_batch(project: Project) -> QuerySet[BatchItem]:
    return BatchItem.objects.filter(round__project=project, round__status=Round.Status.LABELING)


def _batch_counts(project: Project) -> dict[str, int]:
    batch_items = _labeling_batch(project).values("item_id")
    labels_on_item = Annotation.objects.filter(item=OuterRef("pk")).order_by().values("item")
    n_labels = Subquery(labels_on_item.annotate(n=Count("*")).values("n")[:1], output_field=IntegerField())
    counts = (
        Item.objects.filter(pk__in=batch_items)
        .annotate(n=Coalesce(n_labels, 0))
        .aggregate(
            total=Count("id"),
            complete=Count("id", filter=Q(n__gte=F("required_labels")) | Q(final_label__isnull=False)),
            needed=Coalesce(Sum("required_labels"), 0),
            given=Coalesce(Sum("n"), 0),
        )
    )
    return {k: int(v) for k, v in counts.items()}


def progress_for(*, project: Project, annotator: Any) -> Progress:
    """Team counts are shared by every annotator of the project and cached a few seconds (a bar that
    lags by seconds is fine, recounting them on every label is not); the annotator's own are live."""
    batch = _cached(project, "batch", lambda: _batch_counts(project))
    pool = _cached(project, "pool", lambda: _pool_counts(project))
    mine = Annotation.objects.filter(annotator=annotator, item__project=project).aggregate(
        total=Count("id"), this_round=Count("id", filter=Q(round__status=Round.Status.LABELING))
    )
    return Progress(
        batch=Bar(batch["complete"], batch["total"]),
        round=Bar(batch["given"], batch["needed"]),
        overall=Bar(pool["pool_final"], pool["pool"]),
        test=Bar(pool["test_final"], pool["test"]),
        mine=mine["total"],
        mine_round=mine["this_round"],
    )


def suggestion_for(*, item: Item, project: Project) -> Prediction | None:
    """The model's latest prediction, only where the project shows it (off by default: it biases
    annotators) and never on test-set items."""
    if item.is_test or not project.show_suggestion:
        return None
    return Prediction.objects.filter(item=item).select_related("label").order_by("-created_at", "-id").first()


def guidelines_html(*, project: Project) -> str:
    """The project's markdown guidelines as sanitised HTML (nh3 drops scripts, handlers, js: links)."""
    if not project.guidelines.strip():
        return ""
    return nh3.clean(markdown.markdown(project.guidelines, extensions=["tables", "fenced_code", "sane_lists"]))
