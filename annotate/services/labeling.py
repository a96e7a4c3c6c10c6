"""Annotator writes: hand out items (leases), take labels and skips, revise the last label.

Concurrency. Handing out an item is a read-then-write (find an item with room, then lease it), so it
must be serialised per item:
- PostgreSQL: the candidate Item row is locked with ``SELECT ... FOR UPDATE SKIP LOCKED`` (other
  annotators skip it instead of waiting), then the room on it is re-counted in a new statement (READ
  COMMITTED sees leases committed meanwhile) before the lease is written. The annotator's user row is
  locked too, so two requests of one annotator (double click, two tabs) cannot take two items.
- SQLite: ``transaction_mode = IMMEDIATE`` (config/settings.py) takes the database write lock at
  BEGIN, so these transactions run one at a time; ``select_for_update`` is a no-op there.
The unique constraints (one Lease and one Annotation per (item, annotator)) back both up.

Submitting is idempotent: the same label twice stores one row and returns it; a different label on an
already-labelled item is refused (`AlreadyLabelled`) unless ``revise=True`` — the undo path (`u`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from annotate.models import Adjudication, Annotation, BatchItem, Item, Label, Lease, Project, Round, Skip

Queue = Literal["batch", "test"]
QUEUES: tuple[Queue, ...] = ("batch", "test")
MAX_SECONDS_SPENT = 24 * 3600.0  # longer is a forgotten tab, not labelling time
_LOCK_ATTEMPTS = 4  # candidate queries per request when other annotators took every candidate meanwhile


class LabelingError(ValueError):
    """A submission that was refused; the message is shown to the annotator as is."""


class UnknownLabel(LabelingError):
    pass


class AlreadyLabelled(LabelingError):
    pass


class NotLeased(LabelingError):
    pass


def _now(now: datetime | None) -> datetime:
    return now if now is not None else timezone.now()


# The hot path of every annotator request, in SQL that SQLite and PostgreSQL both run (the ORM
# version cost more to build than to run). The inner query applies the cheap column tests and sorts
# (OFFSET 0 keeps the planner from flattening it); the per-row subqueries then run on the sorted rows
# only until LIMIT rows qualify, instead of on the whole batch before a sort.
_OPEN_ITEMS_SQL = """
SELECT c.id FROM (
  SELECT i.id, i.required_labels, {sort_cols} FROM {item} i {batch_join}
  WHERE i.project_id = %(project)s AND i.final_label_id IS NULL AND i.state = %(pool)s
    AND i.is_test = %(is_test)s {only}
  ORDER BY {order} {fence}
) c
WHERE NOT EXISTS (SELECT 1 FROM {annotation} mine WHERE mine.item_id = c.id AND mine.annotator_id = %(user)s)
  AND NOT EXISTS (SELECT 1 FROM {skip} sk WHERE sk.item_id = c.id AND sk.annotator_id = %(user)s)
  {room}
ORDER BY {outer_order} LIMIT %(limit)s
"""
_BATCH_JOIN = "JOIN {batchitem} b ON b.item_id = i.id JOIN {round} r ON r.id = b.round_id AND r.status = %(labeling)s"
# Places used on an item: its annotations plus the live leases of others.
_TAKEN_SQL = """(SELECT COUNT(*) FROM {annotation} a WHERE a.item_id = {alias}.id)
  + (SELECT COUNT(*) FROM {lease} l WHERE l.item_id = {alias}.id AND l.expires_at > %(now)s
     AND l.annotator_id <> %(user)s)"""
_TABLES = {m.__name__.lower(): m._meta.db_table for m in (Item, BatchItem, Round, Annotation, Skip, Lease)}
_CANDIDATES = 12  # fetched per query; concurrent annotators skip the ones being leased right now


def _open_item_ids(
    *, project: Project, annotator: Any, queue: Queue, now: datetime, only: int | None = None
) -> list[int]:
    """The first items of `queue` open to `annotator`, in queue order: in the queue, not finalised, in
    the pool, not labelled or skipped by them; with room for them unless `only` (then: just that
    item, room not checked)."""
    batch = queue == "batch"
    sql = _OPEN_ITEMS_SQL.format(
        sort_cols="r.number AS round_number, b.rank AS rank" if batch else "0 AS round_number, 0 AS rank",
        batch_join=_BATCH_JOIN.format(**_TABLES) if batch else "",
        only="AND i.id = %(only)s" if only is not None else "",
        room="" if only is not None else f"AND {_TAKEN_SQL.format(alias='c', **_TABLES)} < c.required_labels",
        order="r.number, b.rank, i.id" if batch else "i.id",
        outer_order="c.round_number, c.rank, c.id",
        fence="OFFSET 0" if connection.vendor == "postgresql" else "LIMIT -1 OFFSET 0",
        **_TABLES,
    )
    params = {
        "project": project.pk,
        "pool": Item.State.POOL.value,
        "is_test": not batch,
        "user": annotator.pk,
        "labeling": Round.Status.LABELING.value,
        "now": connection.ops.adapt_datetimefield_value(now),
        "only": only,
        "limit": 1 if only is not None else _CANDIDATES,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [int(row[0]) for row in cursor.fetchall()]


def _lock_item(item_id: int) -> bool:
    """PostgreSQL: lock the item row unless another transaction holds it (then: False, try the next)."""
    if not connection.features.has_select_for_update_skip_locked:
        return True  # SQLite: the IMMEDIATE transaction already excludes every other writer
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {_TABLES['item']} WHERE id = %s FOR UPDATE SKIP LOCKED", [item_id])
        return cursor.fetchone() is not None


def _room_left(*, item_id: int, annotator: Any, now: datetime) -> bool:
    taken = _TAKEN_SQL.format(alias="i", **_TABLES)
    sql = f"SELECT {taken} < i.required_labels FROM {_TABLES['item']} i WHERE i.id = %(id)s"
    params = {"id": item_id, "user": annotator.pk, "now": connection.ops.adapt_datetimefield_value(now)}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return bool(row and row[0])


def _lock_user(annotator: Any) -> None:
    if connection.features.has_select_for_update:
        list(get_user_model().objects.select_for_update().filter(pk=annotator.pk).values_list("pk"))


def _require_test_overlap(project: Project) -> None:
    """Test items are double-labelled where overlap is on (agreement on the test set is reported)."""
    if project.overlap_share > 0 and project.overlap_annotators > 1:
        Item.objects.filter(
            project=project, is_test=True, final_label__isnull=True, required_labels__lt=project.overlap_annotators
        ).update(required_labels=project.overlap_annotators)


def _held_item(*, project: Project, annotator: Any, queue: Queue, now: datetime) -> Item | None:
    """The item of the annotator's live lease, if it is still open to them in `queue`."""
    lease = Lease.objects.filter(annotator=annotator, expires_at__gt=now, item__project=project).order_by("-created_at")
    item_id = lease.values_list("item_id", flat=True).first()
    if item_id is None:
        return None
    if not _open_item_ids(project=project, annotator=annotator, queue=queue, now=now, only=item_id):
        return None
    return Item.objects.get(pk=item_id)


def _lease(*, item: Item, annotator: Any, project: Project, now: datetime) -> None:
    """One live lease per annotator per project: taking an item lets go of any other they held."""
    Lease.objects.filter(annotator=annotator, item__project=project).delete()
    Lease.objects.create(item=item, annotator=annotator, expires_at=now + timedelta(seconds=project.lease_seconds))


def next_item_for(
    *, project: Project, annotator: Any, queue: Queue = "batch", now: datetime | None = None
) -> Item | None:
    """Lease the next item of `queue` to `annotator` and return it; None when nothing is left.

    Reload-safe: an annotator who holds a live lease in this queue gets the same item back. Batch
    queue: items of rounds in "labeling", oldest round and best rank first. Test queue: test-set
    items without a final label. Both skip items this annotator labelled or skipped, finalised items,
    items out of the pool (review, unlabelable) and items whose annotations + live leases already
    reach ``required_labels`` (1, or k distinct annotators for overlap items)."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")
    now = _now(now)
    with transaction.atomic():
        _lock_user(annotator)
        if queue == "test":
            _require_test_overlap(project)
        held = _held_item(project=project, annotator=annotator, queue=queue, now=now)
        if held is not None:
            return held
        for _ in range(_LOCK_ATTEMPTS):
            candidates = _open_item_ids(project=project, annotator=annotator, queue=queue, now=now)
            if not candidates:
                return None
            for item_id in candidates:
                # Recount after the lock: the candidate query's snapshot may predate a lease just committed.
                if _lock_item(item_id) and _room_left(item_id=item_id, annotator=annotator, now=now):
                    item = Item.objects.get(pk=item_id)
                    _lease(item=item, annotator=annotator, project=project, now=now)
                    return item
        return None


def _check_label(*, item: Item, label: Label) -> None:
    if label.project_id != item.project_id:
        raise UnknownLabel(f"unknown label {label.name!r}: it is not a label of this project")


def _check_may_label(*, item: Item, annotator: Any, now: datetime) -> Lease | None:
    """The annotator holds a live lease; or holds an expired one / labels a test item while the item
    still has room (nobody else took the place meanwhile)."""
    lease = Lease.objects.filter(item=item, annotator=annotator).first()
    if lease is not None and lease.expires_at > now:
        return lease
    if lease is None and not item.is_test:
        raise NotLeased("this item is not assigned to you; take the next item")
    if item.final_label_id is not None or not _room_left(item_id=item.pk, annotator=annotator, now=now):
        raise NotLeased("your time on this item ran out and it went to someone else; take the next item")
    return lease


def _round_of(item: Item) -> Round | None:
    row = (
        BatchItem.objects.filter(item=item, round__status=Round.Status.LABELING)
        .select_related("round")
        .order_by("-round__number")
        .first()
    )
    return row.round if row is not None else None


def _seconds(seconds_spent: float | None, lease: Lease | None, now: datetime) -> float | None:
    if seconds_spent is None and lease is not None:
        seconds_spent = (now - lease.created_at).total_seconds()
    if seconds_spent is None:
        return None
    return min(max(float(seconds_spent), 0.0), MAX_SECONDS_SPENT)


def _finalise(*, item: Item, now: datetime) -> None:
    """All `required_labels` annotations agree: that is the final label. They disagree: no final label
    (a disagreement for leads). A lead's adjudication is never overwritten."""
    if Adjudication.objects.filter(item=item).exists():
        return
    labels = list(Annotation.objects.filter(item=item).values_list("label_id", flat=True))
    final = labels[0] if len(labels) >= item.required_labels and len(set(labels)) == 1 else None
    if final != item.final_label_id:
        item.final_label_id = final
        item.finalized_at = now if final is not None else None
        item.save(update_fields=["final_label", "finalized_at"])


def _locked(item: Item) -> Item:
    return Item.objects.select_for_update().get(pk=item.pk)


def label_submit(
    *,
    item: Item,
    annotator: Any,
    label: Label,
    round: Round | None = None,
    seconds_spent: float | None = None,
    revise: bool = False,
    now: datetime | None = None,
) -> Annotation:
    """Store `annotator`'s label for `item` and release the lease. Idempotent: a repeat with the same
    label returns the stored row. A different label on a labelled item needs ``revise=True`` (undo),
    which updates the same row and counts a revision; otherwise `AlreadyLabelled`. Raises
    `UnknownLabel` (label of another project) and `NotLeased` (item not handed to this annotator);
    nothing is written when it raises."""
    now = _now(now)
    _check_label(item=item, label=label)
    with transaction.atomic():
        item = _locked(item)  # serialises the submissions of one item, so finalisation counts them all
        existing = Annotation.objects.filter(item=item, annotator=annotator).first()
        if existing is not None:
            return _resubmit(existing=existing, item=item, label=label, revise=revise, now=now)
        if revise:
            raise LabelingError("there is no label of yours on this item to revise")
        lease = _check_may_label(item=item, annotator=annotator, now=now)
        try:
            with transaction.atomic():
                annotation = Annotation.objects.create(
                    item=item,
                    annotator=annotator,
                    label=label,
                    round=round if round is not None else _round_of(item),
                    seconds_spent=_seconds(seconds_spent, lease, now),
                )
        except IntegrityError:  # the same submission raced in from another request: it is stored once
            return Annotation.objects.get(item=item, annotator=annotator)
        Lease.objects.filter(item=item, annotator=annotator).delete()
        _finalise(item=item, now=now)
        if annotation.round_id is not None:
            _after_label(annotation.round_id)
        return annotation


def _after_label(round_id: int) -> None:
    """Once the label commits, let the round start training when the project's auto-retrain share of
    its batch is labelled (a no-op when that setting is off)."""
    from annotate.services.rounds import maybe_auto_retrain

    transaction.on_commit(lambda: maybe_auto_retrain(round_id))


def _resubmit(*, existing: Annotation, item: Item, label: Label, revise: bool, now: datetime) -> Annotation:
    Lease.objects.filter(item=item, annotator=existing.annotator).delete()
    if existing.label_id == label.pk:
        return existing
    if not revise:
        raise AlreadyLabelled(f"you already labelled this item {existing.label.name!r}; press u to revise")
    existing.label = label
    existing.revisions += 1
    existing.save(update_fields=["label", "revisions", "updated_at"])
    _finalise(item=item, now=now)
    return existing


def skip_submit(*, item: Item, annotator: Any, reason: str = "") -> Skip:
    """Pass on an item: a Skip row (not a label; leads review skips), the lease is released and the
    item goes to other annotators. Idempotent: one Skip per (item, annotator); a repeat keeps the
    first reason unless it was empty."""
    reason = reason.strip()[: Skip._meta.get_field("reason").max_length]
    with transaction.atomic():
        if Annotation.objects.filter(item=item, annotator=annotator).exists():
            raise AlreadyLabelled("you already labelled this item; press u to revise instead of skipping")
        skip, created = Skip.objects.get_or_create(item=item, annotator=annotator, defaults={"reason": reason})
        if not created and reason and not skip.reason:
            skip.reason = reason
            skip.save(update_fields=["reason"])
        Lease.objects.filter(item=item, annotator=annotator).delete()
        return skip


def label_undo(*, annotator: Any, project: Project, queue: Queue | None = None) -> Annotation | None:
    """The annotator's last submitted label in `project` (optionally only in `queue`), to be shown
    again and revised with ``label_submit(..., revise=True)``. Writes nothing."""
    annotations = Annotation.objects.filter(annotator=annotator, item__project=project)
    if queue is not None:
        annotations = annotations.filter(item__is_test=(queue == "test"))
    return annotations.select_related("item", "label").order_by("-created_at", "-id").first()


__all__ = [
    "QUEUES",
    "AlreadyLabelled",
    "LabelingError",
    "NotLeased",
    "Queue",
    "UnknownLabel",
    "label_submit",
    "label_undo",
    "next_item_for",
    "skip_submit",
]
