"""The label export a training script reads: one row per item with its text, final label, where it
came from, who labelled it and how much they agreed, plus the item's metadata as columns.

Rows go through ``annotate.services.exports.render`` (spreadsheet-safe CSV, raw CSV or JSONL) or
``render_parquet``, so every cell gets the same treatment as the other exports. Default: items with a
final label only (test items included, marked by ``split``); the export page picks the columns and
filters, and leaves the test set out unless it is ticked.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from annotate.models import Annotation, BatchItem, Item, Project
from annotate.selectors.history import event_record_dict, events_of
from annotate.services.exports import render, render_parquet

DATASET_COLUMNS: dict[str, str] = {
    "id": "the item's id (from the import)",
    "text": "the text",
    "label": "final label (agreed by annotators or decided by a lead)",
    "split": "train (pool) or test (the fixed random test set)",
    "source": "how it was picked: active, random, cold (cold start) or empty (never in a batch)",
    "round": "the round whose batch it was in first",
    "annotators": "who labelled it, ';'-separated",
    "annotator_labels": "each annotator's label, 'name=label;...'",
    "n_labels": "how many annotators labelled it",
    "agreement": "share of annotators who gave the final label (1.0: all agreed)",
    "decided_by": "the lead who decided it (disagreement, skip or review), if any",
    "gold_label": "the gold label from an import, if any",
    "history": "every label, revision, skip, lead decision (with its note), return and undo: who, when",
}
DEFAULT_COLUMNS = ("id", "text", "label", "split", "source", "round", "annotators", "agreement")
META_PREFIX = "meta."
CHUNK = 2000
# Parquet column types; every other column (meta.* too) is a string.
PARQUET_TYPES = {"round": "int64", "n_labels": "int64", "agreement": "float64"}


@dataclass(frozen=True)
class DatasetFilter:
    labelled_only: bool = True  # False: also items with labels but no final label (disagreements, ...)
    include_test: bool = True
    label_ids: Sequence[int] = ()
    sources: Sequence[str] = ()
    round_numbers: Sequence[int] = ()
    columns: Sequence[str] = DEFAULT_COLUMNS
    metadata: bool = True  # add one column per metadata key


def dataset_items(*, project: Project, spec: DatasetFilter) -> QuerySet[Item]:
    items = Item.objects.filter(project=project)
    if spec.labelled_only:
        items = items.filter(final_label__isnull=False)
    else:
        items = items.filter(Q(annotations__isnull=False) | Q(final_label__isnull=False))
    if not spec.include_test:
        items = items.filter(is_test=False)
    if spec.label_ids:
        items = items.filter(final_label_id__in=list(spec.label_ids))
    if spec.sources:
        items = items.filter(batch_rows__source__in=list(spec.sources))
    if spec.round_numbers:
        items = items.filter(batch_rows__round__number__in=list(spec.round_numbers))
    return items.distinct().order_by("id")


def _metadata_keys(items: QuerySet[Item]) -> list[str]:
    keys: set[str] = set()
    for metadata in items.values_list("metadata", flat=True).iterator(chunk_size=CHUNK):
        if isinstance(metadata, dict):
            keys.update(str(k) for k in metadata)
    return sorted(keys)


def dataset_fields(*, project: Project, spec: DatasetFilter) -> list[str]:
    columns = [c for c in spec.columns if c in DATASET_COLUMNS] or list(DEFAULT_COLUMNS)
    if spec.metadata:
        columns += [META_PREFIX + key for key in _metadata_keys(dataset_items(project=project, spec=spec))]
    return columns


def _agreement(labels: list[str], final: str | None) -> float | None:
    if not labels:
        return None
    target = final if final is not None else Counter(labels).most_common(1)[0][0]
    return round(sum(1 for name in labels if name == target) / len(labels), 4)


def _chunk_rows(chunk: list[Item], fields: list[str]) -> Iterator[dict[str, Any]]:
    ids = [item.id for item in chunk]
    by_item: dict[int, list[Annotation]] = {}
    annotations = Annotation.objects.filter(item_id__in=ids).select_related("annotator", "label").order_by("id")
    for annotation in annotations:
        by_item.setdefault(annotation.item_id, []).append(annotation)
    first_batch: dict[int, tuple[str, int | None]] = {}
    batch_rows = BatchItem.objects.filter(item_id__in=ids).order_by("-round__number")
    for item_id, picked_by, round_number in batch_rows.values_list("item_id", "source", "round__number"):
        first_batch[item_id] = (picked_by, round_number)  # iterated newest first: the earliest round wins
    history = events_of(item_ids=ids) if "history" in fields else {}
    for item in chunk:
        anns = by_item.get(item.id, [])
        final = item.final_label.name if item.final_label else None
        source, number = first_batch.get(item.id, ("", None))
        adjudication = getattr(item, "adjudication", None)
        full: dict[str, Any] = {
            "id": item.external_id,
            "text": item.text,
            "label": final,
            "split": "test" if item.is_test else "train",
            "source": source,
            "round": number,
            "annotators": ";".join(a.annotator.username for a in anns),
            "annotator_labels": ";".join(f"{a.annotator.username}={a.label.name}" for a in anns),
            "n_labels": len(anns),
            "agreement": _agreement([a.label.name for a in anns], final),
            "decided_by": adjudication.decided_by.username if adjudication else "",
            "gold_label": item.gold_label.name if item.gold_label else None,
            "history": [event_record_dict(e) for e in history.get(item.id, [])],
        }
        metadata = item.metadata if isinstance(item.metadata, dict) else {}
        for key, value in metadata.items():
            full[META_PREFIX + str(key)] = value
        yield {name: full.get(name) for name in fields}


def dataset_rows(*, project: Project, spec: DatasetFilter, fields: list[str]) -> Iterator[dict[str, Any]]:
    items = dataset_items(project=project, spec=spec).select_related(
        "final_label", "gold_label", "adjudication__decided_by"
    )
    last_id = 0
    while True:
        chunk = list(items.filter(id__gt=last_id)[:CHUNK])
        if not chunk:
            return
        last_id = chunk[-1].id
        yield from _chunk_rows(chunk, fields)


def export_dataset(*, project: Project, fmt: str, spec: DatasetFilter | None = None) -> Iterator[str]:
    """The training export as spreadsheet-safe CSV (``csv``), raw CSV (``csv_raw``) or JSONL text
    chunks (header first for CSV)."""
    spec = spec or DatasetFilter()
    fields = dataset_fields(project=project, spec=spec)
    return render(dataset_rows(project=project, spec=spec, fields=fields), fmt=fmt, fields=fields)


def export_dataset_parquet(*, project: Project, spec: DatasetFilter | None = None) -> Iterator[bytes]:
    """The training export as Parquet: typed columns (PARQUET_TYPES, else strings; a metadata value
    that is not a string as JSON)."""
    import pyarrow as pa

    spec = spec or DatasetFilter()
    fields = dataset_fields(project=project, spec=spec)
    schema = pa.schema([(name, pa.type_for_alias(PARQUET_TYPES.get(name, "string"))) for name in fields])
    rows = (
        {k: v if k in PARQUET_TYPES or v is None or isinstance(v, str) else json.dumps(v) for k, v in row.items()}
        for row in dataset_rows(project=project, spec=spec, fields=fields)
    )
    return render_parquet(rows, schema=schema, chunk=CHUNK)
