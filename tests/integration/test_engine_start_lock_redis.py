"""Engine starts take turns per GPU across containers: the lock is in Redis (this run's own database),
so gpu workers that share no /tmp still start one after another, a holder killed mid-start frees the
GPU after the TTL, and nobody deletes a lock it does not hold."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from scoring.engines.start_lock import EngineStartLockTimeout, RedisStartLock, StartLockOptions, start_lock
from tests import redis_owner

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

# spawn, not fork: the test process runs the Redis claim's keep-alive thread, and a child forked while
# it held a lock never got past it.
SPAWN = multiprocessing.get_context("spawn")


def start_engine_in_own_container(tmpdir: str, out: str, name: str) -> None:
    """A gpu-worker container: its own temp dir, the deployment's REDIS_URL (inherited), a stand-in
    engine start that records when it held the start lock."""
    import tempfile

    os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    from scoring.engines.registry import start_lock as engine_start_lock  # what get_engine("vllm") holds

    with engine_start_lock("vllm"):
        began = time.monotonic()
        time.sleep(0.4)
        Path(out, name).write_text(f"{began} {time.monotonic()}")


def hold_until_killed(redis_url: str, ttl_s: float, ready: str) -> None:
    with start_lock("vllm", StartLockOptions(redis_url=redis_url, gpu_key="gpu-under-test", ttl_s=ttl_s)):
        Path(ready).write_text(str(os.getpid()))
        time.sleep(600)


@pytest.fixture()
def owned() -> redis_owner.OwnedRedis:
    return redis_owner.current()


def test_starts_in_containers_without_a_shared_tmp_do_not_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owned: redis_owner.OwnedRedis
) -> None:
    monkeypatch.setenv("REDIS_URL", owned.url)
    monkeypatch.delenv("ALANN_ENGINE_LOCK_URL", raising=False)
    monkeypatch.delenv("ALANN_ENGINE_LOCK_DIR", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # a container given one GPU sets none
    out = tmp_path / "spans"
    out.mkdir()
    tmpdirs = [tmp_path / f"container{i}-tmp" for i in range(3)]
    procs = []
    for i, tmpdir in enumerate(tmpdirs):
        tmpdir.mkdir()
        procs.append(SPAWN.Process(target=start_engine_in_own_container, args=(str(tmpdir), str(out), f"p{i}")))
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    spans = sorted(tuple(map(float, (out / f"p{i}").read_text().split())) for i in range(3))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"two engine starts held the start lock at once: {spans}"
    assert not owned.client().keys("alann:engine-start:*"), "every start released its lock"


def test_a_holder_killed_mid_start_frees_the_gpu_after_the_ttl(tmp_path: Path, owned: redis_owner.OwnedRedis) -> None:
    ttl_s = 1.0
    ready = tmp_path / "ready"
    holder = SPAWN.Process(target=hold_until_killed, args=(owned.url, ttl_s, str(ready)))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and holder.is_alive(), "the holder never took the lock"
            time.sleep(0.05)
        time.sleep(2.5 * ttl_s)  # past the TTL: only the keep-alive keeps the key
        key = "alann:engine-start:vllm:gpu-under-test"
        assert owned.client().get(key).decode().split(":")[1] == ready.read_text()
        waiting = StartLockOptions(redis_url=owned.url, gpu_key="gpu-under-test", wait_s=0.5)
        with pytest.raises(EngineStartLockTimeout, match="still held by"), start_lock("vllm", waiting):
            pass
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)  # no finally, no atexit: only the TTL frees its key
        killed = time.monotonic()
        with start_lock("vllm", StartLockOptions(redis_url=owned.url, gpu_key="gpu-under-test", wait_s=10)):
            waited = time.monotonic() - killed
    finally:
        holder.kill()
        holder.join(10)
    assert waited <= ttl_s + 1.0, f"the next start waited {waited:.1f} s for a dead holder (TTL {ttl_s} s)"


def test_release_by_someone_else_leaves_the_holder_its_lock(
    owned: redis_owner.OwnedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    client = owned.client()
    key = "alann:engine-start:vllm:gpu-shared"
    first = RedisStartLock(client, key, ttl_s=30)
    other = RedisStartLock(client, key, ttl_s=30)
    first.acquire(deadline=time.monotonic() + 5, wait_s=5)
    try:
        assert other.release() is False
        assert first.holder() == first.token
        timeout = pytest.raises(EngineStartLockTimeout, match=first.token)
        with caplog.at_level(logging.INFO, "scoring.engines.start_lock"), timeout:
            other.acquire(deadline=time.monotonic() + 0.3, wait_s=0.3)
        assert f"engine start waits for {key}, held by '{first.token}'" in caplog.text  # the worker's log
        # The first start stalled past its TTL (its key is gone) and the next one took the GPU:
        # the stalled one, finishing late, must not free the GPU under the new holder.
        client.delete(key)
        other.acquire(deadline=time.monotonic() + 5, wait_s=5)
        assert first.release() is False
        assert first.holder() == other.token
    finally:
        assert other.release() is True
    assert client.get(key) is None


def test_a_multi_gpu_start_waits_for_each_of_its_gpus(owned: redis_owner.OwnedRedis) -> None:
    """A tensor-parallel engine on two GPUs and a one-GPU engine on the second take turns; an engine on
    a third GPU does not wait for either."""

    def options(gpus: str) -> StartLockOptions:
        return StartLockOptions(redis_url=owned.url, cuda_visible_devices=gpus, wait_s=0.3)

    with start_lock("vllm", options("GPU-aaaa,GPU-bbbb")):
        with pytest.raises(EngineStartLockTimeout, match="GPU-bbbb"), start_lock("vllm", options("GPU-bbbb")):
            pass
        with start_lock("vllm", options("GPU-cccc")):
            pass
    with start_lock("vllm", options("GPU-bbbb")):
        pass
    assert not owned.client().keys("alann:engine-start:*")


def test_after_the_first_start_on_a_gpu_later_starts_of_its_configuration_take_no_turn(
    owned: redis_owner.OwnedRedis,
) -> None:
    """parallel_start across containers: the Redis mark of a configuration's first start lets a start waiting
    behind another holder go ahead side by side; a failed start leaves no mark; another configuration still
    takes its turn."""
    import threading

    client = owned.client()
    options = StartLockOptions(redis_url=owned.url, gpu_key="gpu-parallel-test", wait_s=20)
    mark = "alann:engine-started:vllm:gpu-parallel-test:cfg-a"
    try:
        with pytest.raises(RuntimeError), start_lock("vllm", options, after_first=True, config="cfg-a"):
            raise RuntimeError("the engine did not start")
        assert not client.exists(mark)

        release, held = threading.Event(), threading.Event()

        def hold() -> None:
            with start_lock("vllm", options, config="cfg-h"):
                held.set()
                release.wait(30)

        turns: dict[str, bool] = {}
        went = {name: threading.Event() for name in ("a", "b")}

        def start(config: str, name: str) -> None:
            with start_lock("vllm", options, after_first=True, config=config) as turn:
                turns[name] = turn
                went[name].set()

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        waiters = [threading.Thread(target=start, args=(f"cfg-{n}", n)) for n in ("a", "b")]
        for waiter in waiters:
            waiter.start()
        assert not went["a"].wait(1.0), "a configuration's first start skipped its turn"
        client.set(mark, "1", ex=60)  # configuration a's first start succeeded in another container
        assert went["a"].wait(5) and turns["a"] is False and not release.is_set()
        assert not went["b"].wait(0.5), "configuration b has no first start yet: it waits for its turn"
        release.set()
        holder.join(10)
        assert went["b"].wait(10) and turns["b"] is True
        for waiter in waiters:
            waiter.join(5)
        assert client.exists("alann:engine-started:vllm:gpu-parallel-test:cfg-b")  # b's start marked it
        assert not client.keys("alann:engine-start:*")
    finally:
        client.delete(*(f"alann:engine-started:vllm:gpu-parallel-test:cfg-{c}" for c in ("a", "b", "h")))
