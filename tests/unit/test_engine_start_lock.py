"""Which GPUs a start locks, where the lock lives, and the one-machine file lock used only when no
Redis is configured (the cross-container Redis lock: tests/integration/test_engine_start_lock_redis.py)."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
from pathlib import Path

import pytest

from scoring.engines.start_lock import StartLockOptions, gpu_names, start_lock


def hold(lock_dir: str, out: str, name: str, gpus: str) -> None:
    with start_lock("test", StartLockOptions(redis_url=None, lock_dir=lock_dir, cuda_visible_devices=gpus)):
        began = time.monotonic()
        time.sleep(0.4)
        Path(out, name).write_text(f"{began} {time.monotonic()}")


@pytest.mark.parametrize("gpus", ["0", "0,1"])
def test_without_redis_starts_on_one_machine_do_not_overlap(tmp_path: Path, gpus: str) -> None:
    # spawn, not fork: the test process runs threads (the Redis claim's keep-alive), and a child forked
    # while one of them held a lock (logging, imports) never got past it.
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=hold, args=(str(tmp_path), str(tmp_path), f"p{i}", gpus)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    spans = sorted(tuple(map(float, (tmp_path / f"p{i}").read_text().split())) for i in range(3))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"two starts held the lock at once: {spans}"
    assert list(tmp_path.glob("alann-test-start-*.lock"))


def test_file_lock_is_released_after_an_error(tmp_path: Path) -> None:
    options = StartLockOptions(redis_url=None, lock_dir=str(tmp_path))
    with pytest.raises(RuntimeError), start_lock("test", options):
        raise RuntimeError("engine failed to start")
    with start_lock("test", options):  # would block forever if the first start kept it
        pass


def test_the_lock_is_in_redis_whenever_a_url_is_configured() -> None:
    assert StartLockOptions.from_env({}).redis_url is None
    assert StartLockOptions.from_env({"REDIS_URL": "redis://redis:6379/0"}).redis_url == "redis://redis:6379/0"
    explicit = {"REDIS_URL": "redis://redis:6379/0", "ALANN_ENGINE_LOCK_URL": "redis://locks:6379/3"}
    assert StartLockOptions.from_env(explicit).redis_url == "redis://locks:6379/3"
    tuned = StartLockOptions.from_env({"ALANN_ENGINE_LOCK_TTL_S": "5", "ALANN_ENGINE_LOCK_WAIT_S": "60"})
    assert (tuned.ttl_s, tuned.wait_s) == (5.0, 60.0)


def test_gpus_are_named_host_independently() -> None:
    """UUIDs name a GPU the same way in every container; an explicit key wins over everything."""
    assert gpu_names(StartLockOptions(cuda_visible_devices="GPU-bbbb, GPU-aaaa")) == ["GPU-aaaa", "GPU-bbbb"]
    assert gpu_names(StartLockOptions(gpu_key="h200-rack2-slot5", cuda_visible_devices="0")) == ["h200-rack2-slot5"]


def test_without_nvml_gpus_are_named_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML not installed: import fails
    assert gpu_names(StartLockOptions(cuda_visible_devices="1,0")) == ["gpu-0", "gpu-1"]
    assert gpu_names(StartLockOptions(cuda_visible_devices=None)) == ["gpu-all"]


def test_a_vllm_start_failed_by_its_memory_profiling_is_tried_again_and_other_errors_are_not() -> None:
    from scoring.engines.registry import start_with_retries

    calls: list[int] = []

    def flaky() -> object:
        calls.append(1)
        if len(calls) < 3:
            raise AssertionError(
                "Error in memory profiling. Initial free memory 81.67 GiB, current free memory 81.88 GiB."
            )
        return "engine"

    assert start_with_retries(flaky, attempts=4, pause_s=0) == "engine"  # type: ignore[arg-type]
    assert len(calls) == 3

    def broken() -> object:
        calls.append(1)
        raise AssertionError("renderer max_context 4000 must be < max_model_len 2304")

    calls.clear()
    with pytest.raises(AssertionError, match="max_context"):
        start_with_retries(broken, attempts=4, pause_s=0)  # type: ignore[arg-type]
    assert len(calls) == 1

    def always() -> object:
        calls.append(1)
        raise AssertionError("Error in memory profiling. again")

    calls.clear()
    with pytest.raises(AssertionError, match="memory profiling"):
        start_with_retries(always, attempts=3, pause_s=0)  # type: ignore[arg-type]
    assert len(calls) == 3


def test_vllm_is_imported_before_the_start_lock_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The import holds no GPU memory: done before the lock, it no longer lengthens every engine's turn
    (session 19: 21.6 s of a 57.5 s start)."""
    import contextlib
    from collections.abc import Iterator

    from scoring.engines import registry

    events: list[str] = []

    class FakeVLLM:
        @staticmethod
        def preload(*, batch_invariant: bool = False, engine_core_process: bool = False) -> float:
            events.append(f"preload invariant={batch_invariant}" + (" core process" if engine_core_process else ""))
            return 1.5

        def __init__(self, model_dir: str, batch_invariant: bool = False, engine_core_process: bool = False) -> None:
            events.append("start")

    @contextlib.contextmanager
    def lock(kind: str, *, after_first: bool = False, config: str = "") -> Iterator[bool]:
        events.append("lock")
        yield True
        events.append("unlock")

    monkeypatch.setattr(registry, "_engine_class", lambda kind: FakeVLLM)
    monkeypatch.setattr(registry, "start_lock", lock)
    monkeypatch.setattr(registry, "_ENGINES", {})
    engine = registry.get_engine("vllm", "/nowhere")
    assert isinstance(engine, FakeVLLM) and events == ["preload invariant=False", "lock", "start", "unlock"]
    # batch invariance is read when vLLM is imported: the preload before the lock is told
    events.clear()
    registry.get_engine("vllm", "/nowhere", batch_invariant=True)
    assert events == ["preload invariant=True", "lock", "start", "unlock"]
    # and so is where the engine core will run (vLLM reads VLLM_ENABLE_V1_MULTIPROCESSING from its environment)
    events.clear()
    registry.get_engine("vllm", "/nowhere", engine_core_process=True)
    assert events == ["preload invariant=False core process", "lock", "start", "unlock"]


def test_a_retry_after_the_profiling_assertion_starts_with_a_fixed_kv_cache() -> None:
    """Session 24: one worker's start failed seven times in a row on vLLM's profiling while other processes
    trained on the GPU; from the second attempt on, the fallback (a fixed KV cache, no profiling) starts."""
    from scoring.engines.registry import start_with_retries

    made: list[str] = []

    def profiled() -> object:
        made.append("profiled")
        raise AssertionError("Error in memory profiling. Initial free memory 37.51 GiB, current free memory 40.99 GiB.")

    def fixed() -> object:
        made.append("fixed")
        return "engine"

    assert start_with_retries(profiled, attempts=4, pause_s=0, fallback=fixed) == "engine"  # type: ignore[arg-type]
    assert made == ["profiled", "fixed"]
    made.clear()
    with pytest.raises(AssertionError, match="max_context"):  # other errors are not retried, fallback or not

        def broken() -> object:
            made.append("broken")
            raise AssertionError("renderer max_context 4000 must be < max_model_len 2304")

        start_with_retries(broken, attempts=4, pause_s=0, fallback=fixed)  # type: ignore[arg-type]
    assert made == ["broken"]


def test_the_fixed_kv_cache_keeps_the_engine_inside_its_share() -> None:
    from scoring.engines.vllm import FIXED_KV_HEADROOM_BYTES, fixed_kv_cache_bytes

    gib = 2**30
    h100 = 80 * gib
    # SmolLM2-135M (0.26 GiB of bf16 weights) at 0.12 of an H100: 9.6 - 0.52 - 2 GiB
    kv = fixed_kv_cache_bytes(h100, 0.12, int(0.26 * gib))
    assert kv == int(h100 * 0.12) - 2 * int(0.26 * gib) - FIXED_KV_HEADROOM_BYTES
    assert 6.9 * gib < kv < 7.2 * gib
    assert fixed_kv_cache_bytes(h100, 0.9, 16 * gib) == int(h100 * 0.9) - 32 * gib - FIXED_KV_HEADROOM_BYTES
    assert fixed_kv_cache_bytes(h100, 0.04, int(0.26 * gib)) is None  # under 1 GiB left: profile instead


def test_the_fallback_is_sized_from_the_share_and_the_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from scoring.engines import registry, vllm

    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    assert vllm.model_weight_bytes(str(tmp_path)) == 1000
    monkeypatch.setattr(vllm, "gpu_total_bytes", lambda: 80 * 2**30)
    seen: list[dict[str, object]] = []

    class Fake:
        def __init__(self, model_dir: str, **options: object) -> None:
            seen.append(options)

    start = registry._fixed_kv_start(Fake, str(tmp_path), {"gpu_memory_utilization": 0.12})
    assert start is not None
    start()
    assert seen == [
        {"gpu_memory_utilization": 0.12, "kv_cache_memory_bytes": vllm.fixed_kv_cache_bytes(80 * 2**30, 0.12, 1000)}
    ]
    assert registry._fixed_kv_start(Fake, str(tmp_path), {"kv_cache_memory_bytes": 2**31}) is None  # given: kept


def _hold_until(options: StartLockOptions, release: threading.Event, entered: threading.Event) -> None:
    with start_lock("test", options, config="cfg"):
        entered.set()
        release.wait(30)


def _start(options: StartLockOptions, after_first: bool, out: list[bool], entered: threading.Event) -> None:
    with start_lock("test", options, after_first=after_first, config="cfg") as turn:
        out.append(turn)
        entered.set()


def test_after_the_first_start_of_a_configuration_later_ones_take_no_turn(tmp_path: Path) -> None:
    """parallel_start (file lock: no Redis configured): the first start takes its turn and marks the GPU; a
    start waiting behind another holder then goes ahead without the lock, side by side; without after_first
    the mark changes nothing; a start that failed leaves no mark."""
    options = StartLockOptions(redis_url=None, lock_dir=str(tmp_path), cuda_visible_devices="0")
    with pytest.raises(RuntimeError), start_lock("test", options, after_first=True, config="cfg"):
        raise RuntimeError("the engine did not start")
    assert not list(tmp_path.glob("alann-test-started-*")), "a failed start marked the GPU"

    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_until, args=(options, release, held))
    holder.start()
    assert held.wait(10)
    turns: list[bool] = []
    entered = threading.Event()
    waiter = threading.Thread(target=_start, args=(options, True, turns, entered))
    waiter.start()
    assert not entered.wait(1.0), "a start with no earlier start of its configuration skipped its turn"
    with start_lock("test", StartLockOptions(redis_url=None, lock_dir=str(tmp_path / "elsewhere"))):
        pass  # another folder's start marks nothing here
    assert not entered.wait(0.5)
    (tmp_path / "alann-test-started-gpu-0-cfg").touch()  # the first start of this configuration succeeded
    assert entered.wait(5), "the waiting start did not go ahead once the GPU was marked"
    assert turns == [False] and not release.is_set()  # side by side with the holder
    waiter.join(5)

    other: list[bool] = []
    plain = threading.Event()
    blocked = threading.Thread(target=_start, args=(options, False, other, plain))
    blocked.start()
    assert not plain.wait(1.0), "without after_first a start went ahead of the holder"
    release.set()
    holder.join(10)
    assert plain.wait(10) and other == [True]
    blocked.join(5)


def test_a_start_without_its_turn_is_made_with_a_fixed_kv_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The registry: with parallel_start and no turn, the engine starts with a fixed KV cache sized to its share
    (no memory profiling beside the other starts); with its turn, as configured."""
    import contextlib
    from collections.abc import Iterator

    from scoring.engines import registry, vllm

    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    monkeypatch.setattr(vllm, "gpu_total_bytes", lambda: 80 * 2**30)
    seen: list[tuple[dict[str, object], dict[str, object]]] = []
    turn = {"value": False}

    class FakeVLLM:
        @staticmethod
        def preload(*, batch_invariant: bool = False, engine_core_process: bool = False) -> float:
            return 0.0

        def __init__(self, model_dir: str, **options: object) -> None:
            seen.append((asked[-1], options))

    asked: list[dict[str, object]] = []

    @contextlib.contextmanager
    def lock(kind: str, *, after_first: bool = False, config: str = "") -> Iterator[bool]:
        asked.append({"after_first": after_first, "config": config})
        yield turn["value"]

    monkeypatch.setattr(registry, "_engine_class", lambda kind: FakeVLLM)
    monkeypatch.setattr(registry, "start_lock", lock)
    monkeypatch.setattr(registry, "_ENGINES", {})
    options = {"gpu_memory_utilization": 0.12, "parallel_start": True}
    registry.get_engine("vllm", str(tmp_path), **options)
    kv = vllm.fixed_kv_cache_bytes(80 * 2**30, 0.12, 1000)
    assert seen[-1][1] == {**options, "kv_cache_memory_bytes": kv}
    assert seen[-1][0]["after_first"] is True and len(str(seen[-1][0]["config"])) == 12
    turn["value"] = True
    registry.get_engine("vllm", str(tmp_path), gpu_memory_utilization=0.13, parallel_start=True)
    assert seen[-1][1] == {"gpu_memory_utilization": 0.13, "parallel_start": True}
    assert seen[-1][0]["config"] != seen[0][0]["config"]  # another configuration: its own first start
