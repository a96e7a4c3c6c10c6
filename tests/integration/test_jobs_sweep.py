"""A job whose worker died while every other worker stayed up is taken up by the next sweep
(config/celery.py ``ResumeOnConnect``: the job engine's resume every ``ALANN_JOBS_SWEEP_S``), not only
when some worker happens to start or reconnect. Here: an import left "running" by a process that is gone,
recorded after the only worker had started and run its start's resume; a real worker on this run's Redis
database, its sweep every 2 s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from annotate.models import ImportJob, Item
from annotate.services.projects import LabelInput, project_create
from tests.integration.round_helpers import live_loop, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.timeout(240)]


def _resumes(log: Path) -> int:
    return sum("annotate.jobs_resume[" in line and "succeeded" in line for line in log.read_text().splitlines())


def _orphaned_import(tmp_path: Path) -> ImportJob:
    """An import its worker started and died in: "running", nothing inserted, the worker's process gone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    project = project_create(name="swept", labels=[LabelInput("yes", "A"), LabelInput("no", "B")])
    path = tmp_path / "upload.csv"
    path.write_text("id,text\n1,first text\n2,second text\n3,third text\n")
    return ImportJob.objects.create(
        project=project, filename="upload.csv", path=str(path), total_bytes=path.stat().st_size, status="running"
    )


def test_a_job_orphaned_while_the_workers_stay_up_is_taken_up_by_the_sweep(
    tmp_path: Path, settings: Any, django_db_blocker: Any
) -> None:
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        workers.env["ALANN_JOBS_SWEEP_S"] = "2"
        workers.start("cpu", queues="default,io")
        log = tmp_path / "worker-cpu.log"
        try:
            wait_for(lambda: _resumes(log) >= 1, 90, "the worker's start resume", poll=0.3)
            job = _orphaned_import(tmp_path)  # after the start's resume: only a sweep can find it
            seen = _resumes(log)
            wait_for(lambda: ImportJob.objects.get(id=job.id).status == "done", 60, "the sweep", poll=0.3)
        except AssertionError:
            raise AssertionError(workers.logs()) from None
        assert _resumes(log) > seen
        assert Item.objects.filter(import_job=job).count() == 3
