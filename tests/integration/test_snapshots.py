"""Issue 32, versioned export snapshots: a finished round's labels export is written once, with its
row count, sha256 and model version; a second finish returns the same snapshot; a snapshot that
cannot be written is recorded as failed and the round stays done."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from annotate.models import AdapterVersion, Annotation, ExportSnapshot, Item, Label, Round
from annotate.services.projects import LabelInput, project_create
from annotate.services.round_state import S
from annotate.services.rounds import round_advance, round_run_sync
from annotate.services.snapshots import snapshot_write

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def finished(settings: Any, tmp_path: Path) -> Round:
    settings.EXPORT_DIR = tmp_path / "exports"
    project = project_create(name="snap", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos = Label.objects.filter(project=project).order_by("order")[0]
    ann = User.objects.create_user("ann")
    for n in range(3):
        item = Item.objects.create(project=project, external_id=f"i{n}", text=f"-2+{n} text", text_hash=f"h{n}")
        Annotation.objects.create(item=item, annotator=ann, label=pos)
    # the fingerprint its evaluation stored (annotate/services/evaluation.py): the ML page's model version
    row = Round.objects.create(
        project=project, number=1, status=S.DONE, metrics={"predictor": {"fingerprint": "f" * 64}}
    )
    AdapterVersion.objects.create(project=project, round=row, arm="prod", k=0, path="/a", content_hash="c" * 64)
    return row


def test_a_snapshot_is_written_once_with_its_hash(finished: Round, settings: Any) -> None:
    snapshot = snapshot_write(round_id=finished.id)

    assert (snapshot.status, snapshot.rows, snapshot.fmt) == ("done", 3, "jsonl")
    data = Path(snapshot.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == snapshot.sha256 and len(data) == snapshot.size_bytes
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert [r["item_id"] for r in rows] == ["i0", "i1", "i2"]
    assert rows[0]["annotations"] == {"ann": "pos"}
    assert snapshot.model_version == "f" * 64  # the round's predictor, named as the ML page names it

    Annotation.objects.filter(item__project=finished.project).delete()  # labels change after the round...
    again = snapshot_write(round_id=finished.id)
    assert (again.pk, again.path, again.sha256) == (snapshot.pk, snapshot.path, snapshot.sha256)  # ...the snapshot not
    assert Path(snapshot.path).read_bytes() == data
    assert len(list(Path(settings.EXPORT_DIR).rglob("*"))) == 2  # its folder and the one file


def test_a_failed_write_is_recorded_and_retried(finished: Round, settings: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the export folder should be")
    settings.EXPORT_DIR = blocker

    failed = snapshot_write(round_id=finished.id)

    assert failed.status == "failed" and "Error" in failed.error
    assert Round.objects.get(id=finished.id).status == "done"
    settings.EXPORT_DIR = tmp_path / "exports"
    retried = snapshot_write(round_id=finished.id)
    assert (retried.pk, retried.status, retried.rows, retried.error) == (failed.pk, "done", 3, "")
    assert ExportSnapshot.objects.count() == 1


def test_a_finished_round_gets_one_finish_unit(finished: Round) -> None:
    """The round flow's last unit: once a round is done (or failed), round_advance sends
    annotate.round_finished (the io queue) once; later calls find it reserved."""
    sent = round_advance(finished.id, dispatch=None)
    assert [str(work) for work in sent] == [f"annotate.round_finished({finished.id},)"]
    assert round_advance(finished.id) == []


def test_the_synchronous_driver_writes_the_snapshot_in_process(finished: Round) -> None:
    """``round run-sync`` and the simulation have no worker: the finish unit runs in the driver."""
    assert round_run_sync(round_id=finished.id).status == "done"
    snapshot = ExportSnapshot.objects.get(round=finished)
    assert (snapshot.status, snapshot.rows) == ("done", 3)
    assert round_advance(finished.id) == []  # the finish unit is done: nothing to send
