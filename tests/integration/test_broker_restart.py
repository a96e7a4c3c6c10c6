"""A broker restarted under running workers (the compose file's Redis keeps nothing: every queued
message is gone) must not leave a round waiting forever: each worker that connects again runs the
job engine's resume (config/celery.py ``ResumeOnConnect``), which sends the lost units again. Celery's
``worker_ready`` fires at a worker's first connection only, so before that step a round whose training
messages were in the broker stayed "training" until some worker happened to start.

The test owns its broker: a redis-server of its own on a free port, stopped and started again empty."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotate.models import AdapterVersion, WorkClaim
from annotate.services.rounds import round_request_retrain, round_request_start
from devtools.live_server import free_port
from tests import redis_owner
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    Workers,
    annotator,
    file_database,
    label_batch,
    round_status,
    trec_project,
    use_loop_options,
    use_var_dir,
    wait_for,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(400)]


class OwnRedis:
    """A redis-server on ``port`` that keeps nothing on disk; ``restart`` starts an empty one there."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        wait_for(self.ping, 20, "the test's redis-server", poll=0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=20)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        time.sleep(1.0)  # the workers see the connection drop
        self.start()

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_connect_timeout=1)

    def ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (make services installs it)")
    server = OwnRedis(free_port(), tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        redis_owner.point_celery_at(redis_owner.current().url)


def _queued_on_gpu(server: OwnRedis) -> int:
    try:
        return int(server.client().llen("gpu"))
    except Exception:
        return -1


def _resumes(log: Path) -> int:
    """The job engine's resumes the worker finished: its start's and one per reconnection."""
    return sum("annotate.jobs_resume[" in line and "succeeded" in line for line in log.read_text().splitlines())


def test_a_broker_restart_under_running_workers_loses_no_round(
    own_redis: OwnRedis,
    shared_data: Path,
    tiny_llama_dir: Path,
    tmp_path: Path,
    settings: Any,
    django_db_blocker: Any,
    monkeypatch: Any,
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    var_dir = use_var_dir(tmp_path, settings)
    redis_owner.point_celery_at(own_redis.url)
    workers = Workers(var_dir, own_redis.url, tmp_path)
    try:
        with django_db_blocker.unblock(), file_database(var_dir):
            workers.start("cpu", queues="default,io")  # no gpu worker yet: the training waits in the broker
            project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
            first = round_request_start(project=project, user=None)
            try:
                wait_for(lambda: round_status(first.id) == "labeling", 120, "the cold start", poll=0.3)
                label_batch(project, annotator("a"))
                round_request_retrain(project=project, user=None)
                train = WorkClaim.objects.filter(round=first, kind="train")
                wait_for(lambda: train.count() > 0 and _queued_on_gpu(own_redis) == train.count(), 60, "the plan")
            except AssertionError:
                raise AssertionError(workers.logs()) from None
            units = train.count()
            assert set(train.values_list("status", flat=True)) == {"queued"}

            own_redis.restart()  # every message is gone; the cpu worker stays up and reconnects
            assert _queued_on_gpu(own_redis) == 0
            try:
                wait_for(lambda: _queued_on_gpu(own_redis) == units, 90, "the reconnected worker to resend", poll=0.3)
            except AssertionError:
                raise AssertionError(workers.logs()) from None
            log = tmp_path / "worker-cpu.log"
            wait_for(lambda: _resumes(log) >= 2, 30, "the second resume")  # (a sweep may add more)

            workers.start("gpu", queues="gpu")
            try:
                wait_for(lambda: round_status(first.id) in ("done", "failed"), 180, "the round's end", poll=0.3)
            except AssertionError:
                raise AssertionError(workers.logs()) from None
            assert round_status(first.id) == "done", workers.logs()
            assert AdapterVersion.objects.filter(round=first).count() == units
    finally:
        workers.stop_all()
