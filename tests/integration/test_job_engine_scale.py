"""The job-engine scale bench's accounting (bench/job_engine_scale.py), small: 20 worker processes on real
PostgreSQL and Redis claim and finish 40 shards through the app's shard_run while workers holding a shard
are SIGKILLed; every shard is done once, none lost, and the killed workers' shards are taken over. A shard whose
holders were killed more than MAX_SHARD_ATTEMPTS times is given up (done; its items dead letters in the real
path): counted apart, never as lost, and only where that many kills happened."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from annotate.services.autolabel import MAX_SHARD_ATTEMPTS
from tests import redis_owner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import job_engine_scale as bench  # noqa: E402

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]


def test_killed_workers_shards_are_taken_over_and_none_is_lost_or_done_twice(owned_redis: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("worker processes share the database: PostgreSQL (DATABASE_URL=postgres://...)")
    owned = owned_redis or redis_owner.current()
    bench.ensure_result_table()
    level = bench.Level(workers=20, shards=80, sleep_ms=(100, 200), kill_every_s=0.4, db_slots=8, timeout_s=90)
    outcome = bench.run_level(level, owned.url)
    assert outcome.done == 80 and outcome.lost == 0 and outcome.done_twice == 0
    assert outcome.kills >= 1 and outcome.takeovers >= 1
    assert outcome.given_up * MAX_SHARD_ATTEMPTS <= outcome.kills  # each given-up shard lost that many holders
    assert len(outcome.db_ms) >= 80 - outcome.kills  # every finish measured but a killed worker's
