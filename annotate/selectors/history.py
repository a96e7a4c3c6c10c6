"""Item history reads: an item's events, the events a pending undo would overwrite, and the last
action an annotator or lead can take back."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from annotate.models import ItemEvent, Project

K = ItemEvent.Kind
ANNOTATOR_ACTIONS = (K.LABEL, K.REVISION, K.SKIP)
LEAD_DECISIONS = (K.DECISION, K.RETURN, K.REVIEW)  # what a lead's undo takes back (decision_undo)


def later_events(*, event: ItemEvent) -> QuerySet[ItemEvent]:
    """Events on the item after `event` that still stand and that undoing `event` would overwrite:
    for a lead's decision anything but an undo; for a skip, the skipper's own actions and leads'
    decisions (other annotators' labels on a multi-label item leave the skip alone)."""
    later = ItemEvent.objects.filter(item_id=event.item_id, id__gt=event.id, undone_by__isnull=True).exclude(
        kind=K.UNDO
    )
    if event.kind == K.SKIP:
        later = later.filter(Q(actor_id=event.actor_id) | Q(kind__in=LEAD_DECISIONS))
    return later.select_related("actor").order_by("id")


def last_skip_or_label(*, project: Project, annotator: Any, is_test: bool | None = None) -> ItemEvent | None:
    """The annotator's newest label, revision or skip in the project that was not taken back."""
    events = ItemEvent.objects.filter(
        actor=annotator, item__project=project, kind__in=ANNOTATOR_ACTIONS, undone_by__isnull=True
    )
    if is_test is not None:
        events = events.filter(item__is_test=is_test)
    return events.order_by("-id").first()


def last_action_is_skip(*, project: Project, annotator: Any, is_test: bool | None = None) -> bool:
    """Whether `u` takes back a skip (else it reopens the last label)."""
    last = last_skip_or_label(project=project, annotator=annotator, is_test=is_test)
    return last is not None and last.kind == K.SKIP


def undoable_decision(*, item_id: int) -> ItemEvent | None:
    """The item's newest lead decision or return, when nothing stands after it (so undo applies)."""
    event = (
        ItemEvent.objects.filter(item_id=item_id, kind__in=LEAD_DECISIONS, undone_by__isnull=True)
        .select_related("actor", "label")
        .order_by("-id")
        .first()
    )
    if event is None or not event.before or later_events(event=event).exists():
        return None
    return event


def events_of(*, item_ids: list[int]) -> dict[int, list[ItemEvent]]:
    """item id → its events, oldest first, with actor and labels loaded."""
    by_item: dict[int, list[ItemEvent]] = {}
    rows = ItemEvent.objects.filter(item_id__in=item_ids).select_related("actor", "label", "previous_label", "undoes")
    for event in rows.order_by("at", "id"):
        by_item.setdefault(event.item_id, []).append(event)
    return by_item


def event_sentence(event: ItemEvent) -> str:
    """One line for the item page: who did what."""
    who = event.actor.username
    label = event.label.name if event.label else "unlabelable"
    if event.kind == K.LABEL:
        return f"{who} labelled it {label}"
    if event.kind == K.REVISION:
        before = f" (was {event.previous_label.name})" if event.previous_label else ""
        extra = f" — {event.note}" if event.note else ""
        return f"{who} revised it to {label}{before}{extra}"
    if event.kind == K.SKIP:
        return f"{who} skipped it" + (f": “{event.note}”" if event.note else "")
    if event.kind == K.DECISION:
        return f"{who} decided {label}" + (f" — {event.note}" if event.note else "")
    if event.kind == K.RETURN:
        return f"{who} returned it to the pool"
    if event.kind == K.REVIEW:
        return f"{who} sent it to review" + (f": “{event.note}”" if event.note else "")
    if event.kind == K.ASSIGN:
        return f"{who} {event.note}"
    undone = event.undoes.get_kind_display().lower() if event.undoes else "an event"
    return f"{who} undid the {undone} of {event.undoes.at:%Y-%m-%d %H:%M}" if event.undoes else f"{who} undid {undone}"


def event_record_dict(event: ItemEvent) -> dict[str, Any]:
    """An event as the labels export writes it."""
    return {
        "at": event.at.isoformat(),
        "kind": event.kind,
        "by": event.actor.username,
        "label": event.label.name if event.label else None,
        "previous_label": event.previous_label.name if event.previous_label else None,
        "note": event.note,
        "undoes": event.undoes_id,
        "id": event.pk,
    }
