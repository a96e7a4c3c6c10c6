"""Export labels and predictions as CSV or JSONL, streamed row by row.

Labels: one row per item that has any human label, adjudication or gold label — item id, text hash,
final label, every annotator's label, the adjudication, the round it was selected in, timestamps, and
its history (every label, revision, skip, lead decision with its note, return and undo: who, when).
Predictions: one row per (item id, prompt hash, adapter-set hash) — the unique key of Prediction, so a
rerun with new adapters adds rows with a new key instead of overwriting or duplicating old ones.

CSV (``csv``) is for spreadsheets: a text cell that a spreadsheet would run as a formula (it starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading ``'`` (OWASP's CSV-injection
rule), so opening an export never executes what an annotator or an imported file wrote. Raw CSV
(``csv_raw``: for pandas and scripts, never to open in a spreadsheet), JSONL and Parquet are exact.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import Q

from annotate.models import Annotation, BatchItem, Item, Prediction, Project
from annotate.selectors.history import event_record_dict, events_of

LABEL_FIELDS = [
    "item_id",
    "text_hash",
    "is_test",
    "final_label",
    "gold_label",
    "annotations",
    "adjudicated_label",
    "adjudicated_by",
    "adjudicated_at",
    "round",
    "first_labeled_at",
    "last_labeled_at",
    "finalized_at",
    "history",
]
PREDICTION_FIELDS = [
    "item_id",
    "text_hash",
    "prompt_hash",
    "adapter_set_hash",
    "model_version",
    "round",
    "label",
    "probs",
    "mass",
    "uncertainty",
    "created_at",
]
ITEM_CHUNK = 2000
PARQUET_READ = 1 << 20
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP CSV injection: what a spreadsheet evaluates


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def label_rows(project: Project) -> Iterator[dict[str, Any]]:
    items = (
        Item.objects.filter(project=project)
        .filter(Q(annotations__isnull=False) | Q(adjudication__isnull=False) | Q(gold_label__isnull=False))
        .distinct()
        .select_related("final_label", "gold_label", "adjudication__label", "adjudication__decided_by")
        .order_by("id")
    )
    last_id = 0
    while True:
        chunk = list(items.filter(id__gt=last_id)[:ITEM_CHUNK])
        if not chunk:
            return
        last_id = chunk[-1].id
        yield from _label_chunk(chunk)


def _label_chunk(chunk: list[Item]) -> Iterator[dict[str, Any]]:
    ids = [item.id for item in chunk]
    by_item: dict[int, list[Annotation]] = {}
    for ann in Annotation.objects.filter(item_id__in=ids).select_related("annotator", "label").order_by("created_at"):
        by_item.setdefault(ann.item_id, []).append(ann)
    rounds = dict(BatchItem.objects.filter(item_id__in=ids).values_list("item_id", "round__number"))
    history = events_of(item_ids=ids)
    for item in chunk:
        anns = by_item.get(item.id, [])
        adjudication = getattr(item, "adjudication", None)
        yield {
            "item_id": item.external_id,
            "text_hash": item.text_hash,
            "is_test": item.is_test,
            "final_label": item.final_label.name if item.final_label else None,
            "gold_label": item.gold_label.name if item.gold_label else None,
            "annotations": {a.annotator.username: a.label.name for a in anns},
            "adjudicated_label": adjudication.label.name if adjudication and adjudication.label else None,
            "adjudicated_by": adjudication.decided_by.username if adjudication else None,
            "adjudicated_at": _iso(adjudication.decided_at) if adjudication else None,
            "round": rounds.get(item.id),
            "first_labeled_at": _iso(anns[0].created_at) if anns else None,
            "last_labeled_at": _iso(max(a.updated_at for a in anns)) if anns else None,
            "finalized_at": _iso(item.finalized_at),
            # Every label, revision, skip, lead decision (with its note), return and undo, oldest first.
            "history": [event_record_dict(e) for e in history.get(item.id, [])],
        }


def prediction_rows(project: Project) -> Iterator[dict[str, Any]]:
    rows = (
        Prediction.objects.filter(item__project=project)
        .select_related("item", "label", "round")
        .order_by("item_id", "prompt_hash", "adapter_set_hash")
    )
    for p in rows.iterator(chunk_size=ITEM_CHUNK):
        yield {
            "item_id": p.item.external_id,
            "text_hash": p.item.text_hash,
            "prompt_hash": p.prompt_hash,
            "adapter_set_hash": p.adapter_set_hash,
            "model_version": p.model_version,  # the predictor's fingerprint (predictor/model.py)
            "round": p.round.number if p.round else None,
            "label": p.label.name,
            "probs": p.probs,
            "mass": p.mass,
            "uncertainty": p.uncertainty,
            "created_at": _iso(p.created_at),
        }


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: nested values as JSON, text that a spreadsheet would evaluate defused.
    Numbers stay numbers (a negative float is not a formula)."""
    if isinstance(value, dict | list):
        value = json.dumps(value)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def raw_csv_cell(value: Any) -> Any:
    """A value as a raw CSV cell: nested values as JSON, text exactly as it is."""
    return json.dumps(value) if isinstance(value, dict | list) else value


def render(rows: Iterable[dict[str, Any]], *, fmt: str, fields: list[str]) -> Iterator[str]:
    """Serialise rows as CSV (nested values as JSON, formulas defused), raw CSV (``csv_raw``, texts
    exact) or JSONL (exact), one chunk of text per row."""
    if fmt == "jsonl":
        for row in rows:
            yield json.dumps(row, ensure_ascii=False) + "\n"
        return
    if fmt not in ("csv", "csv_raw"):
        raise ValueError(f"unknown export format {fmt!r} (csv, csv_raw or jsonl)")
    cell = csv_cell if fmt == "csv" else raw_csv_cell
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: cell(v) for k, v in row.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def render_parquet(rows: Iterable[dict[str, Any]], *, schema: Any, chunk: int = ITEM_CHUNK) -> Iterator[bytes]:
    """Rows as Parquet with ``schema`` (a pyarrow schema): row groups of ``chunk`` rows written to a
    temp file, then streamed out in 1 MiB parts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    handle, path = tempfile.mkstemp(suffix=".parquet")
    os.close(handle)
    try:
        with pq.ParquetWriter(path, schema) as writer:
            batch: list[dict[str, Any]] = []
            for row in rows:
                batch.append(row)
                if len(batch) >= chunk:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        with open(path, "rb") as f:
            while part := f.read(PARQUET_READ):
                yield part
    finally:
        os.unlink(path)


def export_labels(*, project: Project, fmt: str) -> Iterator[str]:
    return render(label_rows(project), fmt=fmt, fields=LABEL_FIELDS)


def export_predictions(*, project: Project, fmt: str) -> Iterator[str]:
    return render(prediction_rows(project), fmt=fmt, fields=PREDICTION_FIELDS)
