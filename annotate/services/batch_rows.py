"""An item's batch rows, kept in step with its final label: a leaf that labelling, review and the
history's undo all call (none of them imports another for it)."""

from __future__ import annotations

from annotate.models import BatchItem


def batch_rows_done(*, item_id: int, done: bool) -> None:
    """Mark the item's batch rows finished (final label set, or out of the pool) or open again, so the
    queue walk skips finished rows by index. Call it wherever an item's final label or state changes."""
    BatchItem.objects.filter(item_id=item_id).exclude(done=done).update(done=done)
