"""The round flow's bookkeeping against the real database, without a broker or a model: what
``round_advance`` sends (each unit once, again only on resume, nothing for a round a live synchronous
process drives), and the claims every unit of work goes through (one live holder, a dead holder taken
over, a unit that keeps dying fails its round)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from annotate.models import AdapterVersion, Project, Round, WorkClaim
from annotate.services import jobs, rounds, training
from annotate.services.round_state import write_plan
from annotate.services.rounds import Work, round_advance, round_resume

pytestmark = pytest.mark.django_db
HOST = socket.gethostname()


@pytest.fixture
def pending() -> Round:
    project = Project.objects.create(name="flow")
    return Round.objects.create(project=project, number=1, status="pending")


@pytest.fixture
def other_live_process() -> Iterator[str]:
    """The worker id of a real process on this host that stays alive for the test."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield f"{HOST}:{proc.pid}"
    finally:
        proc.kill()
        proc.wait()


def _plan_rows(row: Round) -> QuerySet[WorkClaim]:
    return jobs.work_rows(row.id, WorkClaim.Kind.PLAN)


def test_each_missing_unit_is_sent_once_and_again_only_on_resume(pending: Round) -> None:
    plan = Work("annotate.round_begin", (pending.id,))
    assert round_advance(pending.id) == [plan]
    assert WorkClaim.objects.get(round=pending, kind="plan").status == "queued"
    assert round_advance(pending.id) == []  # a second caller (another task's follow-up) sends nothing
    # A worker start sends a queued unit again when its message went out before the worker started
    # (a worker killed after receiving it, before claiming the unit, left it unacknowledged) ...
    started = timezone.now()
    assert round_resume(round_id=pending.id, since=started) == [plan]
    # ... once, however many workers that started then resume: the first moved sent_at past their start ...
    assert round_resume(round_id=pending.id, since=started) == []
    assert round_resume(round_id=pending.id, since=started - timedelta(seconds=5)) == []
    # ... and not a message sent after the worker started (a dispatch, or another worker's resume).
    _plan_rows(pending).update(sent_at=timezone.now() + timedelta(seconds=1))
    assert round_resume(round_id=pending.id, since=timezone.now()) == []
    # A worker that starts later sends it once more (``since`` None: now, the `round resume` command).
    _plan_rows(pending).update(sent_at=timezone.now() - timedelta(seconds=1))
    assert round_resume(round_id=pending.id) == [plan]
    assert str(plan) == f"annotate.round_begin({pending.id},)"


def test_a_round_driven_by_a_live_process_gets_nothing(pending: Round, other_live_process: str) -> None:
    jobs.work_rows(pending.id, WorkClaim.Kind.DRIVE).update(status="running", worker=other_live_process)
    assert round_resume(round_id=pending.id) == []
    with pytest.raises(rounds.RoundError, match="another live process"), rounds.driving(pending.id):
        pass
    jobs.work_rows(pending.id, WorkClaim.Kind.DRIVE).update(worker=f"{HOST}:{2**22 + 4242}")  # it died
    assert round_resume(round_id=pending.id) == [Work("annotate.round_begin", (pending.id,))]
    with rounds.driving(pending.id):  # this process drives it now: the workers get nothing
        assert round_advance(pending.id) == []
    assert WorkClaim.objects.get(round=pending, kind="drive").status == "pending"  # released


def test_one_live_holder_a_dead_one_is_taken_over(pending: Round, other_live_process: str) -> None:
    rows = _plan_rows(pending)
    assert jobs.claim(rows, me=other_live_process)
    assert not jobs.claim(rows, me=f"{HOST}:{os.getpid()}")  # a live process holds it
    assert jobs.needs_worker(rows).count() == 0 and round_advance(pending.id) == []
    rows.update(worker=f"{HOST}:{2**22 + 4243}")  # its holder died
    assert jobs.needs_worker(rows).count() == 1
    assert jobs.claim(rows, me=f"{HOST}:{os.getpid()}")
    assert rows.get().attempts == 2
    assert jobs.finish(rows, me=f"{HOST}:{os.getpid()}") and rows.get().status == "done"
    assert not jobs.claim(rows, me=other_live_process)  # done stays done


def test_a_unit_whose_holder_keeps_dying_fails_the_round(pending: Round) -> None:
    rows = _plan_rows(pending)
    rows.update(status="running", worker=f"{HOST}:{2**22 + 4244}", attempts=jobs.MAX_ATTEMPTS)
    ran: list[int] = []
    assert jobs.run_claimed(rows, round_id=pending.id, what="planning", step=lambda: ran.append(1)) is None
    pending.refresh_from_db()
    assert ran == [] and pending.status == "failed"
    assert pending.failure_reason == f"planning failed {jobs.MAX_ATTEMPTS} times: its worker died each time"


def test_a_failing_step_marks_its_unit_failed_and_raises(pending: Round) -> None:
    rows = _plan_rows(pending)

    def boom() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        jobs.run_claimed(rows, round_id=pending.id, what="planning", step=boom)
    assert rows.get().status == "failed" and rows.get().error == "OSError: disk full"
    assert round_advance(pending.id) == [Work("annotate.round_begin", (pending.id,))]  # tried again


def test_a_driver_on_another_host_is_live_while_its_heartbeat_is_fresh(pending: Round) -> None:
    from datetime import timedelta

    from django.utils import timezone

    rows = jobs.work_rows(pending.id, WorkClaim.Kind.DRIVE)
    rows.update(status="running", worker="web-container:4242", heartbeat_at=timezone.now())
    assert rounds.driven(pending) and round_resume(round_id=pending.id) == []
    rows.update(heartbeat_at=timezone.now() - timedelta(seconds=rounds.DRIVE_STALE_S + 1))  # it went silent
    assert not rounds.driven(pending)
    assert round_resume(round_id=pending.id) == [Work("annotate.round_begin", (pending.id,))]


def test_an_adapter_saved_by_a_worker_that_died_before_closing_its_claim_is_closed_by_the_next(
    tmp_path: Path, settings: Any
) -> None:
    """The trainer saved the AdapterVersion, then died (or its last UPDATE failed) with the claim still
    running: the round stays in training (never evaluated while a unit is open), resume sends that
    unit again, and its message closes the claim instead of training again; then the round moves on."""
    settings.ADAPTER_DIR = str(tmp_path)
    project = Project.objects.create(name="closing")
    row = Round.objects.create(project=project, number=2, status="training")
    write_plan(row, {"prod:0": [[1, 0]], "prod:1": [[2, 1]]})
    for k in (0, 1):
        AdapterVersion.objects.create(project=project, round=row, arm="prod", k=k, path="x", content_hash=f"h{k}")
    jobs.work_rows(row.id, WorkClaim.Kind.TRAIN, "prod:0").update(status="done", attempts=1)
    dead = jobs.work_rows(row.id, WorkClaim.Kind.TRAIN, "prod:1")
    dead.update(status="running", worker=f"{HOST}:{2**22 + 4246}", attempts=1)

    assert not training.training_done(round=row)
    assert round_advance(row.id) == []  # a follow-up takes a running unit as held ...
    assert Round.objects.get(id=row.id).status == "training"
    assert round_resume(round_id=row.id) == [Work("annotate.gpu.train_adapter", (row.id, "prod", 1))]  # ... resume not

    adapter = training.train_adapter_run(round_id=row.id, arm="prod", k=1)
    assert adapter is not None and adapter.content_hash == "h1"  # found, not trained again
    assert dead.get().status == "done" and dead.get().attempts == 1
    assert training.training_done(round=row)
    round_advance(row.id)
    assert Round.objects.get(id=row.id).status == "evaluating"
