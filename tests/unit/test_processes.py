"""config/processes.py: the one definition of the deployment's command lines (compose, make demo
and the end-to-end test use it), and its `run` command, which compose's services exec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from config import processes
from config.processes import process_argv, process_env

ROOT = Path(__file__).resolve().parents[2]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_cpu_worker_takes_the_default_and_io_queues_one_message_at_a_time() -> None:
    argv = process_argv("worker")
    assert argv[:6] == [sys.executable, "-m", "celery", "-A", "config", "worker"]
    assert (flag(argv, "-Q"), flag(argv, "--concurrency"), flag(argv, "--prefetch-multiplier")) == (
        "default,io",
        "2",
        "1",
    )
    assert flag(argv, "-n") == "cpu@%h"
    argv = process_argv("worker", concurrency=3, node="cpu2@%h", queues="default,gpu")
    assert (flag(argv, "-Q"), flag(argv, "--concurrency"), flag(argv, "-n")) == ("default,gpu", "3", "cpu2@%h")


def test_the_io_worker_takes_imports_alone_one_at_a_time() -> None:
    """Issue 32, problem 4: an import never waits behind a round's steps on the default queue."""
    argv = process_argv("io-worker", concurrency=4)
    assert (flag(argv, "-Q"), flag(argv, "--concurrency"), flag(argv, "-n")) == ("io", "1", "io@%h")
    assert set(processes.demo_worker_argvs()) == {"worker", "io-worker", "gpu-worker"}


def test_a_gpu_worker_runs_one_task_at_a_time_whatever_the_concurrency() -> None:
    argv = process_argv("gpu-worker", concurrency=4)
    assert (flag(argv, "-Q"), flag(argv, "--concurrency"), flag(argv, "--prefetch-multiplier")) == ("gpu", "1", "1")
    assert flag(argv, "-n") == "gpu@%h"
    assert flag(process_argv("gpu-worker", node=processes.gpu_node(5)), "-n") == "gpu5@%h"


def test_web_and_migrate_command_lines() -> None:
    web = process_argv("web", bind="127.0.0.1:8123")
    assert web[:4] == [sys.executable, "-m", "gunicorn", "config.wsgi:application"]
    assert (flag(web, "--bind"), flag(web, "--workers"), flag(web, "--threads")) == ("127.0.0.1:8123", "3", "4")
    assert process_argv("migrate") == [sys.executable, "manage.py", "migrate", "--noinput"]


def test_gpu_index_pins_the_gpu_and_nothing_else_gets_an_environment() -> None:
    for role in processes.ROLES:
        assert process_env(role) == {}
    for index in (0, 1, 7):
        env = process_env("gpu-worker", gpu_index=index)
        assert env["CUDA_VISIBLE_DEVICES"] == str(index)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # index i is nvidia-smi's (and NVML's) GPU i
    with pytest.raises(ValueError, match="gpu-worker role only"):
        process_env("worker", gpu_index=0)
    with pytest.raises(ValueError, match="0 or more"):
        process_env("gpu-worker", gpu_index=-1)


def test_mistakes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown role 'beat'"):
        process_argv("beat")
    with pytest.raises(ValueError, match="unknown Celery queue"):
        process_argv("worker", queues="default,cpu")
    with pytest.raises(ValueError, match="worker roles only"):
        process_argv("web", node="web@%h")


@pytest.fixture
def exec_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """`run` execs its process: record it (and any step it runs first) instead."""
    calls: list[tuple[list[str], dict[str, str]]] = []

    def record(argv: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append((list(argv), dict(env)))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(processes.os, "execvpe", lambda file, argv, env: record(argv, env))
    monkeypatch.setattr(processes.subprocess, "run", lambda argv, *, env, check: record(argv, env))
    monkeypatch.chdir(ROOT)
    return calls


def test_run_with_a_gpu_index_sees_that_gpu_alone_under_its_own_node_name(exec_calls: list[Any]) -> None:
    processes.main(["run", "gpu-worker", "--gpu-index", "1"])
    [(argv, env)] = exec_calls
    assert argv == process_argv("gpu-worker", node="gpu1@%h")
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_run_migrate_prepares_the_models_then_migrates(exec_calls: list[Any]) -> None:
    processes.main(["run", "migrate"])
    assert [argv for argv, _ in exec_calls] == [
        [sys.executable, "manage.py", "prepare_models", "--skip-verify"],
        process_argv("migrate"),
    ]


def test_run_refuses_to_start_outside_the_repository_root(
    exec_calls: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="repository root"):
        processes.main(["run", "web"])
    assert exec_calls == []


def test_the_module_imports_no_django_torch_or_celery() -> None:
    """Run as a file (`python3 config/processes.py compose ...` on a Docker host without the project's
    packages), so the config package, which imports the Celery app, is not imported either."""
    probe = (
        "import importlib.util, json, sys; "
        f"spec = importlib.util.spec_from_file_location('processes', {str(ROOT / 'config' / 'processes.py')!r}); "
        "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'torch', 'celery', 'yaml'})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
