"""Where a round's batch stands: how many items are finished, and what holds up the others.

A batch item is *finished* for its round when it has a final label (annotators agreed, or a lead
decided), a lead marked it unlabelable, or a lead returned it to the pool after a skip (it may be
selected again later; the round does not wait for it). Every other item is held up by one thing,
which the ML, lead and annotate pages name together with what to press:

- ``need_labels``: it still needs labels from annotators (some of them may be held right now);
- ``skipped``: an annotator skipped it and a lead has not decided yet (lead → Skipped);
- ``disagreements``: its annotators disagree (lead → Disagreements);
- ``in_review``: the scorer put it in the review bucket (lead → Review bucket).

``batch_items_finished`` is what the round's auto-retrain check counts (annotate.services.rounds).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from annotate.models import BatchItem, Item, Round, Skip


@dataclass(frozen=True)
class BatchStatus:
    round_number: int
    size: int
    finished: int
    need_labels: int
    skipped: int
    disagreements: int
    in_review: int

    @property
    def complete(self) -> bool:
        return self.size > 0 and self.finished >= self.size

    @property
    def left(self) -> int:
        return self.size - self.finished

    @property
    def percent(self) -> int:
        return round(100 * self.finished / self.size) if self.size else 0

    @property
    def waiting_for_lead(self) -> int:
        return self.skipped + self.disagreements + self.in_review


def _unfinished_rows(round_id: int) -> QuerySet[BatchItem]:
    """The round's batch rows whose item is not finished (see the module docstring)."""
    open_skip = Skip.objects.filter(item=OuterRef("item_id"), resolved=False)
    any_skip = Skip.objects.filter(item=OuterRef("item_id"))
    return (
        BatchItem.objects.filter(round_id=round_id, item__final_label__isnull=True)
        .exclude(item__state=Item.State.UNLABELABLE)
        .annotate(open_skip=Exists(open_skip), any_skip=Exists(any_skip))
        # returned by a lead: every skip of it resolved, back in the pool
        .exclude(Q(any_skip=True, open_skip=False, item__state=Item.State.POOL))
    )


def batch_items_finished(*, round: Round) -> int:
    """Batch items finished for the round: labelled, decided (also unlabelable) or returned."""
    size = BatchItem.objects.filter(round_id=round.pk).count()
    return size - _unfinished_rows(round.pk).count()


def batch_status(*, round: Round) -> BatchStatus:
    """The batch's finished count and, for the others, what each one waits for."""
    size = BatchItem.objects.filter(round_id=round.pk).count()
    rows = _unfinished_rows(round.pk).annotate(
        n=Count("item__annotations", distinct=True),
        n_labels=Count("item__annotations__label", distinct=True),
    )
    skipped = disagreements = in_review = need = 0
    for row in rows.values("open_skip", "n", "n_labels", "item__required_labels", "item__state"):
        if row["item__state"] == Item.State.REVIEW:
            in_review += 1
        elif row["n"] >= row["item__required_labels"] and row["n_labels"] > 1:
            disagreements += 1
        elif row["open_skip"]:
            skipped += 1
        else:
            need += 1
    unfinished = skipped + disagreements + in_review + need
    return BatchStatus(
        round_number=round.number,
        size=size,
        finished=size - unfinished,
        need_labels=need,
        skipped=skipped,
        disagreements=disagreements,
        in_review=in_review,
    )


def labeling_round(*, project_id: int) -> Round | None:
    """The oldest round in "labeling" (the one annotators are served from), if any."""
    return Round.objects.filter(project_id=project_id, status=Round.Status.LABELING).order_by("number").first()


def current_batch(*, project_id: int) -> BatchStatus | None:
    """Where the batch annotators are served from stands (the oldest round in "labeling"); None when
    no round labels. The annotate, lead and ML pages all count a batch with ``batch_status``."""
    current = labeling_round(project_id=project_id)
    return batch_status(round=current) if current is not None else None


def labeling_rounds_of_item(*, item_id: int) -> list[int]:
    """Ids of the rounds in "labeling" whose batch holds the item."""
    return list(
        BatchItem.objects.filter(item_id=item_id, round__status=Round.Status.LABELING).values_list(
            "round_id", flat=True
        )
    )


__all__ = [
    "BatchStatus",
    "batch_items_finished",
    "batch_status",
    "current_batch",
    "labeling_round",
    "labeling_rounds_of_item",
]
