"""The item browser's bulk actions: send to review, assign to an annotator, relabel. Each is drafted
first (`bulk_draft`: the items it will change, and how many of the selection it leaves alone and
why, which the confirmation shows), then applied (`bulk_apply`: one history event per item, holding
the state it replaced) and can be undone (`bulk_undo`: every item exactly as it was, all or none).
Leads and ML staff only; an annotator is refused (`BulkRefused`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from annotate.models import Annotation, BulkAction, Item, ItemEvent, Label, Lease, Project, Skip
from annotate.roles import ANNOTATOR, LEAD, ML, has_project_role
from annotate.services.history import (
    UndoRefused,
    decision_restore,
    decision_snapshot,
    event_record,
    refuse_unless_undoable,
)
from annotate.services.review import ReviewError, adjudicate

K = BulkAction.Kind
# An assignment holds the item for its annotator until they label or skip it or a lead undoes it;
# a year stands for "does not run out" in a column that must hold a time.
ASSIGNED_FOR = timedelta(days=365)


class BulkRefused(ValueError):
    """The action is not allowed or no longer applies; the message is shown as is."""


def _check_actor(project: Project, actor: Any) -> None:
    if not has_project_role(actor, project.pk, LEAD, ML):
        raise BulkRefused("only leads and ML staff act on many items at once")


def _why_left_out(*, kind: str, item: Item, mine: set[int], label: Label | None, own_ok: bool) -> str:
    """Why the action leaves `item` as it is ("" when it applies). `mine`: items the assignee labelled
    or skipped (assign) or the actor labelled (relabel)."""
    if kind == K.RELABEL:
        if item.final_label_id is not None and label is not None and item.final_label_id == label.pk:
            return "have this label already"
        return "" if own_ok or item.pk not in mine else "were labelled by you (another lead decides them)"
    if item.final_label_id is not None:
        return "have a final label"
    if item.state == Item.State.UNLABELABLE:
        return "are unlabelable"
    if kind == K.REVIEW:
        return "are in review already" if item.state == Item.State.REVIEW else ""
    if item.state == Item.State.REVIEW:
        return "are in review"
    return "were labelled or skipped by that annotator" if item.pk in mine else ""


def _sort_out(action: BulkAction, items: Iterable[Item]) -> tuple[list[int], Counter[str]]:
    items = list(items)
    ids = [item.pk for item in items]
    if action.kind == K.ASSIGN:
        who = action.assignee_id
        mine = set(Annotation.objects.filter(item_id__in=ids, annotator_id=who).values_list("item_id", flat=True))
        mine |= set(Skip.objects.filter(item_id__in=ids, annotator_id=who).values_list("item_id", flat=True))
    elif action.kind == K.RELABEL:
        who = action.actor_id
        mine = set(Annotation.objects.filter(item_id__in=ids, annotator_id=who).values_list("item_id", flat=True))
    else:
        mine = set()
    own_ok = action.project.lead_adjudicates_own
    applies, left_out = [], Counter[str]()
    for item in items:
        why = _why_left_out(kind=action.kind, item=item, mine=mine, label=action.label, own_ok=own_ok)
        if why:
            left_out[why] += 1
        else:
            applies.append(item.pk)
    return applies, left_out


@transaction.atomic
def bulk_draft(
    *,
    project: Project,
    actor: Any,
    kind: str,
    item_ids: Iterable[int],
    label: Label | None = None,
    assignee: Any = None,
    note: str = "",
) -> BulkAction:
    """A drafted action on the project's items among `item_ids`: which it applies to and how many it
    leaves alone (``left_out``). Nothing changes until `bulk_apply`."""
    _check_actor(project, actor)
    if kind not in K.values:
        raise BulkRefused(f"unknown action {kind!r}")
    if kind == K.RELABEL and (label is None or label.project_id != project.pk):
        raise BulkRefused("choose one of this project's labels to relabel to")
    if kind == K.ASSIGN and (assignee is None or not has_project_role(assignee, project.pk, ANNOTATOR, LEAD)):
        raise BulkRefused("choose an annotator of this project to assign to")
    action = BulkAction(
        project=project, actor=actor, kind=kind, label=label, assignee=assignee, note=note.strip()[:500]
    )
    items = Item.objects.filter(project=project, pk__in=list(item_ids)).order_by("id")
    applies, left_out = _sort_out(action, items)
    if not applies:
        raise BulkRefused(_nothing_to_do(left_out))
    action.item_ids, action.left_out = applies, dict(left_out)
    action.save()
    return action


def _nothing_to_do(left_out: Counter[str]) -> str:
    if not left_out:
        return "no items selected"
    reasons = "; ".join(f"{n} {why}" for why, n in left_out.items())
    return f"none of the selected items can take this action ({reasons})"


def _lock(action_id: int, project: Project, status: str) -> BulkAction:
    action = BulkAction.objects.select_for_update().filter(pk=action_id, project=project).first()
    if action is None:
        raise BulkRefused("no such bulk action in this project")
    if action.status != status:
        raise BulkRefused(f"this action is {action.status} already")
    return action


def _leases_of(item: Item) -> list[dict[str, Any]]:
    """The item's leases, as an assignment's undo puts them back."""
    leases = Lease.objects.filter(item=item).order_by("id")
    return [
        {
            "annotator": lease.annotator_id,
            "created_at": lease.created_at.isoformat(),
            "expires_at": lease.expires_at.isoformat(),
            "assigned": lease.assigned,
        }
        for lease in leases
    ]


def _apply_one(action: BulkAction, item: Item, now: Any) -> ItemEvent:
    actor = action.actor
    if action.kind == K.REVIEW:
        before = decision_snapshot(item)
        reason = action.note or f"sent to review by {actor.username}"
        item.state, item.review_reason = Item.State.REVIEW, reason[:200]
        item.save(update_fields=["state", "review_reason"])
        return event_record(
            item_id=item.pk, kind=ItemEvent.Kind.REVIEW, actor=actor, note=reason, before=before, now=now
        )
    if action.kind == K.ASSIGN:
        before = {"leases": _leases_of(item)}
        Lease.objects.filter(item=item).delete()  # whoever held it lets go: it is kept for the assignee
        assignee = action.assignee
        assert assignee is not None  # bulk_draft requires one for an assignment
        Lease.objects.create(
            item=item, annotator=assignee, created_at=now, expires_at=now + ASSIGNED_FOR, assigned=True
        )
        note = f"assigned it to {assignee.username}"
        return event_record(item_id=item.pk, kind=ItemEvent.Kind.ASSIGN, actor=actor, note=note, before=before, now=now)
    adjudicate(item=item, label=action.label, lead=actor, note=action.note or "bulk relabel")
    return ItemEvent.objects.filter(item=item, kind=ItemEvent.Kind.DECISION).latest("id")


@transaction.atomic
def bulk_apply(*, project: Project, action_id: int, actor: Any) -> BulkAction:
    """Apply a drafted action (once: the status moves draft → applied under a row lock). An item that
    changed since the draft so that the action no longer fits is left alone and counted."""
    _check_actor(project, actor)
    action = _lock(action_id, project, BulkAction.Status.DRAFT)
    if action.actor_id != actor.pk:
        raise BulkRefused("this action was drafted by someone else")
    items = list(Item.objects.select_for_update().filter(pk__in=action.item_ids).order_by("id"))
    applies, changed = _sort_out(action, items)
    still = set(applies)
    now = timezone.now()
    events = []
    for item in items:
        if item.pk in still:
            try:
                events.append(_apply_one(action, item, now).pk)
            except ReviewError:
                changed["changed since the confirmation"] += 1
    action.left_out = dict(Counter(action.left_out) + changed)
    action.item_ids = [e.item_id for e in ItemEvent.objects.filter(pk__in=events).order_by("item_id")]
    action.event_ids, action.status, action.applied_at = events, BulkAction.Status.APPLIED, now
    action.save(update_fields=["left_out", "item_ids", "event_ids", "status", "applied_at"])
    return action


def _undo_one(event: ItemEvent, item: Item) -> None:
    before = event.before
    if event.kind == ItemEvent.Kind.ASSIGN:
        Lease.objects.filter(item=item).delete()
        Lease.objects.bulk_create(
            Lease(
                item=item,
                annotator_id=le["annotator"],
                created_at=datetime.fromisoformat(le["created_at"]),
                expires_at=datetime.fromisoformat(le["expires_at"]),
                assigned=le["assigned"],
            )
            for le in before["leases"]
        )
    else:
        decision_restore(item, before)


@transaction.atomic
def bulk_undo(*, project: Project, action_id: int, actor: Any) -> BulkAction:
    """Take an applied action back: every item exactly as it was before it (state, review reason,
    leases, final label, adjudication and note, resolved skips), each with an undo event. All or
    none: refused (`UndoRefused`) when any of its items changed since."""
    _check_actor(project, actor)
    action = _lock(action_id, project, BulkAction.Status.APPLIED)
    items = {i.pk: i for i in Item.objects.select_for_update().filter(pk__in=action.item_ids).order_by("id")}
    events = list(ItemEvent.objects.filter(pk__in=action.event_ids).order_by("item_id"))
    refused = []
    for event in events:
        try:
            refuse_unless_undoable(event)
        except UndoRefused as exc:
            refused.append(str(exc))
    if refused:
        raise UndoRefused(
            f"{len(refused)} of the {len(events)} items changed since, so undo no longer applies: {refused[0]}"
        )
    now = timezone.now()
    for event in events:
        _undo_one(event, items[event.item_id])
        event_record(
            item_id=event.item_id,
            kind=ItemEvent.Kind.UNDO,
            actor=actor,
            undoes=event,
            note=f"undid bulk {action.kind}",
            now=now,
        )
    action.status, action.undone_at = BulkAction.Status.UNDONE, now
    action.save(update_fields=["status", "undone_at"])
    return action


__all__ = ["ASSIGNED_FOR", "BulkRefused", "UndoRefused", "bulk_apply", "bulk_draft", "bulk_undo"]
