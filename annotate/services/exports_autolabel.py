"""The final dataset: every item with a human label or an accepted auto label, with provenance —
source (human / adjudicated / auto:<cascade tier>), confidence, audit status, prompt hash, adapter
set, run — as CSV, JSONL or Parquet, streamed in item-id chunks (bounded memory on any pool size)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from annotate.models import Adjudication, AutoLabel, GoldItem, Item, Project
from annotate.services.exports import render, render_parquet

DATASET_FIELDS = [
    "item_id",
    "text",
    "label",
    "source",
    "confidence",
    "audit",
    "prompt_hash",
    "adapter_set",
    "model_version",
    "run",
    "is_test",
    "is_gold",
]
CHUNK = 2000


def dataset_rows(project: Project) -> Iterator[dict[str, Any]]:
    last_id = 0
    while True:
        chunk = list(
            Item.objects.filter(project=project, id__gt=last_id)
            .select_related("final_label")
            .order_by("id")
            .only("id", "external_id", "text", "is_test", "final_label__name")[:CHUNK]
        )
        if not chunk:
            return
        last_id = chunk[-1].id
        yield from _rows(chunk)


def _rows(chunk: list[Item]) -> Iterator[dict[str, Any]]:
    ids = [item.id for item in chunk]
    autos: dict[int, AutoLabel] = {}
    for row in AutoLabel.objects.filter(item_id__in=ids).select_related("label").order_by("id"):
        autos[row.item_id] = row  # the newest decision of an item wins
    adjudicated = set(
        Adjudication.objects.filter(item_id__in=ids, label__isnull=False).values_list("item_id", flat=True)
    )
    gold = set(GoldItem.objects.filter(item_id__in=ids).values_list("item_id", flat=True))
    for item in chunk:
        auto = autos.get(item.id)
        if item.final_label is not None:
            source, label, confidence = (
                ("adjudicated" if item.id in adjudicated else "human"),
                item.final_label.name,
                None,
            )
        elif auto is not None and auto.decision == AutoLabel.Decision.ACCEPTED:
            source, label, confidence = f"auto:{auto.tier}", auto.label.name, auto.confidence
        else:
            continue
        yield {
            "item_id": item.external_id,
            "text": item.text,
            "label": label,
            "source": source,
            "confidence": confidence,
            "audit": auto.audit if auto is not None else "",
            "prompt_hash": auto.prompt_hash if auto is not None else "",
            "adapter_set": auto.adapter_set_hash if auto is not None else "",
            "model_version": auto.model_version if auto is not None else "",  # the calibrated predictor
            "run": auto.run_id if auto is not None else None,
            "is_test": item.is_test,
            "is_gold": item.id in gold,
        }


def _parquet(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    import pyarrow as pa

    schema = pa.schema(
        [
            ("item_id", pa.string()),
            ("text", pa.string()),
            ("label", pa.string()),
            ("source", pa.string()),
            ("confidence", pa.float64()),
            ("audit", pa.string()),
            ("prompt_hash", pa.string()),
            ("adapter_set", pa.string()),
            ("model_version", pa.string()),
            ("run", pa.int64()),
            ("is_test", pa.bool_()),
            ("is_gold", pa.bool_()),
        ]
    )
    return render_parquet(rows, schema=schema, chunk=CHUNK)


def export_dataset(*, project: Project, fmt: str) -> Iterator[str]:
    """CSV or JSONL text chunks."""
    return render(dataset_rows(project), fmt=fmt, fields=DATASET_FIELDS)


def export_dataset_parquet(*, project: Project) -> Iterator[bytes]:
    return _parquet(dataset_rows(project))
