"""Lead decisions: adjudicate an item (final label or unlabelable) and return an item to the pool."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from annotate.models import Adjudication, Item, Label, Skip
from annotate.services.labeling import batch_rows_done


class ReviewError(ValueError):
    pass


@transaction.atomic
def adjudicate(*, item: Item, label: Label | None, lead: Any, note: str = "") -> Adjudication:
    """Set the item's final label (label None: unlabelable, out of the loop), record who decided and
    resolve the item's skips. Upsert: deciding again replaces the decision, never adds a second row."""
    if label is not None and label.project_id != item.project_id:
        raise ReviewError(f"label {label.name!r} belongs to another project")
    item = Item.objects.select_for_update().get(pk=item.pk)
    decision, _ = Adjudication.objects.update_or_create(
        item=item, defaults={"label": label, "decided_by": lead, "note": note}
    )
    item.final_label = label
    item.finalized_at = timezone.now()
    item.state = Item.State.UNLABELABLE if label is None else Item.State.POOL
    item.save(update_fields=["final_label", "finalized_at", "state"])
    batch_rows_done(item_id=item.pk, done=True)
    Skip.objects.filter(item=item, resolved=False).update(resolved=True)
    return decision


@transaction.atomic
def item_return_to_pool(*, item: Item, lead: Any) -> Item:
    """Send a review-bucket or skipped item back to annotators: state pool, skips resolved.
    An item that already has a final label stays decided (adjudicate again to change it)."""
    item = Item.objects.select_for_update().get(pk=item.pk)
    if item.final_label_id is not None:
        raise ReviewError("this item already has a final label; adjudicate it again to change the label")
    item.state = Item.State.POOL
    item.review_reason = ""
    item.finalized_at = None
    item.save(update_fields=["state", "review_reason", "finalized_at"])
    batch_rows_done(item_id=item.pk, done=False)
    Adjudication.objects.filter(item=item).delete()  # an 'unlabelable' decision no longer holds
    Skip.objects.filter(item=item, resolved=False).update(resolved=True)
    return item
