"""bench/deployed_loop.py's scoring-throughput rounds (``--throughput``, ``--kill``) run for real on this
machine, as the GPU sitting runs them but with the hf engine and the tiny model: the deployed processes
(gunicorn web, a CPU worker, two gpu-queue workers) on this test's own PostgreSQL database and this run's
own Redis database, a source project labelled over HTTP for one round (its ensemble scores the
throughput rounds), then a round with one gpu worker, one with two, and a round like the largest in
which the worker holding a running shard is SIGKILLed (its process group) and a fresh one takes over.

Before d517c1f the throughput rounds read their scores back from the score cache (the reference round
had scored the same items under the same adapters), so session 19's kill round on the GPU had no
running shard to kill; nothing on CPU ran this path until this test."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from devtools.deployed import own_postgres_database
from tests import redis_owner
from tests.integration.round_helpers import ROOT, TEST_OPTIONS
from tests.prerequisites import missing_prerequisite

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(600)]

PG_SERVER = os.environ.get("TEST_POSTGRES_SERVER", "postgres://postgres@127.0.0.1:5432/postgres")
TRAIN_ROWS, TEST_ROWS = 40, 16  # the source project: one round of B=8 trains its K=2 ensemble
# Items per round. The largest is what makes the kill possible: the driver kills once KILL_AT of the
# items are scored (progress comes per 256-item chunk) and then needs a shard still running (a Django
# subprocess reads the shards: 1-4 s here); at 2,400 items the tiny model scored a shard of 1,200 in
# 1.2 s and the kill found none running. 12,000 took 6-25 s a round on this shared 2-core machine, and
# at 15% each shard has a few chunks in the cache for the resumed shard to read back. The 1-worker
# round is small: it only has to score everything.
LARGEST = 12000
THROUGHPUT = f"1:300,2:{LARGEST}"
KILL_AT = 0.15
SOURCE_KNOBS = {"batch_size": 8, "ensemble_k": 2, "cold_start_batches": 1, "mass_threshold": 0.0, "seed": 7}


def tiny_data_dir(shared_data: Path, target: Path) -> Path:
    """The first rows of TREC's train and test splits (text,label), written under ``target``."""
    for split, n in (("train.csv", TRAIN_ROWS), ("test.csv", TEST_ROWS)):
        with (shared_data / "trec" / split).open(newline="", encoding="utf-8") as f:
            rows = [row for _, row in zip(range(n), csv.DictReader(f), strict=False)]
        target.mkdir(parents=True, exist_ok=True)
        with (target / split).open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows({"text": r["text"], "label": r["label"]} for r in rows)
    return target


def drive(*, shared_data: Path, model_dir: Path, tmp_path: Path, phase: list[str]) -> Path:
    """bench/deployed_loop.py as the GPU sitting calls it, small (a source project of one round), then the
    options of ``phase``, on this test's own PostgreSQL database and Redis database; its ``--out`` folder."""
    owned = redis_owner.current()
    owned.flush()  # this run's own database: stray messages of earlier tests, never anyone else's
    data = tiny_data_dir(shared_data, tmp_path / "data" / "trec")
    with contextlib.ExitStack() as stack:
        try:
            database_url = stack.enter_context(own_postgres_database(PG_SERVER))
        except psycopg.OperationalError as exc:
            missing_prerequisite(f"PostgreSQL at {PG_SERVER} does not answer: {exc}")
        return _drive(data, model_dir, database_url, owned.url, tmp_path, phase)


def _drive(data: Path, model_dir: Path, database_url: str, redis_url: str, tmp_path: Path, phase: list[str]) -> Path:
    out = tmp_path / "out"
    argv = [
        *(sys.executable, "bench/deployed_loop.py", "--data", f"trec={data}", "--engine", "hf"),
        *("--model-dir", str(model_dir), "--labels", "8", "--min-rounds", "1", "--annotators", "2"),
        *("--gpu-workers", "2", "--cpu-concurrency", "1", "--knobs", json.dumps(SOURCE_KNOBS)),
        # one thread per gpu worker: two of them share this machine's cores with the web and the CPU worker
        *("--gpu-env", json.dumps({"OMP_NUM_THREADS": "1"}), "--loop-options", TEST_OPTIONS),
        *("--database-url", database_url, "--redis-url", redis_url, "--step-timeout", "240"),
        *("--work", str(tmp_path / "work"), "--out", str(out)),
        *phase,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    (tmp_path / "driver.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}\n{logs(out)}"
    return out


def logs(out: Path, chars: int = 3000) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(out.glob("*.log")))


def test_throughput_rounds_and_a_killed_gpu_worker(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    phase = [
        *("--throughput", THROUGHPUT, "--kill", "--kill-at", str(KILL_AT)),
        # the GPU sitting's parity hook: run once the projects' facts exist, before the throughput rounds
        *("--after-projects", f"test -f {out}/facts-trec.json && [ ! -e {out}/throughput.jsonl ] && date > {out}/hook"),
    ]
    drive(shared_data=shared_data, model_dir=tiny_llama_dir, tmp_path=tmp_path, phase=phase)
    hook = json.loads((out / "run.json").read_text())["after_projects"]
    assert hook["exit"] == 0 and (out / "hook").is_file(), hook  # after the facts, before any throughput record
    records = [json.loads(line) for line in (out / "throughput.jsonl").read_text().splitlines()]
    rounds = [r for r in records if r["kind"] == "round"]
    context = json.dumps(rounds, indent=1)[-6000:] + logs(out)
    assert [(r["gpu_workers"], r["items"], r["kill"]) for r in rounds] == [
        (1, 300, False),
        (2, LARGEST, False),
        (2, LARGEST, True),
    ], context
    for r in rounds:
        assert_scored_whole(r, context)
    # what the round before scored was dropped, not read back (session 19's kill round, before d517c1f)
    assert all(r["cache_dropped"]["chunks"] > 0 for r in rounds[1:]), context
    killed = rounds[-1]["killed"]
    assert killed.get("worker", "").startswith("gpu-worker-") and killed["pid"] and "shard" in killed, context
    before = {s["shard"]: s for s in killed["shards_before"]}
    assert before[killed["shard"]]["status"] == "running", context  # it held a running shard when it died
    # every shard done, each once by its last holder: the killed one claimed again (attempts 2), no other
    shards = {s["shard"]: s for s in rounds[-1]["shards"]}
    assert all(s["status"] == "done" and s["path"] for s in shards.values()), context
    assert shards[killed["shard"]]["attempts"] == 2, context
    assert shards[killed["shard"]]["worker"].rpartition(":")[2] != str(killed["pid"]), context
    assert all(s["attempts"] == 1 for n, s in shards.items() if n != killed["shard"]), context
    # the same predictions as the reference round (the 2-worker round over the same items): the hf
    # engine on CPU is deterministic, and a chunk read back from the cache holds what was scored
    same = rounds[-1]["vs_reference"]
    assert same["items"] == LARGEST and same["members"] == 2, context
    assert same["argmax_agreement_members"] == 1.0 and same["max_dp"] == 0.0, context


def assert_scored_whole(record: dict[str, Any], context: str) -> None:
    """Every item on the engines (the cache dropped before), every shard done, the round past scoring."""
    assert "error" not in record and record["status_after"] in ("selecting", "labeling"), context
    assert "chunks" in record["cache_dropped"], context
    consuming = [node for node, queues in record["consumers"].items() if "gpu" in queues]
    assert len(consuming) == record["gpu_workers"], context  # the others cancelled their gpu consumer
    assert record["samples"][-1][3] == record["items"], context  # items_to_score
    assert record["members"] == 2 and record["requests"] == record["items"] * 2, context
    assert all(s["status"] == "done" for s in record["shards"]), context
    assert sum(s["items"] for s in record["shards"]) == record["items"], context
    assert "after_scoring" not in record, context
