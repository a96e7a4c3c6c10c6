"""The vLLM engine option ``engine_core_process`` on a CPU (vLLM is not installed here): what it needs from
the operating system, with real processes. A Celery prefork child is daemonic, and multiprocessing refuses
a daemon children; ``children_allowed`` lets it start vLLM's engine core, and ``reap_with_me`` ends that core
when the child dies however it died (vLLM's core does not watch its parent: a SIGKILLed gpu worker would
leave it holding its GPU memory)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scoring.engines.vllm import child_pids, engine_core_in_process

DAEMON = """import multiprocessing, sys, time
sys.path.insert(0, sys.argv[1])
from scoring.engines.vllm import children_allowed

def grandchild():
    time.sleep(0.1)

def daemon(allowed, results):
    ctx = multiprocessing.get_context("fork")
    try:
        if allowed:
            with children_allowed():
                proc = ctx.Process(target=grandchild)
                proc.start()
        else:
            proc = ctx.Process(target=grandchild)
            proc.start()
        proc.join(10)
        results.put("started")
    except AssertionError as exc:
        results.put(f"refused: {exc}")

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=daemon, args=(sys.argv[2] == "allowed", results), daemon=True)
    child.start()
    print(results.get(timeout=30), flush=True)
    child.join(10)
"""


@pytest.mark.parametrize("allowed", [False, True])
def test_a_daemonic_process_starts_a_child_only_inside_children_allowed(allowed: bool) -> None:
    """In a fresh interpreter (forking inside the test process, with the threads the suite has started, can
    deadlock the child): a daemonic child of it starts a grandchild, inside children_allowed or not."""
    root = str(Path(__file__).resolve().parents[2])
    mode = "allowed" if allowed else "plain"
    done = subprocess.run([sys.executable, "-c", DAEMON, root, mode], capture_output=True, text=True, timeout=60)
    outcome = done.stdout.strip()
    if allowed:
        assert outcome == "started", done.stderr
    else:
        assert outcome.startswith("refused") and "daemonic processes are not allowed to have children" in outcome


PARENT = """import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from scoring.engines.vllm import reap_with_me
child = subprocess.Popen(["sleep", "120"])
reap_with_me([child.pid])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_the_reaper_ends_the_core_when_its_process_is_killed() -> None:
    root = str(Path(__file__).resolve().parents[2])
    parent = subprocess.Popen([sys.executable, "-c", PARENT, root], stdout=subprocess.PIPE, text=True)
    try:
        core = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert core in child_pids(parent.pid)
        time.sleep(1.0)
        os.kill(core, 0)  # alive while its process lives
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(core):
            time.sleep(0.2)
        assert not _alive(core), "the core outlived its killed process"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its new parent) is as good as gone
        return not Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return False


def test_the_option_asks_vllm_for_its_own_core_process_unless_the_deployment_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    assert engine_core_in_process(True) is False and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert engine_core_in_process(True) is True  # the deployment's word wins
