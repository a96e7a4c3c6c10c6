"""Versioned export snapshots: when a round finishes, the labels export (annotate/services/exports.py,
JSON Lines: exact texts, nested values kept) as it stands then is written once to EXPORT_DIR, with the
round number, row count, sha256 and the round's model version (its predictor's fingerprint, as on the
ML page and in the Prediction rows). A snapshot is never rewritten: a
second finish of the same round (a redelivered message) finds it and returns it. Writing one never
fails the round: an error is logged and kept on the snapshot row, and a later call tries again."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from pathlib import Path
from typing import IO

from django.conf import settings
from django.db import IntegrityError

from annotate.models import ExportSnapshot, Round
from annotate.services.exports import export_labels
from annotate.services.round_state import run_key
from scoring.files import atomic_write

log = logging.getLogger(__name__)
FORMAT = "jsonl"  # exact: the spreadsheet-safe CSV would change texts


def snapshot_path(row: Round) -> Path:
    """A fresh file name per attempt: two writers racing for one round never write the same file; the
    one whose row is recorded keeps its file, the other deletes its own."""
    name = f"round_{row.number}-{run_key(row)}-{uuid.uuid4().hex[:8]}.labels.{FORMAT}"
    return Path(settings.EXPORT_DIR) / f"project_{row.project_id}" / name


def model_version(row: Round) -> str:
    """The round's model version: its predictor's fingerprint (predictor/model.py), which its
    evaluation keeps in the metrics — the ML page's "Model version" and the ``model_version`` of the
    predictions it makes; "" for a round evaluated without adapters."""
    fingerprint = ((row.metrics or {}).get("predictor") or {}).get("fingerprint")
    return fingerprint if isinstance(fingerprint, str) else ""


def _write(row: Round, path: Path) -> tuple[int, int, str]:
    """The export into ``path``, whole or not at all (scoring.files.atomic_write, fsynced): (rows,
    bytes, sha256)."""
    digest, counts = hashlib.sha256(), [0, 0]

    def write(out: IO[bytes]) -> None:
        for line in export_labels(project=row.project, fmt=FORMAT):
            data = line.encode("utf-8")
            digest.update(data)
            out.write(data)
            counts[0], counts[1] = counts[0] + 1, counts[1] + len(data)

    atomic_write(path, write, durable=True)
    return counts[0], counts[1], digest.hexdigest()


def snapshot_write(*, round_id: int) -> ExportSnapshot:
    """The round's snapshot: the recorded one if it is done, else written now. Never raises for a
    failed write: the returned row then has status failed and the error."""
    row = Round.objects.select_related("project").get(id=round_id)
    existing = ExportSnapshot.objects.filter(round=row, status=ExportSnapshot.Status.DONE).first()
    if existing is not None:
        return existing
    path = snapshot_path(row)
    try:
        rows, size, sha256 = _write(row, path)
        fields = {"path": str(path), "rows": rows, "size_bytes": size, "sha256": sha256, "error": ""}
        return _record(row, status=ExportSnapshot.Status.DONE, fields=fields, written=path)
    except Exception as exc:  # a full disk, an unwritable folder: the round stays as it is
        log.exception("round %s: the export snapshot was not written", row.pk)
        with contextlib.suppress(OSError):  # written, then the row could not be recorded
            path.unlink(missing_ok=True)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        return _record(row, status=ExportSnapshot.Status.FAILED, fields={"error": error}, written=None)


def _record(row: Round, *, status: str, fields: dict[str, object], written: Path | None) -> ExportSnapshot:
    """Record the attempt unless a done snapshot beat it (then ``written`` is deleted and that one returned)."""
    values = {"project_id": row.project_id, "status": status, "fmt": FORMAT, "model_version": model_version(row)}
    values.update(fields)
    try:
        snapshot, created = ExportSnapshot.objects.get_or_create(round=row, defaults=values)
    except IntegrityError:  # created by a racing writer between the two statements
        snapshot, created = ExportSnapshot.objects.get(round=row), False
    if created:
        return snapshot
    if snapshot.status == ExportSnapshot.Status.DONE:
        if written is not None:
            written.unlink(missing_ok=True)
        return snapshot
    ExportSnapshot.objects.filter(pk=snapshot.pk).update(**values)
    snapshot.refresh_from_db()
    return snapshot
