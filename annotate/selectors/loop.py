"""Reads for the round services: the current adapter set, the eligible pool, labeled items, sources."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from annotate.models import (
    AdapterVersion,
    Annotation,
    BatchItem,
    GoldItem,
    Item,
    Label,
    Lease,
    Project,
    Round,
    StopSetItem,
)
from scoring.engines import AdapterRef, adapter_set_hash


def prod_adapters(*, project: Project, before_number: int | None = None) -> list[AdapterVersion]:
    """The production ensemble: the prod adapters of the latest finished round (before a number)."""
    rounds = Round.objects.filter(project=project, status=Round.Status.DONE)
    if before_number is not None:
        rounds = rounds.filter(number__lt=before_number)
    last = rounds.order_by("-number").first()
    if last is None:
        return []
    return list(AdapterVersion.objects.filter(round=last, arm=AdapterVersion.Arm.PROD).order_by("k"))


def adapter_refs(adapters: list[AdapterVersion]) -> list[AdapterRef]:
    return [AdapterRef(name=a.lora_name, int_id=a.pk, path=a.path) for a in adapters]


def prod_set_hash(*, project: Project, before_number: int | None = None) -> str:
    return adapter_set_hash(adapter_refs(prod_adapters(project=project, before_number=before_number)))


def label_names(*, project: Project) -> list[str]:
    return list(Label.objects.filter(project=project).order_by("order", "id").values_list("name", flat=True))


def label_index(*, project: Project) -> dict[int, int]:
    ids = Label.objects.filter(project=project).order_by("order", "id").values_list("id", flat=True)
    return {label_id: i for i, label_id in enumerate(ids)}


def unlabelled_pool(*, project: Project) -> QuerySet[Item]:
    """Pool items still without a final label: not test, in the pool (not review / unlabelable), not
    in the gold set. Nothing here: the pool is fully labelled."""
    return Item.objects.filter(project=project, is_test=False, state=Item.State.POOL, final_label__isnull=True).exclude(
        Exists(GoldItem.objects.filter(item=OuterRef("pk")))
    )


def eligible_pool(*, project: Project, now: datetime | None = None) -> QuerySet[Item]:
    """Items selection may pick: the unlabelled pool less items with an annotation already (an open
    disagreement is the leads') or leased to anyone right now."""
    now = now or timezone.now()
    live_lease = Lease.objects.filter(item=OuterRef("pk"), expires_at__gt=now)
    annotated = Annotation.objects.filter(item=OuterRef("pk"))
    return unlabelled_pool(project=project).exclude(Exists(live_lease)).exclude(Exists(annotated))


def eligible_ids(*, project: Project, now: datetime | None = None) -> np.ndarray:
    return np.array(sorted(eligible_pool(project=project, now=now).values_list("id", flat=True)), dtype=np.int64)


@dataclass(frozen=True)
class Labeled:
    item_ids: list[int]
    texts: list[str]
    hashes: list[str]
    label_indices: list[int]
    sources: list[str]  # first batch source of each item: cold | active | random | "" (not from a batch)


def labeled_items(*, project: Project, item_ids: list[int] | None = None) -> Labeled:
    """Non-test items with a final label (by id), with their batch source."""
    index = label_index(project=project)
    items = Item.objects.filter(project=project, is_test=False, final_label__isnull=False).exclude(
        Exists(GoldItem.objects.filter(item=OuterRef("pk")))  # the gold set measures; it never trains
    )
    if item_ids is not None:
        items = items.filter(id__in=item_ids)
    rows = list(items.order_by("id").values_list("id", "text", "text_hash", "final_label_id"))
    sources: dict[int, str] = {}
    batch_rows = BatchItem.objects.filter(round__project=project, item__is_test=False, item__final_label__isnull=False)
    for item_id, source in batch_rows.order_by("-round__number").values_list("item_id", "source"):
        sources[item_id] = source  # earliest round wins (iterated newest first)
    return Labeled(
        item_ids=[r[0] for r in rows],
        texts=[r[1] for r in rows],
        hashes=[r[2] for r in rows],
        label_indices=[index[r[3]] for r in rows],
        sources=[sources.get(r[0], "") for r in rows],
    )


def test_items(*, project: Project) -> tuple[list[int], list[str], np.ndarray]:
    """The fixed test set's labelled items: ids, texts, label indices."""
    index = label_index(project=project)
    rows = list(
        Item.objects.filter(project=project, is_test=True, final_label__isnull=False)
        .order_by("id")
        .values_list("id", "text", "final_label_id")
    )
    return [r[0] for r in rows], [r[1] for r in rows], np.array([index[r[2]] for r in rows], dtype=np.int64)


def stop_set_items(*, project: Project) -> tuple[list[int], list[str]]:
    """The fixed stop set: ids (ascending) and texts, labelled or not."""
    rows = list(StopSetItem.objects.filter(project=project).order_by("item_id").values_list("item_id", "item__text"))
    return [r[0] for r in rows], [r[1] for r in rows]


def labels_collected(*, round: Round) -> int:
    """Batch items of the round with a final label."""
    return BatchItem.objects.filter(round=round, item__final_label__isnull=False).count()


def batch_size(*, round: Round) -> int:
    return BatchItem.objects.filter(round=round).count()


def human_pairs_on_test(*, project: Project) -> tuple[list[int], list[int], list[int], list[int]]:
    """(item ids, first annotator's label index) for test items with a human label, and the first
    two annotators' label indices where two labelled the same test item (for human-human kappa)."""
    index = label_index(project=project)
    by_item: dict[int, list[int]] = {}
    rows = Annotation.objects.filter(item__project=project, item__is_test=True).order_by("item_id", "created_at", "id")
    for item_id, label_id in rows.values_list("item_id", "label_id"):
        by_item.setdefault(item_id, []).append(index[label_id])
    ids = sorted(by_item)
    firsts = [by_item[i][0] for i in ids]
    pairs = [by_item[i][:2] for i in ids if len(by_item[i]) >= 2]
    return ids, firsts, [p[0] for p in pairs], [p[1] for p in pairs]
