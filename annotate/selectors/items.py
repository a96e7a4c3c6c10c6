"""The item browser: search and filter a project's items, and one item's whole history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet

from annotate.models import Annotation, BatchItem, Item, ItemEvent, Prediction, Project, Skip
from annotate.selectors.history import event_sentence, events_of, undoable_decision
from annotate.selectors.review import disagreements

PAGE_SIZE = 50
CONFIDENCE_BANDS = {"low": (0.0, 0.5), "mid": (0.5, 0.8), "high": (0.8, 1.01)}


def _latest_prediction(project: Project) -> dict[int, float]:
    """item id → top probability of its newest prediction."""
    top: dict[int, float] = {}
    rows = Prediction.objects.filter(item__project=project).order_by("item_id", "created_at", "id")
    for item_id, probs in rows.values_list("item_id", "probs").iterator(chunk_size=5000):
        if isinstance(probs, list) and probs:
            top[item_id] = float(max(probs))  # later rows overwrite: the newest wins
    return top


def _by_state(items: QuerySet[Item], state: str, project: Project) -> QuerySet[Item]:
    open_skip = Skip.objects.filter(item=OuterRef("pk"), resolved=False)
    if state == "open":
        return items.filter(final_label__isnull=True, state=Item.State.POOL, is_test=False)
    if state == "labelled":
        return items.filter(final_label__isnull=False)
    if state == "disagreement":  # a subquery: counting over `items` would count only the filtered annotator
        return items.filter(id__in=disagreements(project=project).values("id"))
    if state == "skipped":
        return items.filter(Exists(open_skip), final_label__isnull=True)
    if state in ("review", "unlabelable"):
        return items.filter(state=state)
    if state == "test":
        return items.filter(is_test=True)
    return items


def browse_items(*, project: Project, filters: dict[str, Any]) -> QuerySet[Item]:
    """The project's items matching the browser's filters (see forms_data.ItemFilterForm), by id."""
    items = Item.objects.filter(project=project)
    q = (filters.get("q") or "").strip()
    if q:
        items = items.filter(Q(text__icontains=q) | Q(external_id=q))
    label = filters.get("label") or ""
    if label == "none":
        items = items.filter(final_label__isnull=True)
    elif label:
        items = items.filter(final_label_id=int(label))
    if filters.get("annotator"):
        items = items.filter(annotations__annotator_id=int(filters["annotator"]))
    if filters.get("source"):
        items = items.filter(batch_rows__source=filters["source"])
    if filters.get("round"):
        items = items.filter(batch_rows__round__number=filters["round"])
    items = _by_state(items, filters.get("state") or "", project)
    confidence = filters.get("confidence") or ""
    if confidence:
        top = _latest_prediction(project)
        if confidence == "none":
            items = items.exclude(id__in=list(top))
        else:
            low, high = CONFIDENCE_BANDS[confidence]
            items = items.filter(id__in=[i for i, p in top.items() if low <= p < high])
    return items.distinct().order_by("id")


@dataclass(frozen=True)
class ItemRow:
    item: Item
    labels: str  # "alice: sports, bob: politics"
    confidence: float | None


def browse_page(*, project: Project, filters: dict[str, Any], page: int) -> tuple[list[ItemRow], int]:
    """One page of rows and the total count."""
    items = browse_items(project=project, filters=filters)
    total = items.count()
    start = (max(page, 1) - 1) * PAGE_SIZE
    chunk = list(
        items.select_related("final_label").prefetch_related(
            Prefetch("annotations", queryset=Annotation.objects.select_related("annotator", "label").order_by("id"))
        )[start : start + PAGE_SIZE]
    )
    top: dict[int, float] = {}
    for item_id, probs in (
        Prediction.objects.filter(item__in=chunk)
        .order_by("item_id", "created_at", "id")
        .values_list("item_id", "probs")
    ):
        if isinstance(probs, list) and probs:
            top[item_id] = float(max(probs))
    rows = [
        ItemRow(
            item,
            ", ".join(f"{a.annotator.username}: {a.label.name}" for a in item.annotations.all()),
            top.get(item.id),
        )
        for item in chunk
    ]
    return rows, total


@dataclass(frozen=True)
class HistoryEvent:
    at: Any
    kind: str  # label | revision | skip | decision | return | undo | prediction | batch
    text: str
    undo_id: int | None = None  # a lead's decision that can still be undone: its event id


def item_history(*, project: Project, item_id: int) -> tuple[Item, list[HistoryEvent]]:
    """The item and what happened to it, oldest first: the batches it was in, every label, revision,
    skip, lead decision (with its note), return and undo from the append-only history, and the
    predictions per round. Raises Item.DoesNotExist."""
    item = Item.objects.select_related("final_label", "gold_label").get(project=project, pk=item_id)
    events: list[HistoryEvent] = []
    for row in BatchItem.objects.filter(item=item).select_related("round").order_by("round__number"):
        events.append(
            HistoryEvent(
                row.round.created_at, "batch", f"selected into round {row.round.number}'s batch ({row.source})"
            )
        )
    undoable = undoable_decision(item_id=item.pk)
    rounds = dict(
        Annotation.objects.filter(item=item, round__isnull=False).values_list("annotator_id", "round__number")
    )
    skips = dict(Skip.objects.filter(item=item).values_list("annotator_id", "resolved"))
    for e in events_of(item_ids=[item.pk]).get(item.pk, []):
        text = event_sentence(e)
        if e.kind == ItemEvent.Kind.LABEL and e.actor_id in rounds:
            text += f" in round {rounds[e.actor_id]}"
        elif e.kind == ItemEvent.Kind.SKIP and e.actor_id in skips and not hasattr(e, "undone_by"):
            text += " (resolved)" if skips[e.actor_id] else " (waiting for a lead)"
        undo_id = e.pk if undoable is not None and undoable.pk == e.pk else None
        events.append(HistoryEvent(e.at, e.kind, text, undo_id))
    for p in Prediction.objects.filter(item=item).select_related("label", "round").order_by("created_at"):
        where = f"round {p.round.number}" if p.round else "a scoring run"
        top = max(p.probs) if isinstance(p.probs, list) and p.probs else 0.0
        events.append(
            HistoryEvent(p.created_at, "prediction", f"model ({where}) predicted {p.label.name} at {100 * top:.0f} %")
        )
    events.sort(key=lambda e: e.at)
    return item, events


def item_review_state(item: Item) -> str:
    if item.is_test:
        return "test set"
    if item.state != Item.State.POOL:
        return str(item.state)
    return "labelled" if item.final_label_id is not None else "open"
