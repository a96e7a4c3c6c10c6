"""A Redis database that one test run owns, on a Redis server others use too.

A run reserves one of the numbered databases (``TEST_REDIS_DATABASES``, default 1-15; 0 is the
app's default and never taken). A database is free only if it is empty and no other connection has
it selected right now (``CLIENT LIST``: an idle Celery worker, a web server or a redis-cli that has
written nothing yet still counts as a user). The reservation itself is one Lua script, atomic on the
server: it checks that the database is empty and writes the run's claim key (with a TTL) and a
marker key in the same step, so two runs racing for one database cannot both win and nobody's keys
can appear between the check and the claim. A daemon thread keeps the claim alive while the run lasts.

Emptying is never FLUSHDB: the run deletes only keys of the kinds a test run writes (Celery's and
kombu's, the engine start lock's, its own claim; ``TEST_RUN_KEYS``), and only while the claim key
still holds its token (checked in the same script). A key of any other kind — another process that
started writing there after the claim — is left as it is, and the database, no longer empty, is
then never reserved by a test run again until its owner empties it. Releasing at the end empties
the run's keys and drops the claim.

A run that died without releasing leaves its keys and the marker behind; once its claim has expired
such a database is taken over, if every key in it is of a test run's kind."""

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


def _databases(spec: str) -> range:
    """``TEST_REDIS_DATABASES`` as "first-last" (a machine whose other apps use some numbers narrows it)."""
    first, _, last = spec.partition("-")
    return range(int(first), int(last or first) + 1)


DATABASES = _databases(os.environ.get("TEST_REDIS_DATABASES", "1-15"))  # Redis' default 16; 0 is the app's

# The keys a test run writes: Celery's queues (the app's "default", "io" and "gpu", with kombu's priority
# suffix \x06\x16N) and results, kombu's bindings and unacked bookkeeping, control replies
# (*.celery.pidbox), each worker's direct queue (<node>.dq2: config/celery.py's worker_direct), the engine
# start lock (scoring/engines/start_lock.py) and the claim itself.
# Lua: a key is a test run's when it equals one of EXACT or starts with one of PREFIXES.
TEST_RUN_KEYS = """
local EXACT = {['default']=1, ['io']=1, ['gpu']=1, ['celery']=1,
  ['unacked']=1, ['unacked_index']=1, ['unacked_mutex']=1}
local PREFIXES = {'_kombu.', 'celery-task-meta-', 'celery-taskset-meta-', 'chord-unlock', 'alann:engine-start',
  'alann:test-run:', 'default\6\22', 'io\6\22', 'gpu\6\22', 'celery\6\22'}
local function ours(key)
  if EXACT[key] then return true end
  if string.sub(key, -14) == '.celery.pidbox' then return true end
  if string.sub(key, -4) == '.dq2' or string.find(key, '.dq2\6\22', 1, true) then return true end
  for _, prefix in ipairs(PREFIXES) do
    if string.sub(key, 1, #prefix) == prefix then return true end
  end
  return false
end
-- Every key of the database (a test run's database is small). Answers ours, foreign.
local function sort_keys()
  local mine, foreign, cursor = {}, {}, '0'
  repeat
    local page = redis.call('SCAN', cursor, 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do
      if ours(key) then table.insert(mine, key) else table.insert(foreign, key) end
    end
  until cursor == '0'
  return mine, foreign
end
local function delete(keys)
  for i = 1, #keys, 500 do redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys))) end
end
"""

# KEYS: claim, marker. ARGV: token, ttl. 1 = claimed an empty database, 2 = took over a dead run's.
_CLAIM = (
    TEST_RUN_KEYS
    + """
if redis.call('DBSIZE') == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1]); return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local mine, foreign = sort_keys()
  if #foreign > 0 then return 0 end
  delete(mine)
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1]); return 2
end
return 0
"""
)
# ARGV: token, ttl, keep (1: keep the claim after emptying, 0: release). Answers the number of keys
# left (another process's), or -1 when the claim is not ours (nothing deleted).
_EMPTY = (
    TEST_RUN_KEYS
    + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local mine, foreign = sort_keys()
delete(mine)
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]); redis.call('SET', KEYS[2], ARGV[1])
end
return #foreign
"""
)
_REFRESH = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end return 0"


class NoFreeRedisDatabase(RuntimeError):
    pass


@dataclass
class OwnedRedis:
    """One claimed database: ``url`` for Celery and clients; ``flush()`` empties it of the run's keys
    while it is ours."""

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
        """Delete the run's keys (claim and marker kept); raises if the claim is no longer ours."""
        if self._empty(keep=True) < 0:
            raise NoFreeRedisDatabase(f"Redis database {self.db} is no longer claimed by this run; not flushing it")

    def release(self) -> None:
        """Stop refreshing, delete the run's keys and drop the claim (a database claimed by someone
        else is left alone; keys of another kind are kept)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._empty(keep=False)

    def _empty(self, *, keep: bool) -> int:
        return int(self.client().eval(_EMPTY, 2, CLAIM_KEY, MARKER_KEY, self.token, CLAIM_TTL_S, "1" if keep else "0"))

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


def connected_databases(server: str) -> dict[int, int]:
    """Database number → connections that have it selected now (this process's own included: a
    database this process uses is not free either)."""
    import redis

    counts: dict[int, int] = {}
    for client in redis.Redis.from_url(f"{server}/0").client_list():
        db = int(client.get("db", 0))
        counts[db] = counts.get(db, 0) + 1
    return counts


def claim(server: str = "redis://127.0.0.1:6379", *, databases: Iterable[int] = DATABASES) -> OwnedRedis:
    """Claim a free database on ``server`` (a URL without the /db) for this run, or raise
    NoFreeRedisDatabase naming why each database was passed over."""
    import redis

    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    busy: list[str] = []
    in_use = connected_databases(server)
    for db in databases:
        client = redis.Redis.from_url(f"{server}/{db}")
        holder = client.get(CLAIM_KEY)
        if not holder and in_use.get(db):
            busy.append(f"{db} ({in_use[db]} connections have it selected)")
            client.close()
            continue
        if client.eval(_CLAIM, 2, CLAIM_KEY, MARKER_KEY, token, CLAIM_TTL_S):
            owned = OwnedRedis(server=server, db=db, token=token)
            owned.start_keep_alive()
            return owned
        holder = client.get(CLAIM_KEY)
        busy.append(f"{db} (claimed by test run {holder!r})" if holder else f"{db} ({client.dbsize()} keys)")
        client.close()  # a probe left connected would count as a user of the database to other runs
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


_pointed_at: str | None = None  # the URL this process's Celery connections were last opened for


def point_celery_at(url: str) -> None:
    """Send this process's tasks (and read results) through ``url`` from now on."""
    global _pointed_at
    from django.conf import settings

    from config.celery import app

    settings.REDIS_URL = settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = url
    app.conf.broker_url = app.conf.result_backend = url
    # app.conf reads Django's settings, which pytest-django's ``settings`` fixture restores behind our
    # back: what decides whether the open connections are stale is the URL they were opened for
    if _pointed_at == url:
        return  # the open connections are already this URL's
    _pointed_at = url
    # drop every connection opened on the previous URL: kombu's pool registries (keyed by URL) are
    # emptied too, or a later switch back would be handed the closed pool ("Acquire on closed pool")
    from kombu import pools

    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    # the broadcast mailbox (app.control: ping, inspect) caches the producer pool it first used: a ping
    # after the switch would still publish through the previous URL's connections
    app.control.mailbox.__dict__.pop("producer_pool", None)
    # and the result backend (AsyncResult.get) its connection to the previous result URL
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)
