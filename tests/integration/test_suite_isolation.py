"""The test suite owns what it touches: its Redis database is one it claimed (empty, unclaimed, not
selected by anyone), it never flushes one it did not claim nor deletes keys another process wrote into
its own, its PostgreSQL test database is its own (two runs at once both pass), and under CI=true a
missing prerequisite fails the run instead of skipping the tests that need it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from django.db import connection

from tests import redis_owner
from tests.integration.round_helpers import live_loop
from tests.live_server import postgres_url

pytestmark = [pytest.mark.celery]
ROOT = Path(__file__).resolve().parents[2]
SERVER = "redis://127.0.0.1:6379"
OLD_FIXED_DATABASES = (5, 6, 7, 8)  # the numbers the suite used to hard-code and FLUSHDB


def _free(db: int) -> bool:
    client = redis.Redis.from_url(f"{SERVER}/{db}")
    try:
        return bool(client.dbsize() == 0)
    finally:
        client.close()  # a probe left connected would make the database look in use


def _a_free_database() -> int:
    in_use = {int(c.get("db", 0)) for c in redis.Redis.from_url(SERVER).client_list()}
    free = [db for db in redis_owner.DATABASES if db not in in_use and _free(db)]
    assert free, "no free Redis database to try this on"
    return free[-1]


def _as_other_run(db: int) -> redis_owner.OwnedRedis | None:
    """Claim ``db`` as if a second test run (or anyone) held it, with a key of its own in it."""
    try:
        other = redis_owner.claim(SERVER, databases=[db])
    except redis_owner.NoFreeRedisDatabase:
        return None
    other.client().set("someone-elses-key", "keep me")
    return other


def test_the_run_uses_a_database_it_claimed() -> None:
    owned = redis_owner.current()
    client = owned.client()
    assert os.environ["REDIS_URL"] == owned.url and owned.db != 0
    assert client.get(redis_owner.CLAIM_KEY) == owned.token.encode()
    assert 0 < client.ttl(redis_owner.CLAIM_KEY) <= redis_owner.CLAIM_TTL_S


def test_live_loop_leaves_other_runs_databases_alone(tmp_path: Path, settings: Any, django_db_blocker: Any) -> None:
    candidates = [db for db in OLD_FIXED_DATABASES if _free(db)] or [
        db for db in redis_owner.DATABASES if db != redis_owner.current().db and _free(db)
    ][:1]
    others = [o for o in (_as_other_run(db) for db in candidates) if o is not None]
    assert others, "no Redis database was free to stand for another run's; the test proves nothing"
    try:
        with live_loop(tmp_path, settings, django_db_blocker):
            pass
        for other in others:
            assert other.client().get("someone-elses-key") == b"keep me", f"db {other.db} was flushed"
    finally:
        for other in others:
            other.client().delete("someone-elses-key")  # release keeps keys of other kinds: it is ours to remove
            other.release()


def test_a_database_with_foreign_keys_is_never_claimed_or_flushed() -> None:
    db = redis_owner.claim(SERVER)  # a free database, ours
    client = db.client()
    client.delete(redis_owner.CLAIM_KEY, redis_owner.MARKER_KEY)
    client.set("not-a-test-run", "1")  # now it looks like anyone's database in use
    client.close()
    try:
        with pytest.raises(redis_owner.NoFreeRedisDatabase, match=rf"{db.db} \(1 keys\)"):
            redis_owner.claim(SERVER, databases=[db.db])
        with pytest.raises(redis_owner.NoFreeRedisDatabase, match="no longer claimed by this run"):
            db.flush()
        assert client.get("not-a-test-run") == b"1"
    finally:
        client.delete("not-a-test-run")
        db.release()


def test_a_dead_runs_database_is_taken_over_once_its_claim_expired() -> None:
    dead = redis_owner.claim(SERVER)
    dead._stop.set()
    assert dead._thread is not None
    dead._thread.join()  # its keep-alive connection closes: the process is gone
    client = dead.client()
    client.set("celery-task-meta-leftover", "x")
    with pytest.raises(redis_owner.NoFreeRedisDatabase, match="claimed by test run"):
        redis_owner.claim(SERVER, databases=[dead.db])  # claim still live: not free
    client.delete(redis_owner.CLAIM_KEY)  # as if its TTL ran out
    client.close()
    heir = redis_owner.claim(SERVER, databases=[dead.db])
    try:
        assert heir.db == dead.db and client.get("celery-task-meta-leftover") is None
        assert client.dbsize() == 2  # the heir's claim and marker
    finally:
        heir.release()
    assert client.dbsize() == 0


def test_keys_another_process_writes_into_the_runs_database_survive_its_flush_and_release() -> None:
    """Issue 34: emptying the run's database deleted everything in it, also what another process
    started writing there after the claim. Only the kinds of keys a test run writes go."""
    owned = redis_owner.claim(SERVER)
    client = owned.client()
    try:
        client.set("celery-task-meta-1234", "a result of this run")
        client.rpush("default", "a message of this run")
        client.set("someone-elses-key", "keep me")  # another process, after the claim
        owned.flush()
        assert client.get("someone-elses-key") == b"keep me"
        assert not client.exists("celery-task-meta-1234", "default")
        owned.release()
        assert client.get("someone-elses-key") == b"keep me" and not client.exists(redis_owner.CLAIM_KEY)
        client.close()
        with pytest.raises(redis_owner.NoFreeRedisDatabase, match=rf"{owned.db} \(1 keys\)"):
            redis_owner.claim(SERVER, databases=[owned.db])  # not free: its keys are someone else's
    finally:
        client.delete("someone-elses-key")
        owned.release()


def test_an_empty_database_that_another_connection_has_selected_is_not_claimed() -> None:
    """Issue 34: an empty database is not a free one; a worker or server that has written nothing yet
    is using it too."""
    db = _a_free_database()
    user = redis.Redis.from_url(f"{SERVER}/{db}")
    user.ping()  # connected, database selected, nothing written
    try:
        with pytest.raises(redis_owner.NoFreeRedisDatabase, match=rf"{db} \(1 connections have it selected\)"):
            redis_owner.claim(SERVER, databases=[db])
    finally:
        user.close()
    redis_owner.claim(SERVER, databases=[db]).release()  # free again once its user is gone


def test_runs_racing_for_databases_each_get_their_own() -> None:
    got: list[redis_owner.OwnedRedis] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def racer() -> None:
        start.wait()
        try:
            got.append(redis_owner.claim(SERVER))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors and len({o.db for o in got}) == 4
        assert redis_owner.current().db not in {o.db for o in got}
    finally:
        for owned in got:
            owned.release()


def _postgres_base() -> str:
    url = postgres_url()
    if url is None:
        pytest.skip("PostgreSQL only (DATABASE_URL=postgres://...; make test runs it)")
    return urlparse(url).path.lstrip("/")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_postgres_test_database_is_this_runs_own() -> None:
    """Issue 34: every run used test_<name>, so two runs at once collided."""
    base = _postgres_base()
    name = connection.settings_dict["NAME"]
    assert name != f"test_{base}" and name.startswith(f"test_{base}_{os.getpid()}_"), name


@pytest.mark.postgres
@pytest.mark.django_db
def test_two_runs_at_once_on_one_postgres_server_both_pass() -> None:
    """Issue 34: two runs 0.5 s apart failed with "database already exists"; a few seconds apart, one
    dropped the database under the other. Each now creates and drops its own."""
    base, url = _postgres_base(), postgres_url()
    target = "tests/integration/test_membership.py"  # small, and every test of it hits the database
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"DATABASE_URL": str(url)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "postgres", target]
    runs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    runs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0 and " passed" in output, output[-3000:]
    with connection.cursor() as cursor:  # the runs' databases are gone with them
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [f"test_{base}_%"])
        left = {row[0] for row in cursor.fetchall()}
    assert not {name for name in left if any(name.startswith(f"test_{base}_{run.pid}_") for run in runs)}


IMPORTS, LEAD, NO_CHROMIUM = "tests/integration/test_imports.py", "tests/e2e/test_lead.py", "/nonexistent/chromium"


def _pytest(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | env
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("target", "env", "reason"),
    [
        (f"{IMPORTS}::test_trec_imports_with_gold_labels", {"DATA_DIR": "/nonexistent"}, "shared data sets not found"),
        (f"{LEAD}::test_annotator_gets_403_on_a_lead_page", {"CHROMIUM": NO_CHROMIUM}, "no system Chromium"),
        ("tests/e2e/test_annotator.py", {"CHROMIUM": NO_CHROMIUM}, "not installed (make browser)"),
    ],
)
def test_missing_prerequisites_skip_locally_and_fail_under_ci(target: str, env: dict[str, str], reason: str) -> None:
    local = _pytest([target, "-x"], CI="", **env)
    assert local.returncode == 0 and "skipped" in local.stdout and reason in local.stdout, local.stdout[-3000:]
    ci = _pytest([target, "-x"], CI="true", **env)
    assert ci.returncode != 0, ci.stdout[-3000:]
    assert reason in ci.stdout and "CI=true: a missing prerequisite is an error" in ci.stdout, ci.stdout[-3000:]
