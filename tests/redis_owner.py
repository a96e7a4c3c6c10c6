"""A Redis database that one test run owns, on a Redis server others use too.

A run claims one of the numbered databases 1..15 (0 is the app's default and never taken): a Lua
script, atomic on the server, checks that the database is empty and writes the run's claim key (with
a TTL) and a marker key in the same step, so two runs racing for one database cannot both win and
nobody's keys can appear between the check and the claim. A daemon thread keeps the claim alive
while the run lasts. The run flushes only its own database, and only while the claim key still holds
its token (checked in the same script); at the end it flushes it, which also releases it.

A run that died without releasing leaves its data and the marker behind; once its claim has expired
such a database counts as free again, because the marker proves every key in it was written by a test
run. A database with any other content is never touched."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CLAIM_KEY = "alann:test-run:claim"
MARKER_KEY = "alann:test-run:marker"
CLAIM_TTL_S = 600  # a crashed run's database is free again after ten minutes
REFRESH_EVERY_S = 20.0
DATABASES = range(1, 16)  # Redis' default 16 databases; 0 is the app's own default

# KEYS: claim, marker. ARGV: token, ttl. 1 = claimed an empty database, 2 = took over a dead run's.
_CLAIM = """
if redis.call('DBSIZE') == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1]); return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('FLUSHDB')
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1]); return 2
end
return 0
"""
# ARGV: token, ttl, keep (1: keep the claim after flushing, 0: release). 1 = done, 0 = not ours.
_FLUSH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('FLUSHDB')
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1])
end
return 1
"""
_REFRESH = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end return 0"


class NoFreeRedisDatabase(RuntimeError):
    pass


@dataclass
class OwnedRedis:
    """One claimed database: ``url`` for Celery and clients; ``flush()`` empties it while it is ours."""

    server: str
    db: int
    token: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{self.server}/{self.db}"

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def flush(self) -> None:
        """Empty the database (claim and marker kept); raises if the claim is no longer ours."""
        if not self.client().eval(_FLUSH, 2, CLAIM_KEY, MARKER_KEY, self.token, CLAIM_TTL_S, "1"):
            raise NoFreeRedisDatabase(f"Redis database {self.db} is no longer claimed by this run; not flushing it")

    def release(self) -> None:
        """Stop refreshing, flush and drop the claim (a database claimed by someone else is left alone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.client().eval(_FLUSH, 2, CLAIM_KEY, MARKER_KEY, self.token, CLAIM_TTL_S, "0")

    def start_keep_alive(self) -> None:
        self._thread = threading.Thread(target=self._keep_alive, name=f"redis-claim-{self.db}", daemon=True)
        self._thread.start()

    def _keep_alive(self) -> None:
        client = self.client()
        while not self._stop.wait(REFRESH_EVERY_S):
            try:
                client.eval(_REFRESH, 1, CLAIM_KEY, self.token, CLAIM_TTL_S)
            except Exception:  # a Redis hiccup: the next tick tries again; the TTL leaves minutes
                continue


def claim(server: str = "redis://127.0.0.1:6379", *, databases: Iterable[int] = DATABASES) -> OwnedRedis:
    """Claim a free database on ``server`` (a URL without the /db) for this run, or raise
    NoFreeRedisDatabase naming why each database was passed over."""
    import redis

    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    busy: list[str] = []
    for db in databases:
        client = redis.Redis.from_url(f"{server}/{db}")
        if client.eval(_CLAIM, 2, CLAIM_KEY, MARKER_KEY, token, CLAIM_TTL_S):
            owned = OwnedRedis(server=server, db=db, token=token)
            owned.start_keep_alive()
            return owned
        holder = client.get(CLAIM_KEY)
        busy.append(f"{db} (claimed by test run {holder!r})" if holder else f"{db} ({client.dbsize()} keys)")
    raise NoFreeRedisDatabase(f"no free Redis database on {server}: {', '.join(busy)}")


_current: OwnedRedis | None = None
_unavailable = "no Redis database claimed for this run"


def current() -> OwnedRedis:
    """The database this run claimed (tests/conftest.py claims it once per run)."""
    if _current is None:
        raise NoFreeRedisDatabase(_unavailable)
    return _current


def claim_for_run(server: str) -> OwnedRedis | None:
    """Claim this run's database and point the test process, and every subprocess started from it
    (REDIS_URL: live servers, Celery workers), at it. None when Redis cannot be reached: then the
    tests that need it fail with the reason (``current()``)."""
    global _current, _unavailable
    import redis

    try:
        _current = claim(server)
    except redis.ConnectionError as exc:
        _unavailable = f"Redis at {server} cannot be reached ({exc}); make services starts it"
        return None
    os.environ["REDIS_URL"] = _current.url
    point_celery_at(_current.url)
    return _current


def release_for_run() -> None:
    global _current
    if _current is not None:
        _current.release()
        _current = None


def point_celery_at(url: str) -> None:
    """Send this process's tasks (and read results) through ``url`` from now on."""
    from django.conf import settings

    from config.celery import app

    settings.REDIS_URL = settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = url
    if app.conf.broker_url == url and app.conf.result_backend == url:
        return  # closing the pools here would break kombu's per-URL producer pool registry
    app.conf.broker_url = app.conf.result_backend = url
    if app._pool is not None:  # drop connections opened on the previous URL
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None
