"""The auto-labelling job engine past one machine (issue 31): hundreds of workers claiming and finishing
shards of one run through the app's own code, with random SIGKILLs, on real PostgreSQL and Redis.

    python bench/job_engine_scale.py [--workers 25,50,100,200,400] [--shards 2000] [--kill-every 2]

Each level is one AutolabelRun of ``--shards`` shards. ``N`` worker processes (forked from this one,
Django loaded once) pop shard messages from a Redis list and call ``annotate.services.autolabel.shard_run``
itself: the claim (annotate/services/jobs.py, conditional UPDATEs, a dead holder's shard taken over),
the per-worker cap, the backpressure feed that enqueues the next shards, the finish. Only the scoring is a
stand-in (``stand_in_shard``): it sleeps 50–200 ms, then writes the shard's result row in a transaction
fenced by the real path's ``hold_shard`` and marks the shard done with the real path's conditional UPDATE;
like the real path it skips a shard whose result is already written (``_shard_items`` skips decided items).
Every ``--kill-every`` seconds one worker process (one holding a shard, when one does) is SIGKILLed and a new
one started; the new one calls ``autolabel_resume_all`` first, as a Celery worker's start does, which
re-enqueues the dead worker's shard.

Why processes and a Redis list, not Celery: the deployed gpu worker runs one task at a time per process,
and a claim names its holder by ``host:pid`` (annotate/services/workers.py), so the worker unit is a
process; a Celery threads pool would put 25–50 holders behind one pid, and a worker counts a claim of its
own pid as dead (a retry of itself), so two threads of one process could both run a shard. Booting 400
Celery workers on this 2-core machine would take minutes; forked processes start in milliseconds. A
popped message is not acknowledged (as with Celery's ``acks_late`` and the 1 h visibility timeout, a
killed worker's message does not come back within the run): only the resume path recovers its shard.

PostgreSQL connections: the server here allows 100 in all (shared with CI and other work), so a worker
holds a connection only around its DB calls: ``--db-slots`` flock'ed slots (a kernel lock, freed when a
killed holder dies) play a connection pooler's part, and the connection is closed while the stand-in
"scores". Waiting for a slot is reported apart from the DB time.

Prints one table (shards total, done, lost, given up, done twice, kills, takeovers, claim overhead, shards/s) and
writes the raw numbers with the git commit and the options to bench/raw/<today>/job-engine-scale-<commit>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULT_TABLE = "bench_shard_result"  # one row per result write: two rows for a shard = done twice
QUEUE = "alann:bench:job-engine:queue"
STATS = "alann:bench:job-engine:stats"
STOP = "alann:bench:job-engine:stop"


@dataclass(frozen=True)
class Level:
    """One run: ``workers`` processes on ``shards`` shards."""

    workers: int
    shards: int
    sleep_ms: tuple[int, int] = (50, 200)  # the scoring stand-in per shard, uniform
    kill_every_s: float = 2.0  # one random worker SIGKILLed this often (0: never)
    db_slots: int = 40  # connections held at once: the server allows 100 for everyone on it
    timeout_s: float = 120.0
    seed: int = 0


@dataclass
class Outcome:
    workers: int
    shards: int
    done: int = 0
    lost: int = 0  # no result written and not given up (when timed_out: not finished in time, not necessarily lost)
    # done without a result after more than MAX_SHARD_ATTEMPTS claims: the app's _give_up (its workers died each
    # time), whose items become dead letters in the real path (here _shard_items has none): accounted, not lost
    given_up: int = 0
    timed_out: bool = False
    spawn_s: float = 0.0  # forking the workers, before the run is made
    done_twice: int = 0
    kills: int = 0
    takeovers: int = 0
    refused_claims: int = 0  # a message whose shard someone else held or had finished
    messages: int = 0
    max_queue: int = 0
    seconds: float = 0.0
    shards_per_s: float = 0.0
    # per finished shard, milliseconds: claim + cap + finish + feed (all but the stand-in and slot waits),
    # of which connecting and inside cursor.execute; waiting for a DB slot
    db_ms: list[float] = field(default_factory=list)
    connect_ms: list[float] = field(default_factory=list)
    execute_ms: list[float] = field(default_factory=list)
    slot_wait_ms: list[float] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        import numpy as np

        series = ("db_ms", "connect_ms", "execute_ms", "slot_wait_ms", "queries")
        row = {k: v for k, v in asdict(self).items() if k not in series}
        for name in series:
            values = np.asarray(getattr(self, name) or [0.0])
            row[f"{name}_mean"] = round(float(values.mean()), 2)
            row[f"{name}_p95"] = round(float(np.percentile(values, 95)), 2)
        return row


# -- the worker process ------------------------------------------------------------------------------


class DbSlots:
    """At most ``n`` processes inside DB work at once: one flock'ed file each (the kernel frees a killed
    holder's lock). Plays pgbouncer's part on a server with 100 connections for everyone."""

    def __init__(self, directory: Path, n: int) -> None:
        self.paths = [directory / f"slot-{i}" for i in range(n)]
        for path in self.paths:
            path.touch()
        self.fd: int | None = None
        self.waited = 0.0
        self.connecting = 0.0

    def acquire(self) -> None:
        started = time.perf_counter()
        order = random.sample(self.paths, len(self.paths))
        for path in order:
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.fd = fd
            break
        else:  # all busy: wait on one
            self.fd = os.open(order[0], os.O_RDWR)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.waited += time.perf_counter() - started
        from django.db import connection

        started = time.perf_counter()
        connection.ensure_connection()
        self.connecting += time.perf_counter() - started

    def release(self) -> None:
        from django.db import connection

        connection.close()  # a pooler's connection goes back with the slot
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()


@dataclass
class WorkerState:
    slots: DbSlots
    sleep_ms: tuple[int, int]
    slept: float = 0.0
    queries: int = 0
    in_queries: float = 0.0  # seconds inside cursor.execute: the server's share (round trips, locks)

    def reset(self) -> None:
        self.slept, self.queries, self.in_queries = 0.0, 0, 0.0
        self.slots.waited = self.slots.connecting = 0.0

    def timed(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.queries += 1
            self.in_queries += time.perf_counter() - started


STATE: list[WorkerState] = []  # the one of this worker process


def stand_in_shard(row: Any) -> None:
    """``_run_shard`` with the scoring replaced by a sleep: skip a shard whose result exists (the real
    path skips decided items), else sleep without a connection, write the result row, then the real
    path's conditional UPDATE to done."""
    from django.db import connection, transaction
    from django.db.models import F

    from annotate.models import AutolabelShard
    from annotate.services import autolabel as auto
    from annotate.services.workers import worker_id

    state = STATE[0]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {RESULT_TABLE} WHERE run_id = %s AND shard = %s", [row.run_id, row.shard])
        written = cursor.fetchone() is not None
    seconds = 0.0
    if not written:
        seconds = random.uniform(*state.sleep_ms) / 1000
        state.slots.release()
        time.sleep(seconds)
        state.slept += seconds
        state.slots.acquire()
        with transaction.atomic(), connection.cursor() as cursor:  # the last chunk's commit, fenced as the real one
            auto.hold_shard(row.id, worker_id())
            cursor.execute(
                f"INSERT INTO {RESULT_TABLE} (run_id, shard, worker, at) VALUES (%s, %s, %s, %s)",
                [row.run_id, row.shard, worker_id(), time.time()],
            )
    AutolabelShard.objects.filter(id=row.id, worker=worker_id(), status=AutolabelShard.Status.RUNNING).update(
        status=AutolabelShard.Status.DONE, seconds=F("seconds") + seconds, error=""
    )


def redis_dispatch(client: Any) -> Any:
    def dispatch(step: str, *args: Any, countdown: float | None = None) -> None:
        client.rpush(QUEUE, json.dumps([step, *args]))

    return dispatch


def worker_main(redis_url: str, slots_dir: Path, level: Level, *, resume: bool) -> None:
    """A worker process: resume (``resume``: a replacement; as a Celery worker start does), then take
    messages until told to stop."""
    import redis
    from django.db import OperationalError, connection

    from annotate.services import autolabel as auto

    random.seed(os.getpid() ^ level.seed)
    client = redis.Redis.from_url(redis_url)
    dispatch = redis_dispatch(client)
    slots = DbSlots(slots_dir, level.db_slots)
    state = WorkerState(slots, level.sleep_ms)
    STATE[:] = [state]
    connection.execute_wrappers.append(state.timed)  # kept across the reconnects
    auto._run_shard = stand_in_shard  # type: ignore[assignment]
    auto._shard_items = lambda row: []  # type: ignore[assignment]  # _give_up: nothing to dead-letter
    if resume:
        with slots.held():
            auto.autolabel_resume_all(dispatch=dispatch)
    while not client.exists(STOP):
        message = client.blpop([QUEUE], timeout=1)
        if message is None:
            continue
        step, run_id, shard = json.loads(message[1])
        state.reset()
        started = time.perf_counter()
        try:
            with slots.held():
                after = auto.shard_run(run_id=run_id, shard=shard, dispatch=dispatch)
        except OperationalError:  # a transient DB error: Celery's autoretry sends the message again
            time.sleep(0.5)
            dispatch(step, run_id, shard)
            continue
        wall = time.perf_counter() - started
        finished = bool(state.slept)
        db_ms = (wall - state.slept - slots.waited) * 1e3
        ms = [db_ms, slots.waited * 1e3, slots.connecting * 1e3, state.in_queries * 1e3]
        client.rpush(STATS, json.dumps([finished, after.status, state.queries, *ms]))


# -- the driver ----------------------------------------------------------------------------------------


def setup_database(url: str) -> None:
    """Point Django at ``url`` and migrate it (this process's connection only)."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-job-engine-scale")  # DEBUG off: no query log in the workers
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    ensure_result_table()


def ensure_result_table() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {RESULT_TABLE} "
            "(run_id bigint NOT NULL, shard integer NOT NULL, worker varchar(200) NOT NULL, at double precision)"
        )


def make_run(level: Level, dispatch: Any) -> int:
    """A running AutolabelRun of ``level.shards`` pending shards, its first shards enqueued by the app's
    own feed (``max_shards_in_flight`` twice the workers: nobody waits for work)."""
    from annotate.models import AutolabelRun, AutolabelShard, Calibration, Project
    from annotate.services import autolabel as auto

    project = Project.objects.create(name=f"job-engine-scale {time.time_ns()}")
    calibration = Calibration.objects.create(project=project, status="done")
    run = AutolabelRun.objects.create(
        project=project,
        calibration=calibration,
        status="running",
        n_shards=level.shards,
        max_shards_in_flight=min(32000, 2 * level.workers),
        shard_items=2000,
    )
    AutolabelShard.objects.bulk_create(
        [AutolabelShard(run=run, shard=s, n_items=2000) for s in range(level.shards)], batch_size=2000
    )
    auto._feed(run, dispatch)
    return run.id


def spawn(redis_url: str, slots_dir: Path, level: Level, *, resume: bool = False) -> int:
    from django.db import connections

    connections.close_all()  # a child must not share this process's socket
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            worker_main(redis_url, slots_dir, level, resume=resume)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    return pid


def run_level(level: Level, redis_url: str) -> Outcome:
    import redis

    from annotate.models import AutolabelRun

    client = redis.Redis.from_url(redis_url)
    client.delete(QUEUE, STATS, STOP)
    rng = random.Random(level.seed)
    outcome = Outcome(workers=level.workers, shards=level.shards)
    with tempfile.TemporaryDirectory(prefix="job-engine-slots-") as tmp:
        slots_dir = Path(tmp)
        DbSlots(slots_dir, level.db_slots)
        gc.freeze()  # the forked workers share this process's objects without copying their pages
        started = time.perf_counter()
        workers = [spawn(redis_url, slots_dir, level) for _ in range(level.workers)]  # idle: no run yet
        outcome.spawn_s = round(time.perf_counter() - started, 2)
        run_id = make_run(level, redis_dispatch(client))
        started = time.perf_counter()
        next_kill = started + level.kill_every_s
        try:
            while time.perf_counter() - started < level.timeout_s:
                time.sleep(0.1)
                outcome.max_queue = max(outcome.max_queue, int(client.llen(QUEUE)))
                if AutolabelRun.objects.filter(id=run_id, status="done").exists():
                    break
                if level.kill_every_s and time.perf_counter() >= next_kill:
                    victim = rng.choice(_holding(run_id, workers) or workers)  # mid-shard when one is
                    workers.remove(victim)
                    os.kill(victim, signal.SIGKILL)
                    os.waitpid(victim, 0)  # reaped: its pid is dead to worker_alive, not a zombie
                    outcome.kills += 1
                    workers.append(spawn(redis_url, slots_dir, level, resume=True))
                    next_kill += level.kill_every_s
            else:
                outcome.timed_out = True
            outcome.seconds = time.perf_counter() - started
        finally:
            client.set(STOP, 1)
            _reap(workers, within_s=10.0)
    _account(outcome, run_id, client)
    client.delete(QUEUE, STATS, STOP)
    return outcome


def _reap(workers: list[int], *, within_s: float) -> None:
    """Wait for the workers to stop (each checks the stop key every second); SIGKILL any still there."""
    deadline = time.monotonic() + within_s
    left = set(workers)
    while left and time.monotonic() < deadline:
        left = {pid for pid in left if os.waitpid(pid, os.WNOHANG) == (0, 0)}
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _holding(run_id: int, workers: list[int]) -> list[int]:
    """The worker processes holding a running shard of the run."""
    from annotate.models import AutolabelShard

    held = AutolabelShard.objects.filter(run_id=run_id, status="running").values_list("worker", flat=True)
    pids = {int(w.rpartition(":")[2]) for w in held if w.rpartition(":")[2].isdigit()}
    return [pid for pid in workers if pid in pids]


def _account(outcome: Outcome, run_id: int, client: Any) -> None:
    from django.db import connection
    from django.db.models import F, Sum

    from annotate.models import AutolabelShard

    shards = AutolabelShard.objects.filter(run_id=run_id)
    outcome.done = shards.filter(status="done").count()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT shard, COUNT(*) FROM {RESULT_TABLE} WHERE run_id = %s GROUP BY shard", [run_id])
        writes = dict(cursor.fetchall())
    from annotate.services.autolabel import MAX_SHARD_ATTEMPTS

    exhausted = shards.filter(status="done", attempts__gt=MAX_SHARD_ATTEMPTS)
    gave_up = set(exhausted.values_list("shard", flat=True)) - set(writes)
    outcome.given_up = len(gave_up)
    outcome.lost = sum(1 for s in range(outcome.shards) if s not in writes and s not in gave_up)
    outcome.done_twice = sum(1 for n in writes.values() if n > 1)
    outcome.takeovers = int(shards.filter(attempts__gt=1).aggregate(n=Sum(F("attempts") - 1))["n"] or 0)
    for raw in client.lrange(STATS, 0, -1):
        finished, _status, queries, db_ms, wait_ms, connect_ms, execute_ms = json.loads(raw)
        outcome.messages += 1
        if finished:
            outcome.db_ms.append(db_ms)
            outcome.slot_wait_ms.append(wait_ms)
            outcome.connect_ms.append(connect_ms)
            outcome.execute_ms.append(execute_ms)
            outcome.queries.append(queries)
        else:
            outcome.refused_claims += 1
    outcome.shards_per_s = round(outcome.done / outcome.seconds, 1) if outcome.seconds else 0.0


# -- what 400 million items would cost: storage per row, and the feed on a 200,000-shard run ---------------

TREC_LABELS = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


def storage_probe(n: int, texts: list[str], out_dir: Path) -> dict[str, Any]:
    """``n`` items and their AutoLabel rows (6 classes, 64-hex hashes as the app writes them) in
    PostgreSQL: heap, TOAST and index bytes per row; the same decisions and texts as zstd Parquet."""
    import hashlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from django.db import connection

    from annotate.models import AutoLabel, AutolabelRun, Calibration, Item, Label, Project

    rng = np.random.default_rng(0)
    project = Project.objects.create(name=f"storage-probe {time.time_ns()}")
    labels = [Label.objects.create(project=project, name=c, code=c[0], order=i) for i, c in enumerate(TREC_LABELS)]
    run = AutolabelRun.objects.create(project=project, calibration=Calibration.objects.create(project=project))
    digest = [hashlib.sha256(f"{k}".encode()).hexdigest() for k in ("prompt", "adapters", "predictor")]
    probs = rng.dirichlet(np.full(len(labels), 0.3), size=n).round(6)
    for start in range(0, n, 5000):
        span = range(start, min(n, start + 5000))
        items = Item.objects.bulk_create(
            [
                Item(
                    project=project,
                    external_id=f"x{i}",
                    text=(t := f"{texts[i % len(texts)]} #{i}"),
                    text_hash=hashlib.sha256(t.encode()).hexdigest(),
                )
                for i in span
            ]
        )
        AutoLabel.objects.bulk_create(
            [
                AutoLabel(
                    item=item,
                    prompt_hash=digest[0],
                    adapter_set_hash=digest[1],
                    model_version=digest[2],
                    run=run,
                    label=labels[int(probs[i].argmax())],
                    confidence=float(probs[i].max()),
                    probs=probs[i].tolist(),
                    tier="model",
                    decision="accepted" if probs[i].max() > 0.9 else "escalated",
                )
                for i, item in zip(span, items, strict=True)
            ]
        )
    sizes: dict[str, Any] = {"rows": n}
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE annotate_autolabel")
        cursor.execute("VACUUM ANALYZE annotate_item")
        for table in ("annotate_autolabel", "annotate_item"):
            cursor.execute(
                "SELECT pg_relation_size(%s), pg_total_relation_size(%s) - pg_relation_size(%s) - pg_indexes_size(%s),"
                " pg_indexes_size(%s)",
                [table] * 5,
            )
            heap, toast, indexes = cursor.fetchone()
            sizes[table] = {"heap": heap / n, "toast": toast / n, "indexes": indexes / n}
    decisions = pa.table(
        {
            "item_id": pa.array(np.arange(n, dtype=np.int64)),
            "label": pa.array(probs.argmax(axis=1).astype(np.int16)),
            "confidence": pa.array(probs.max(axis=1).astype(np.float32)),
            "probs": pa.array(list(probs.astype(np.float32))),
            "tier": pa.array(["model"] * n).dictionary_encode(),
            "decision": pa.array(np.where(probs.max(axis=1) > 0.9, "accepted", "escalated")).dictionary_encode(),
            "prompt_hash": pa.array([digest[0]] * n).dictionary_encode(),
            "adapter_set_hash": pa.array([digest[1]] * n).dictionary_encode(),
            "model_version": pa.array([digest[2]] * n).dictionary_encode(),
        }
    )
    for name, table in (
        ("decisions", decisions),
        ("texts", pa.table({"text": [f"{texts[i % len(texts)]} #{i}" for i in range(n)]})),
    ):
        path = out_dir / f"{name}.parquet"
        pq.write_table(table, path, compression="zstd")
        sizes[f"parquet_{name}"] = path.stat().st_size / n
    return sizes  # the database is dropped at the end


def feed_probe(n_shards: int, done_shares: tuple[float, ...] = (0.5, 0.99)) -> dict[str, Any]:
    """A run of ``n_shards`` shards (400 million items / 2,000 per shard = 200,000) with a share done:
    milliseconds of one claim, one ``_feed`` (which every finished shard calls) and ``_maybe_finish``."""
    from annotate.models import AutolabelRun, AutolabelShard, Calibration, Project
    from annotate.services import autolabel as auto
    from annotate.services import jobs

    project = Project.objects.create(name=f"feed-probe {time.time_ns()}")
    run = AutolabelRun.objects.create(
        project=project,
        calibration=Calibration.objects.create(project=project),
        status="running",
        n_shards=n_shards,
        max_shards_in_flight=256,
    )
    for start in range(0, n_shards, 10000):
        AutolabelShard.objects.bulk_create(
            [AutolabelShard(run=run, shard=s) for s in range(start, min(n_shards, start + 10000))]
        )
    shards = AutolabelShard.objects.filter(run=run)
    timings: dict[str, Any] = {"shards": n_shards}
    for share in done_shares:
        cut = int(share * n_shards)
        shards.filter(shard__lt=cut).update(status="done")
        shards.filter(shard__gte=cut, shard__lt=cut + 255).update(status="running", worker="elsewhere:1")
        feed, claim, finish = [], [], []
        for k in range(5):
            started = time.perf_counter()
            jobs.claim(shards.filter(shard=cut + k), me="probe:1")
            claim.append(time.perf_counter() - started)
            shards.filter(shard=cut + k).update(status="done")  # one finished: the feed has room for one
            started = time.perf_counter()
            auto._feed(run, auto.InlineQueue())
            feed.append(time.perf_counter() - started)
            started = time.perf_counter()
            auto._maybe_finish(run.id)
            finish.append(time.perf_counter() - started)
        timings[f"done {share:.0%}"] = {
            "claim_ms": round(1e3 * min(claim), 2),
            "feed_ms": round(1e3 * min(feed), 2),
            "maybe_finish_ms": round(1e3 * min(finish), 2),
        }
    AutolabelRun.objects.filter(id=run.id).update(status="done")
    return timings


# -- CLI -------------------------------------------------------------------------------------------------


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| workers | shards | done | lost | given up | done twice | kills | takeovers | refused claims | max queue "
        "| claim+finish ms mean / p95 | of it connect / execute ms | queries | slot wait ms mean / p95 | shards/s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['shards']} | {r['done']} | {r['lost']} | {r.get('given_up', 0)} "
            f"| {r['done_twice']} | {r['kills']} "
            f"| {r['takeovers']} | {r['refused_claims']} | {r['max_queue']} | {r['db_ms_mean']} / {r['db_ms_p95']} "
            f"| {r['connect_ms_mean']} / {r['execute_ms_mean']} | {r['queries_mean']} "
            f"| {r['slot_wait_ms_mean']} / {r['slot_wait_ms_p95']} | {r['shards_per_s']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="25,50,100,200,400", help="concurrency levels, comma-separated")
    parser.add_argument("--shards", type=int, default=2000, help="shards per level")
    parser.add_argument("--sleep-ms", default="50,200", help="the scoring stand-in per shard: uniform min,max")
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between SIGKILLs (0: none)")
    parser.add_argument("--db-slots", type=int, default=40, help="DB connections held at once (pooler size)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per level at most")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432", help="PostgreSQL server")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="Redis server (a database is claimed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage-rows", type=int, default=100000, help="rows of the storage probe (0: skip)")
    parser.add_argument("--feed-shards", type=int, default=200000, help="shards of the feed probe (0: skip)")
    parser.add_argument("--texts", default=str(ROOT.parent / "shared" / "data" / "trec" / "train.csv"))
    parser.add_argument("--out", default="", help="raw JSON (default bench/raw/<today>/job-engine-scale-<commit>.json)")
    args = parser.parse_args()
    low, high = (int(x) for x in args.sleep_ms.split(","))
    levels = [
        Level(int(n), args.shards, (low, high), args.kill_every, args.db_slots, args.timeout, args.seed)
        for n in args.workers.split(",")
    ]
    from rawfiles import raw_path

    from tests import redis_owner

    commit = git_commit()
    name = f"bench_job_engine_{os.getpid()}_{time.time_ns() % 10**8}"
    admin = ["psql", f"{args.pg}/postgres", "-q", "-c"]
    subprocess.run([*admin, f"CREATE DATABASE {name} CONNECTION LIMIT {args.db_slots + 10}"], check=True)
    owned = redis_owner.claim(args.redis)
    owned.start_keep_alive()
    rows: list[dict[str, Any]] = []
    probes: dict[str, Any] = {}
    try:
        setup_database(f"{args.pg}/{name}")
        for level in levels:
            outcome = run_level(level, owned.url)
            rows.append({**outcome.summary(), "level": asdict(level)})
            print(table(rows[-1:]), flush=True)
        if args.feed_shards:
            probes["feed"] = feed_probe(args.feed_shards)
            print("feed probe:", json.dumps(probes["feed"]), flush=True)
        if args.storage_rows:
            import csv

            with open(args.texts, newline="") as f:
                texts = [r["text"] for r in csv.DictReader(f)]
            with tempfile.TemporaryDirectory() as tmp:
                probes["storage"] = storage_probe(args.storage_rows, texts, Path(tmp))
            print("storage probe (bytes per row):", json.dumps(probes["storage"]), flush=True)
    finally:
        subprocess.run([*admin, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)
        owned.client().delete(QUEUE, STATS, STOP)
        owned.release()
    print(table(rows))
    out = Path(args.out) if args.out else raw_path(f"job-engine-scale-{commit}.json")
    out.write_text(
        json.dumps({"commit": commit, "options": vars(args), "levels": rows, "probes": probes}, indent=1) + "\n"
    )
    print(f"raw: {out}")


if __name__ == "__main__":
    main()
