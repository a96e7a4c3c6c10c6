"""Shared by the round tests: a small TREC project, a simulated annotator, a live Celery worker on a
file SQLite database the test process and the workers both see."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connections

from annotate.models import Item, Label, Round
from devtools.deployed import stop_groups
from devtools.oracle import TREC_CODES, annotator, label_batch, trec_project  # noqa: F401  (the tests' helpers)
from tests import redis_owner

ROOT = Path(__file__).resolve().parents[2]
# Tiny and fast: 2 members, 3 training steps, 2 shards, checkpoints every step (so a kill mid-training
# always finds one to resume from); the comparison arms every round (the CPU profile's arms_every is 5).
TEST_OPTIONS = (
    '{"max_context": 192, "n_shards": 2, "arms_every": 1,'
    ' "train": {"max_steps": 3, "batch_size": 4, "checkpoint_every": 1}}'
)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def round_status(round_id: int) -> str:
    return str(Round.objects.values_list("status", flat=True).get(id=round_id))


@contextlib.contextmanager
def file_database(var_dir: Path) -> Iterator[Path]:
    """Point the test process's default connection at ``var_dir/db.sqlite3`` (migrated), the file the
    workers open through VAR_DIR; restored afterwards.

    A new connection object replaces the default one for the duration: closing the old one is not
    enough, because Django ignores close() on the in-memory SQLite test database (it would destroy
    it), so the old connection would stay open on the wrong database after a previous DB test."""
    import copy

    from django.core.management import call_command

    saved = connections["default"]
    path = var_dir / "db.sqlite3"
    settings_dict = copy.deepcopy(saved.settings_dict)
    settings_dict["NAME"] = str(path)
    replacement = saved.__class__(settings_dict, "default")
    connections["default"] = replacement
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield path
    finally:
        replacement.close()
        connections["default"] = saved


class Workers:
    """Real ``celery worker`` processes (own process groups) on this run's Redis database."""

    def __init__(self, var_dir: Path, broker: str, log_dir: Path) -> None:
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "VAR_DIR": str(var_dir),
            "REDIS_URL": broker,
            "ALANN_LOOP_OPTIONS": os.environ.get("ALANN_LOOP_OPTIONS", TEST_OPTIONS),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
        }
        self.env.pop("DATABASE_URL", None)
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, queues: str = "default,io,gpu") -> None:
        log = (self.log_dir / f"worker-{name}.log").open("ab")
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queues, "-c", "1"]
        cmd += ["--pool", "prefork", "--prefetch-multiplier", "1", "-n", f"{name}@%h", "--loglevel", "INFO"]
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True)

    def kill(self, name: str) -> None:
        """SIGKILL the worker's whole process group (main process and its prefork child)."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        stop_groups(self.procs)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.log_dir.glob("worker-*.log")))


def use_var_dir(tmp_path: Path, settings: Any) -> Path:
    """A fresh ``tmp_path/var`` for the adapters, scores and embeddings of this process and the workers it
    starts (``Workers(var_dir, ...)``)."""
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    settings.ADAPTER_DIR, settings.SCORE_DIR, settings.EMBEDDING_DIR = (
        var_dir / "adapters",
        var_dir / "scores",
        var_dir / "embeddings",
    )
    return var_dir


@contextlib.contextmanager
def live_loop(tmp_path: Path, settings: Any, django_db_blocker: Any) -> Iterator[Workers]:
    """A file database + worker pool for one test on this run's own Redis database (claimed by
    tests/conftest.py, emptied before and after); the test process sends tasks to the same broker and
    sees the same adapters, scores and embeddings (VAR_DIR)."""
    owned = redis_owner.current()
    var_dir = use_var_dir(tmp_path, settings)
    owned.flush()  # stray messages of earlier tests of this run (never anyone else's: the db is ours)
    redis_owner.point_celery_at(owned.url)
    workers = Workers(var_dir, owned.url, tmp_path)
    try:
        with django_db_blocker.unblock(), file_database(var_dir):
            yield workers
    finally:
        workers.stop_all()
        owned.flush()


def wait_workers(names: list[str], timeout: float = 60.0) -> None:
    """Until every named worker answers a ping (its queues are consumed from then on)."""
    from config.celery import app

    def ready() -> bool:
        replies = app.control.ping(timeout=0.5) or []
        seen = {name.split("@")[0] for reply in replies for name in reply}
        return set(names) <= seen

    wait_for(ready, timeout, f"workers {names} to start", poll=0.2)


def use_loop_options(monkeypatch: Any, settings: Any, options: str) -> None:
    """The test's loop options (JSON), where each process reads them: settings.LOOP_OPTIONS in this
    process, ALANN_LOOP_OPTIONS for the workers and commands it starts."""
    import json

    monkeypatch.setenv("ALANN_LOOP_OPTIONS", options)
    settings.LOOP_OPTIONS = json.loads(options)


def labelled_with_flips(shared_data: Path, tmp_path: Path, smollm2_dir: Path, flips: int = 20) -> tuple[Any, set[int]]:
    """A 400-row TREC project whose 384 pool items carry their true label as final label, but ``flips`` of
    them a wrong one (the label-error tests: the scan should find those)."""
    project = trec_project(shared_data, tmp_path, model_dir=smollm2_dir, pool=400, test=16)
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    pool = list(Item.objects.filter(project=project, is_test=False).order_by("id"))
    rng = np.random.default_rng(3)
    flipped = set(rng.choice([i.pk for i in pool], size=flips, replace=False).tolist())
    for item in pool:
        label = item.gold_label
        if item.pk in flipped:
            right = labels.index(item.gold_label)  # type: ignore[arg-type]  # TREC rows all have one
            label = labels[(right + 1 + int(rng.integers(0, len(labels) - 1))) % len(labels)]
        item.final_label = label
        item.save(update_fields=["final_label"])
    return project, flipped
