"""Item history writes: record what happened (append-only) and take back a lead's decision or an
annotator's skip. Undo restores the state the event replaced and is itself an event; it is refused
when something happened to the item since (a label, a revision, another decision) that the undo
would silently overwrite."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from annotate.models import Adjudication, Annotation, Item, ItemEvent, Label, Lease, Project, Skip
from annotate.selectors.history import last_skip_or_label, later_events
from annotate.selectors.progress import labeling_rounds_of_item
from annotate.services.batch_rows import batch_rows_done

K = ItemEvent.Kind


class UndoRefused(ValueError):
    """The undo no longer applies; the message says why and is shown as is."""


def event_record(
    *,
    item_id: int,
    kind: str,
    actor: Any,
    label: Label | int | None = None,
    previous_label: Label | int | None = None,
    note: str = "",
    before: dict[str, Any] | None = None,
    undoes: ItemEvent | None = None,
    now: datetime | None = None,
) -> ItemEvent:
    """Append one event; the caller's transaction holds the item lock."""
    return ItemEvent.objects.create(
        item_id=item_id,
        kind=kind,
        actor=actor,
        at=now or timezone.now(),
        label_id=label.pk if isinstance(label, Label) else label,
        previous_label_id=previous_label.pk if isinstance(previous_label, Label) else previous_label,
        note=note,
        before=before or {},
        undoes=undoes,
    )


def decision_snapshot(item: Item) -> dict[str, Any]:
    """What a lead's decision or return replaces, enough to restore it: the item's outcome columns,
    the standing adjudication and the open skips the decision will resolve."""
    adjudication = Adjudication.objects.filter(item=item).first()
    return {
        "final_label": item.final_label_id,
        "state": item.state,
        "review_reason": item.review_reason,
        "finalized_at": item.finalized_at.isoformat() if item.finalized_at else None,
        "adjudication": None
        if adjudication is None
        else {
            "label": adjudication.label_id,
            "decided_by": adjudication.decided_by_id,
            "decided_at": adjudication.decided_at.isoformat(),
            "note": adjudication.note,
        },
        "open_skips": list(Skip.objects.filter(item=item, resolved=False).values_list("id", flat=True)),
    }


def refuse_unless_undoable(event: ItemEvent) -> None:
    """Raise `UndoRefused` when `event` was undone already or something happened to its item since."""
    if ItemEvent.objects.filter(undoes=event).exists():
        raise UndoRefused("this was undone already")
    since = later_events(event=event).first()
    if since is not None:
        raise UndoRefused(
            f"the item changed since ({since.get_kind_display().lower()} by {since.actor} at "
            f"{timezone.localtime(since.at):%Y-%m-%d %H:%M}): undo no longer applies"
        )


def decision_restore(item: Item, before: dict[str, Any]) -> None:
    """Put back what a lead's decision or return replaced (its event's ``before``)."""
    finalized = before["finalized_at"]
    item.final_label_id = before["final_label"]
    item.state = before["state"]
    item.review_reason = before["review_reason"]
    item.finalized_at = parse_datetime(finalized) if finalized else None
    item.save(update_fields=["final_label", "state", "review_reason", "finalized_at"])
    adjudication = before["adjudication"]
    if adjudication is None:
        Adjudication.objects.filter(item=item).delete()
    else:
        fields = {"label_id": adjudication["label"], "decided_by_id": adjudication["decided_by"]}
        Adjudication.objects.update_or_create(item=item, defaults={**fields, "note": adjudication["note"]})
        Adjudication.objects.filter(item=item).update(decided_at=parse_datetime(adjudication["decided_at"]))
    Skip.objects.filter(pk__in=before["open_skips"]).update(resolved=False)
    batch_rows_done(item_id=item.pk, done=item.final_label_id is not None or item.state == Item.State.UNLABELABLE)


@transaction.atomic
def decision_undo(*, project: Project, event_id: int, lead: Any) -> ItemEvent:
    """Take back a lead's decision, return to the pool or sending to review: the item's final label, state, adjudication
    (with its note) and the skips it resolved are as they were before it. Raises `UndoRefused` when
    it no longer applies (undone already, or the item was labelled, revised or decided since)."""
    event = ItemEvent.objects.filter(pk=event_id, item__project=project).first()
    if event is None or event.kind not in (K.DECISION, K.RETURN, K.REVIEW):
        raise UndoRefused("no such lead decision in this project")
    item = Item.objects.select_for_update().get(pk=event.item_id)
    refuse_unless_undoable(event)
    if not event.before:
        raise UndoRefused("this decision was recorded before history was kept: decide the item again instead")
    decision_restore(item, event.before)
    undo = event_record(item_id=item.pk, kind=K.UNDO, actor=lead, undoes=event, note=f"undid {event.kind}")
    _after_decision(item.pk)
    return undo


def _after_decision(item_id: int) -> None:
    from annotate.services.rounds import maybe_auto_retrain

    for round_id in labeling_rounds_of_item(item_id=item_id):
        transaction.on_commit(functools.partial(maybe_auto_retrain, round_id))


def _has_room_for(item: Item, annotator: Any, now: datetime) -> bool:
    taken = Annotation.objects.filter(item=item).count()
    taken += Lease.objects.filter(item=item, expires_at__gt=now).exclude(annotator=annotator).count()
    return taken < item.required_labels


@transaction.atomic
def skip_undo(*, project: Project, annotator: Any, is_test: bool | None = None) -> Item:
    """Take back the annotator's last skip in `project` (optionally only among test or batch items):
    the skip is gone from the leads' queue and the item is leased to them again to label. Raises
    `UndoRefused` when their last action was not a skip, a lead already decided the item, or another
    annotator filled it meanwhile."""
    event = last_skip_or_label(project=project, annotator=annotator, is_test=is_test)
    if event is None or event.kind != K.SKIP:
        raise UndoRefused("your last action was not a skip")
    item = Item.objects.select_for_update().get(pk=event.item_id)
    skip = Skip.objects.filter(item=item, annotator=annotator).first()
    if skip is None or skip.resolved or item.final_label_id is not None or item.state != Item.State.POOL:
        raise UndoRefused("a lead has already decided this item, so the skip cannot be taken back")
    refuse_unless_undoable(event)
    now = timezone.now()
    if not _has_room_for(item, annotator, now):
        raise UndoRefused("another annotator took this item meanwhile, so the skip cannot be taken back")
    skip.delete()  # the skip is kept in the history; the row is the leads' queue
    Lease.objects.filter(annotator=annotator, item__project=project, assigned=False).exclude(item=item).delete()
    Lease.objects.update_or_create(
        item=item,
        annotator=annotator,
        defaults={"created_at": now, "expires_at": now + timedelta(seconds=project.lease_seconds)},
    )
    event_record(item_id=item.pk, kind=K.UNDO, actor=annotator, undoes=event, note="took back the skip", now=now)
    return item


__all__ = [
    "UndoRefused",
    "decision_restore",
    "decision_snapshot",
    "decision_undo",
    "event_record",
    "refuse_unless_undoable",
    "skip_undo",
]
