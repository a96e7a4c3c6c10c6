"""The item browser: search and filter a project's items, and one item's whole history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.template.defaultfilters import pluralize

from annotate.models import (
    Annotation,
    BatchItem,
    BulkAction,
    Item,
    ItemEvent,
    Prediction,
    Project,
    SavedFilter,
    Skip,
)
from annotate.selectors.history import event_sentence, events_of, undoable_decision
from annotate.selectors.predictions import ModelView, newest_predictions
from annotate.selectors.review import disagreements

PAGE_SIZE = 50
CONFIDENCE_BANDS = {"low": (0.0, 0.5), "mid": (0.5, 0.8), "high": (0.8, 1.01)}


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
        newest = newest_predictions(item_ids=Item.objects.filter(project=project).values("id"))
        top = {item_id: view.confidence for item_id, view in newest.items()}
        if confidence == "none":
            items = items.exclude(id__in=list(top))
        else:
            low, high = CONFIDENCE_BANDS[confidence]
            items = items.filter(id__in=[i for i, p in top.items() if low <= p < high])
    return items.distinct().order_by("id")


# The browser's sort orders (forms_data.ItemFilterForm.sort): key → its name in the form, short
# enough for a phone's select.
SORTS = {
    "": "Import order",
    "confidence": "Confidence, lowest first",
    "-confidence": "Confidence, highest first",
    "uncertainty": "Uncertainty, highest first",
    "recent": "Last label or decision, newest first",
    "disagreement": "Disagreement, most first",
}


def ordered_ids(*, project: Project, filters: dict[str, Any]) -> list[int] | QuerySet[Item, int]:
    """The ids of the matching items in the browser's sort order (ties, and items the key does not
    reach, such as items without a prediction, last and by id): a list where Python sorts them (the
    model's numbers live in JSON), else a query the page slices."""
    items = browse_items(project=project, filters=filters)
    sort = filters.get("sort") or ""
    if sort in ("confidence", "-confidence", "uncertainty"):
        ids = list(items.values_list("id", flat=True))
        model = newest_predictions(item_ids=items.values("id"))
        sign = -1.0 if sort == "-confidence" else 1.0

        def key(item_id: int) -> tuple[bool, float, int]:
            view = model.get(item_id)
            if view is None:
                return (True, 0.0, item_id)
            return (False, -view.uncertainty if sort == "uncertainty" else sign * view.confidence, item_id)

        return sorted(ids, key=key)
    ranked = Item.objects.filter(pk__in=items.values("id"))
    if sort == "recent":
        last = ItemEvent.objects.filter(item=OuterRef("pk")).order_by("-at").values("at")[:1]
        ranked = ranked.annotate(last_at=Subquery(last)).order_by(F("last_at").desc(nulls_last=True), "id")
    elif sort == "disagreement":
        by_item = Annotation.objects.filter(item=OuterRef("pk")).values("item")
        labels = by_item.annotate(n=Count("label", distinct=True)).values("n")
        given = by_item.annotate(n=Count("id")).values("n")
        ranked = ranked.annotate(n_labels=Subquery(labels), n_given=Subquery(given)).order_by(
            F("n_labels").desc(nulls_last=True), F("n_given").desc(nulls_last=True), "id"
        )
    else:
        ranked = ranked.order_by("id")
    return ranked.values_list("id", flat=True)


@dataclass(frozen=True)
class ItemRow:
    item: Item
    labels: str  # "alice: sports, bob: politics"
    model: ModelView | None


def browse_page(*, project: Project, filters: dict[str, Any], page: int) -> tuple[list[ItemRow], int]:
    """One page of rows, in the browser's sort order, and the total count."""
    ids = ordered_ids(project=project, filters=filters)
    total = len(ids) if isinstance(ids, list) else ids.count()
    start = (max(page, 1) - 1) * PAGE_SIZE
    page_ids = list(ids[start : start + PAGE_SIZE])
    found = (
        Item.objects.filter(pk__in=page_ids)
        .select_related("final_label")
        .prefetch_related(
            Prefetch("annotations", queryset=Annotation.objects.select_related("annotator", "label").order_by("id"))
        )
    )
    by_id = {item.pk: item for item in found}
    model = newest_predictions(item_ids=page_ids)
    rows = [
        ItemRow(
            by_id[i],
            ", ".join(f"{a.annotator.username}: {a.label.name}" for a in by_id[i].annotations.all()),
            model.get(i),
        )
        for i in page_ids
        if i in by_id
    ]
    return rows, total


def last_bulk_action(*, project: Project, user: Any) -> BulkAction | None:
    """The user's newest applied or undone bulk action in the project, for the browser's Undo."""
    return (
        BulkAction.objects.filter(project=project, actor=user, status__in=["applied", "undone"])
        .select_related("label", "assignee")
        .order_by("-applied_at", "-id")
        .first()
    )


def bulk_sentence(action: BulkAction) -> str:
    """“relabelled 37 items to sports (3 left alone: have this label already)”."""
    n = len(action.item_ids)
    what = {
        "review": f"sent {n} item{pluralize(n)} to review",
        "assign": f"assigned {n} item{pluralize(n)} to {action.assignee.username if action.assignee else '?'}",
        "relabel": f"relabelled {n} item{pluralize(n)} to {action.label.name if action.label else '?'}",
    }[action.kind]
    if action.left_out:
        what += " (" + "; ".join(f"{k} left alone: {why}" for why, k in action.left_out.items()) + ")"
    return what


def saved_filters(*, project: Project, user: Any) -> QuerySet[SavedFilter]:
    return SavedFilter.objects.filter(project=project, user=user)


def project_annotators(*, project: Project) -> list[Any]:
    """Users who may be assigned items: the project's annotators and leads (members where it has
    members, else everyone with the role)."""
    from django.contrib.auth import get_user_model

    from annotate.roles import ANNOTATOR, LEAD

    users = get_user_model().objects.filter(is_active=True)
    if project.memberships.exists():
        users = users.filter(memberships__project=project, memberships__role__in=[ANNOTATOR, LEAD])
    else:
        users = users.filter(groups__name__in=[ANNOTATOR, LEAD])
    return list(users.distinct().order_by("username"))


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


def test_items_among(*, project: Project, item_ids: list[int]) -> int:
    """How many of ``item_ids`` are in the project's fixed test set (a bulk relabel's confirmation warns:
    the test set is what every round's accuracy is measured against)."""
    return Item.objects.filter(project=project, pk__in=item_ids, is_test=True).count()
