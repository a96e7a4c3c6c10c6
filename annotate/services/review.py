"""Lead decisions: adjudicate an item (final label or unlabelable) and return an item to the pool."""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction
from django.utils import timezone

from annotate.models import Adjudication, Annotation, Item, ItemEvent, Label, Skip
from annotate.selectors.progress import labeling_rounds_of_item
from annotate.services.batch_rows import batch_rows_done
from annotate.services.history import decision_snapshot, event_record


class ReviewError(ValueError):
    pass


@transaction.atomic
def adjudicate(*, item: Item, label: Label | None, lead: Any, note: str = "") -> Adjudication:
    """Set the item's final label (label None: unlabelable, out of the loop), record who decided and
        resolve the item's skips. Upsert: deciding again replaces the standing decision (one Adjudication
    row); every decision and its note stays in the item's history (ItemEvent), with the state it
    replaced, so it can be undone (annotate.services.history.decision_undo)."""
    if label is not None and label.project_id != item.project_id:
        raise ReviewError(f"label {label.name!r} belongs to another project")
    item = Item.objects.select_for_update().select_related("project").get(pk=item.pk)
    if not item.project.lead_adjudicates_own and Annotation.objects.filter(item=item, annotator=lead).exists():
        raise ReviewError(
            "you labelled this item yourself, so another lead decides it "
            "(Setup: “Leads may decide items they labelled” allows it)"
        )
    before = decision_snapshot(item)
    decision, _ = Adjudication.objects.update_or_create(
        item=item, defaults={"label": label, "decided_by": lead, "note": note}
    )
    event_record(item_id=item.pk, kind=ItemEvent.Kind.DECISION, actor=lead, label=label, note=note, before=before)
    item.final_label = label
    item.finalized_at = timezone.now()
    item.state = Item.State.UNLABELABLE if label is None else Item.State.POOL
    item.save(update_fields=["final_label", "finalized_at", "state"])
    batch_rows_done(item_id=item.pk, done=True)
    Skip.objects.filter(item=item, resolved=False).update(resolved=True)
    _after_decision(item.pk)
    return decision


@transaction.atomic
def item_return_to_pool(*, item: Item, lead: Any) -> Item:
    """Send a review-bucket or skipped item back to annotators: state pool, skips resolved.
    An item that already has a final label stays decided (adjudicate again to change it)."""
    item = Item.objects.select_for_update().get(pk=item.pk)
    if item.final_label_id is not None:
        raise ReviewError("this item already has a final label; adjudicate it again to change the label")
    event_record(item_id=item.pk, kind=ItemEvent.Kind.RETURN, actor=lead, before=decision_snapshot(item))
    item.state = Item.State.POOL
    item.review_reason = ""
    item.finalized_at = None
    item.save(update_fields=["state", "review_reason", "finalized_at"])
    batch_rows_done(item_id=item.pk, done=False)
    Adjudication.objects.filter(item=item).delete()  # an 'unlabelable' decision no longer holds
    Skip.objects.filter(item=item, resolved=False).update(resolved=True)
    _after_decision(item.pk)
    return item


@transaction.atomic
def item_send_to_review(*, item: Item, lead: Any, reason: str = "") -> Item:
    """A lead takes an item out of the annotators' queues into the review bucket (item browser, lead
    queues), recorded in its history with the state it replaced (so it can be undone). An item with a
    final label keeps it: relabel it instead."""
    item = Item.objects.select_for_update().get(pk=item.pk)
    if item.final_label_id is not None:
        raise ReviewError("this item already has a final label; relabel it instead of sending it to review")
    if item.state == Item.State.UNLABELABLE:
        raise ReviewError("this item is marked unlabelable; return it to the pool first")
    before = decision_snapshot(item)
    item.state = Item.State.REVIEW
    item.review_reason = (reason.strip() or f"sent to review by {lead.username}")[:200]
    item.save(update_fields=["state", "review_reason"])
    event_record(item_id=item.pk, kind=ItemEvent.Kind.REVIEW, actor=lead, note=reason.strip(), before=before)
    return item


def _after_decision(item_id: int) -> None:
    """A decided or returned item may finish its round's batch: once the decision commits, let each
    labelling round holding the item start training if its batch is done (a no-op while the
    project's auto-retrain share is off or not reached)."""
    from annotate.services.rounds import maybe_auto_retrain

    for round_id in labeling_rounds_of_item(item_id=item_id):
        transaction.on_commit(functools.partial(maybe_auto_retrain, round_id))
