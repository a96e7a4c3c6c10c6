"""Engine starts on one machine are serialised (several gpu workers sharing a GPU start their vLLM
engines one after another: two at once failed on the H200)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from scoring.engines.base import start_lock


def hold(lock_dir: str, out: str, name: str) -> None:
    import os

    os.environ["ALANN_ENGINE_LOCK_DIR"] = lock_dir
    with start_lock("test"):
        began = time.monotonic()
        time.sleep(0.4)
        Path(out, name).write_text(f"{began} {time.monotonic()}")


@pytest.mark.parametrize("gpus", ["0", "0,1"])
def test_starts_do_not_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    # spawn, not fork: the test process runs threads (the Redis claim's keep-alive), and a child forked
    # while one of them held a lock (logging, imports) never got past it.
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=hold, args=(str(tmp_path), str(tmp_path), f"p{i}")) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    spans = sorted(tuple(map(float, (tmp_path / f"p{i}").read_text().split())) for i in range(3))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"two starts held the lock at once: {spans}"
    assert list(tmp_path.glob("alann-test-start-gpu-*.lock"))


def test_lock_is_released_after_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALANN_ENGINE_LOCK_DIR", str(tmp_path))
    with pytest.raises(RuntimeError), start_lock("test"):
        raise RuntimeError("engine failed to start")
    with start_lock("test"):  # would block forever if the first start kept it
        pass
