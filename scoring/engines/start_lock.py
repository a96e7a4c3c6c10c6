"""Engine starts take turns per GPU, across every gpu worker of a deployment.

Several gpu workers share a GPU (up to three vLLM engines per H200, bench/RESULTS.md). vLLM measures
free GPU memory while it starts and sizes its KV cache from it; four engines started at once failed
engine-core initialisation on the H200, started one after another they ran side by side. So a start
holds a lock named after the GPU it will use.

The lock lives in Redis (the broker every worker already reaches), because in the docker-compose
deployment each gpu-worker container has its own /tmp: a file lock there serialises nothing. The GPU
is named by its UUID (NVML), which is the same in every container and on the host, whatever index
the container sees it under. A holder keeps its key alive from a thread; one killed mid-start
(SIGKILL, the OOM killer) stops refreshing and its key expires after the TTL, so it never blocks the
others for longer. Release is compare-and-delete on the holder's token: a start whose key expired
(it stalled past the TTL) never deletes the next holder's key.

Only where no Redis URL is configured at all (a single-machine run without a broker, the eager GPU
simulation) do starts fall back to a file lock in ALANN_ENGINE_LOCK_DIR (default: the temp dir),
which serialises the processes of one machine only.

After the first (``after_first``, the vLLM engine option ``parallel_start``): once an engine of the same
configuration (model and options: ``config``) has started on a GPU, a successful start leaves a mark beside
the lock (a Redis key with a TTL, or a file), and later starts of that configuration on that GPU take no
turn: they start side by side, on the compile cache the first one filled, and the caller starts them with
a fixed KV cache (no memory profiling for another start's allocations to upset). A start that is waiting
for the lock when the mark appears stops waiting. The first start of a configuration still takes its
turn, so a cold compile cache is never filled by several starts at once.

Settings (environment, read once per start by ``StartLockOptions.from_env``):
ALANN_ENGINE_LOCK_URL    Redis URL of the lock (default: REDIS_URL; neither set: the file lock)
ALANN_ENGINE_LOCK_KEY    name of the GPU instead of its NVML UUID (e.g. where NVML is not visible)
ALANN_ENGINE_LOCK_TTL_S  seconds a dead holder keeps the lock (default 30)
ALANN_ENGINE_LOCK_WAIT_S seconds a start waits for the lock before it fails (default 1800)
ALANN_ENGINE_LOCK_DIR    folder of the file-lock fallback (default: the temp dir)
ALANN_ENGINE_STARTED_TTL_S seconds a Redis "started" mark lasts (default 6 h: a redeployed host's compile
                         cache may be gone by then; the mark only lets later starts skip their turn)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

KEY_PREFIX = "alann:engine-start"
STARTED_PREFIX = "alann:engine-started"  # + kind:gpu:config: an engine of that configuration started there
DEFAULT_STARTED_TTL_S = 6 * 3600.0
# A vLLM start takes tens of seconds to minutes; the keep-alive refreshes every TTL/3, so 30 s only
# decides how long a killed holder blocks the GPU, not how long a start may take.
DEFAULT_TTL_S = 30.0
# Three queued starts with torch.compile and CUDA-graph capture take a few minutes each; half an hour
# means a holder that keeps refreshing but never finishes, which is a bug to report, not to wait out.
DEFAULT_WAIT_S = 1800.0
POLL_S = 0.2  # a waiting start asks again this often; a key expiry is noticed within it
REPORT_EVERY_S = 60.0  # a waiting start logs who holds the GPU this often

# KEYS: lock. ARGV: token (, ttl ms). The holder's own key only: never someone else's.
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_REFRESH = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"


class EngineStartLockTimeout(RuntimeError):
    """Another start held the GPU for longer than the wait allows."""


@dataclass(frozen=True)
class StartLockOptions:
    redis_url: str | None = None  # None: the file lock of one machine
    gpu_key: str | None = None  # None: the visible GPUs' UUIDs
    cuda_visible_devices: str | None = None
    ttl_s: float = DEFAULT_TTL_S
    wait_s: float = DEFAULT_WAIT_S
    lock_dir: str | None = None
    started_ttl_s: float = DEFAULT_STARTED_TTL_S

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> StartLockOptions:
        return cls(
            redis_url=environ.get("ALANN_ENGINE_LOCK_URL") or environ.get("REDIS_URL") or None,
            gpu_key=environ.get("ALANN_ENGINE_LOCK_KEY") or None,
            cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
            ttl_s=float(environ.get("ALANN_ENGINE_LOCK_TTL_S") or DEFAULT_TTL_S),
            wait_s=float(environ.get("ALANN_ENGINE_LOCK_WAIT_S") or DEFAULT_WAIT_S),
            lock_dir=environ.get("ALANN_ENGINE_LOCK_DIR") or None,
            started_ttl_s=float(environ.get("ALANN_ENGINE_STARTED_TTL_S") or DEFAULT_STARTED_TTL_S),
        )


def gpu_names(options: StartLockOptions) -> list[str]:
    """The names of the GPUs a start will use, sorted (several locks are always taken in one order).

    ALANN_ENGINE_LOCK_KEY wins; then UUIDs, given in CUDA_VISIBLE_DEVICES or asked from NVML; without
    NVML the visible indices ("gpu-0"), which inside containers that each see their GPU as 0 makes all
    their starts take turns: slower, never unsafe."""
    if options.gpu_key:
        return [options.gpu_key]
    visible = options.cuda_visible_devices
    entries = None if visible is None else [e.strip() for e in visible.split(",") if e.strip()]
    if entries and all(e.startswith(("GPU-", "MIG-")) for e in entries):
        return sorted(entries)
    uuids = nvml_uuids(entries)
    if uuids:
        return sorted(uuids)
    return sorted(f"gpu-{e}" for e in entries) if entries else ["gpu-all"]


def nvml_uuids(indices: list[str] | None) -> list[str]:
    """UUIDs of the GPUs at these indices (None: all that NVML sees), or [] without NVML.

    NVML numbers GPUs in PCI order; CUDA does too with CUDA_DEVICE_ORDER=PCI_BUS_ID, and a container
    given one GPU sees it as index 0 either way."""
    try:
        import pynvml  # nvidia-ml-py, installed with vLLM
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            chosen = range(pynvml.nvmlDeviceGetCount()) if indices is None else [int(i) for i in indices]
            raw = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in chosen]
        finally:
            pynvml.nvmlShutdown()
    except (pynvml.NVMLError, ValueError) as exc:  # no driver, or an index NVML does not know
        log.warning("engine start lock: no GPU UUID from NVML (%s); naming the GPUs by index", exc)
        return []
    return [u.decode() if isinstance(u, bytes) else str(u) for u in raw]


class RedisStartLock:
    """One GPU's start lock: ``SET key token NX PX ttl``, kept alive from a thread while held."""

    def __init__(self, client: Any, key: str, *, ttl_s: float, token: str | None = None) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.token = token or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self.lost = False  # the key expired while held (a stall longer than the TTL)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if isinstance(value, bytes) else value

    def acquire(self, *, deadline: float, wait_s: float, skip: Callable[[], bool] | None = None) -> bool:
        """Take the lock, waiting until ``deadline`` (time.monotonic()) at most; False, without the lock, as
        soon as ``skip()`` (when given) is true while waiting."""
        began = time.monotonic()
        last_report: float | None = None
        while not self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            if skip is not None and skip():
                log.info(
                    "engine start stops waiting for %s after %.1f s: started there before",
                    self.key,
                    time.monotonic() - began,
                )
                return False
            now = time.monotonic()
            if now >= deadline:
                raise EngineStartLockTimeout(
                    f"engine start waited {now - began:.0f} s for {self.key}, still held by {self.holder()!r}"
                    f" (ALANN_ENGINE_LOCK_WAIT_S={wait_s:.0f}); a holder that died frees it within the TTL"
                )
            if last_report is None or now - last_report >= REPORT_EVERY_S:
                log.info("engine start waits for %s, held by %r (%.0f s so far)", self.key, self.holder(), now - began)
                last_report = now
            time.sleep(POLL_S)
        if last_report is not None:
            log.info("engine start took %s after %.1f s", self.key, time.monotonic() - began)
        self._thread = threading.Thread(target=self._keep_alive, name=f"start-lock-{self.key}", daemon=True)
        self._thread.start()
        return True

    def release(self) -> bool:
        """Stop refreshing and delete the key if it still holds our token; False when it did not (or
        Redis could not be reached: then the key expires after the TTL, and the start that succeeded
        is not failed for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            return bool(self.client.eval(_RELEASE, 1, self.key, self.token))
        except Exception as exc:
            log.warning("engine start lock %s: release failed (%s); it expires within the TTL", self.key, exc)
            return False

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                still_ours = self.client.eval(_REFRESH, 1, self.key, self.token, self.ttl_ms)
            except Exception as exc:  # a Redis hiccup: the next tick tries again, the TTL leaves two more
                log.warning("engine start lock %s: keep-alive failed (%s)", self.key, exc)
                continue
            if not still_ours:
                self.lost = True
                log.error("engine start lock %s expired while held: another start may overlap this one", self.key)
                return


@contextlib.contextmanager
def start_lock(
    kind: str, options: StartLockOptions | None = None, *, after_first: bool = False, config: str = ""
) -> Iterator[bool]:
    """Hold the start lock of every GPU this process will use while the block runs (an engine start).

    Yields True while holding it. With ``after_first``, where an engine of ``config`` has started on every one
    of those GPUs before, it yields False without taking a turn (and a start waiting for its turn stops
    waiting once that becomes true); a block that ends without an error marks its GPUs as started."""
    options = options or StartLockOptions.from_env()
    names = gpu_names(options)
    if options.redis_url is None:
        with _file_locks(kind, names, options, after_first=after_first, config=config) as taken_here:
            yield taken_here
        return
    import redis

    client = redis.Redis.from_url(options.redis_url, socket_timeout=10)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        raise redis.ConnectionError(
            f"engine start lock: Redis at {_without_password(options.redis_url)} cannot be reached ({exc});"
            " the URL comes from ALANN_ENGINE_LOCK_URL or REDIS_URL (unset both for a one-machine file lock)"
        ) from exc
    marks = [f"{STARTED_PREFIX}:{kind}:{name}:{config}" for name in names]

    def started_before() -> bool:
        return after_first and client.exists(*marks) == len(marks)

    deadline = time.monotonic() + options.wait_s
    with contextlib.closing(client), contextlib.ExitStack() as held:  # released before closed
        taken = True
        if started_before():
            taken = False
            log.info("engine start takes no turn: %s started on %s before", kind, ", ".join(names))
        else:
            for name in names:
                lock = RedisStartLock(client, f"{KEY_PREFIX}:{kind}:{name}", ttl_s=options.ttl_s)
                if not lock.acquire(
                    deadline=deadline, wait_s=options.wait_s, skip=started_before if after_first else None
                ):
                    taken = False
                    break
                held.callback(lock.release)
        yield taken
        for mark in marks:  # the block ended without an error: an engine of this configuration started here
            client.set(mark, "1", ex=max(1, int(options.started_ttl_s)))


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))


@contextlib.contextmanager
def _file_locks(
    kind: str, names: list[str], options: StartLockOptions, *, after_first: bool = False, config: str = ""
) -> Iterator[bool]:
    """The fallback without Redis: exclusive ``flock``s, released when the block ends or the process dies.
    Yields False without them where ``after_first`` and every GPU's "started" file for ``config`` exists."""
    root = Path(options.lock_dir or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)

    def started_before() -> bool:
        return after_first and all(_mark_path(root, kind, name, config).exists() for name in names)

    with contextlib.ExitStack() as held:
        taken = not started_before()
        for name in names if taken else ():
            handle = held.enter_context((root / f"alann-{kind}-start-{name}.lock").open("a"))
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | (fcntl.LOCK_NB if after_first else 0))
                    break
                except BlockingIOError:
                    if started_before():
                        taken = False
                        break
                    time.sleep(POLL_S)
            if not taken:
                break
            held.callback(fcntl.flock, handle, fcntl.LOCK_UN)
        yield taken
        for name in names:  # the block ended without an error: an engine of this configuration started here
            _mark_path(root, kind, name, config).touch()


def _mark_path(root: Path, kind: str, name: str, config: str) -> Path:
    return root / f"alann-{kind}-started-{name}-{config or 'any'}"
