"""Lead queues: skipped items, the low-label-mass review bucket, and disagreements."""

from __future__ import annotations

from typing import Literal

from django.db.models import Count, F, Prefetch, Q, QuerySet

from annotate.models import Annotation, Item, Project, Skip

Queue = Literal["skipped", "review", "disagreements"]
QUEUES: dict[str, str] = {
    "disagreements": "Disagreements",
    "skipped": "Skipped",
    "review": "Review bucket",
}


def skipped_items(*, project: Project) -> QuerySet[Item]:
    """Items with at least one unresolved skip, oldest skip first."""
    return (
        Item.objects.filter(project=project)
        .annotate(open_skips=Count("skips", filter=Q(skips__resolved=False)))
        .filter(open_skips__gt=0)
        .order_by("id")
    )


def review_bucket(*, project: Project) -> QuerySet[Item]:
    """Items the scorer put aside (ensemble-mean label mass under the threshold)."""
    return Item.objects.filter(project=project, state=Item.State.REVIEW).order_by("id")


def disagreements(*, project: Project) -> QuerySet[Item]:
    """Items with all the labels they need, no final label, and at least two different labels."""
    return (
        Item.objects.filter(project=project, final_label__isnull=True)
        .exclude(state=Item.State.UNLABELABLE)
        .annotate(
            n_annotations=Count("annotations", distinct=True), n_labels=Count("annotations__label", distinct=True)
        )
        .filter(n_annotations__gte=F("required_labels"), n_labels__gt=1)
        .order_by("id")
    )


def queue_items(*, project: Project, queue: str) -> QuerySet[Item]:
    """One queue, with the annotations and open skips a lead needs to decide."""
    base = {"skipped": skipped_items, "review": review_bucket, "disagreements": disagreements}[queue](project=project)
    return base.prefetch_related(
        Prefetch("annotations", queryset=Annotation.objects.select_related("annotator", "label").order_by("id")),
        Prefetch(
            "skips",
            queryset=Skip.objects.filter(resolved=False).select_related("annotator").order_by("id"),
            to_attr="open_skip_rows",
        ),
    ).select_related("final_label")


def queue_counts(*, project: Project) -> dict[str, int]:
    return {
        "disagreements": disagreements(project=project).count(),
        "skipped": skipped_items(project=project).count(),
        "review": review_bucket(project=project).count(),
    }


def item_for_lead(*, project: Project, item_id: int) -> Item:
    """One item with everything shown in its queue row (raises Item.DoesNotExist)."""
    return (
        Item.objects.filter(project=project, pk=item_id)
        .select_related("final_label", "adjudication__decided_by", "adjudication__label")
        .prefetch_related(
            Prefetch("annotations", queryset=Annotation.objects.select_related("annotator", "label").order_by("id")),
            Prefetch(
                "skips",
                queryset=Skip.objects.filter(resolved=False).select_related("annotator"),
                to_attr="open_skip_rows",
            ),
        )
        .get()
    )
