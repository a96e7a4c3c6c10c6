"""The deployment's processes, defined once. docker-compose's `command:`s, `make demo` and the
multi-process end-to-end test all take their command lines from here, so they cannot drift apart.

    python -m config.processes run ROLE [--gpu-index N] [--bind ADDR] [--concurrency N] [--node NAME] [--queues Q]
    python -m config.processes compose --gpus N [--out FILE]   # per-GPU worker services for N GPUs
    python -m config.processes demo [--data PATH] [--port N]    # what `make demo` runs

Roles: `migrate` (one shot: prepare the bundled models, then migrate), `web` (gunicorn), `worker`
(Celery, queues `default` and `io`), `io-worker` (Celery, queue `io`: imports, one at a time, so an
upload never waits behind a round's steps), `gpu-worker` (Celery, queue `gpu`, one task at a time). Every command runs
in the repository root (argv names `manage.py`; gunicorn reads `gunicorn.conf.py` from there).

Plain Python: no Django, torch or Celery at import (PyYAML only inside `compose_override`), so the
test imports it cheaply, and `python3 config/processes.py compose ...` runs on a Docker host without
the project installed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROLES = ("migrate", "web", "worker", "io-worker", "gpu-worker")
QUEUES = ("default", "io", "gpu")  # config/celery.py
COMPOSE_FILE = "docker-compose.yml"
# The base compose file's one GPU worker; `compose --gpus N` copies it for GPUs 1 … N-1.
GPU_SERVICE = "gpu-worker-{index}"


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")


def gpu_node(index: int) -> str:
    """The Celery node name of the gpu worker on GPU ``index``.

    Every node name ends in ``@%h`` (Celery puts the host name there): a claim held on another host is
    checked by pinging the nodes whose name holds that host (annotate/services/workers.py)."""
    if index < 0:
        raise ValueError(f"a GPU index is 0 or more, not {index}")
    return f"gpu{index}@%h"


def process_argv(
    role: str,
    *,
    bind: str = "0.0.0.0:8000",
    concurrency: int = 2,
    node: str | None = None,
    queues: str | None = None,
) -> list[str]:
    """The command line of one process of ``role``, run with the repository root as cwd.

    ``bind``: the web server's address. ``concurrency``: the CPU worker's pool size (a gpu worker
    always runs one task at a time). ``node``, ``queues``: the Celery node name and queue list of
    the worker roles (defaults: ``cpu@%h`` on ``default,io``, ``io@%h`` on ``io``, ``gpu@%h`` on ``gpu``).
    The plain worker reads ``io`` too, so an install with no io-worker still imports; with one, an
    import is taken by whichever is free: the io-worker, when the plain worker is busy with a round."""
    _check_role(role)
    if role in ("migrate", "web") and (node is not None or queues is not None):
        raise ValueError(f"{role}: node and queues apply to the worker roles only")
    if role == "migrate":
        return [sys.executable, "manage.py", "migrate", "--noinput"]
    if role == "web":
        # gunicorn.conf.py (read from the cwd) adds the gthread worker class and the 75 s keep-alive.
        # 3 processes x 4 threads: what compose's web has always run (the web bench measured 4 x 8 on
        # 2 cores: bench/RESULTS.md, web); not re-measured here.
        return [
            *(sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", bind),
            *("--workers", "3", "--threads", "4"),
        ]
    if role == "worker":
        if concurrency < 1:
            raise ValueError(f"worker: concurrency is 1 or more, not {concurrency}")
        return _celery_worker(queues or "default,io", concurrency, node or "cpu@%h")
    if role == "io-worker":
        # One import at a time: an import is one long transaction per chunk; two at once on SQLite
        # would only wait for each other's write lock.
        return _celery_worker(queues or "io", 1, node or "io@%h")
    # A GPU task holds the GPU's engine for minutes: one task per process, never one prefetched
    # behind it (a second process per GPU, not a bigger pool, is how a GPU gets two: README).
    return _celery_worker(queues or "gpu", 1, node or "gpu@%h")


def _celery_worker(queues: str, concurrency: int, node: str) -> list[str]:
    unknown = set(queues.split(",")) - set(QUEUES)
    if unknown:
        raise ValueError(f"unknown Celery queue(s) {sorted(unknown)}: {', '.join(QUEUES)} (config/celery.py)")
    # --loglevel: Celery replaces the root logger's handlers and level with its own, so LOG_LEVEL
    # (the README's "root log level of web and workers") reaches a worker only through this flag.
    return [
        *(sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queues),
        *("--concurrency", str(concurrency), "--prefetch-multiplier", "1", "-n", node),
        *("--loglevel", os.environ.get("LOG_LEVEL", "INFO")),
    ]


def process_env(role: str, *, gpu_index: int | None = None) -> dict[str, str]:
    """Environment variables a process of ``role`` needs on top of the deployment's: for a gpu
    worker given a GPU index, that GPU alone; {} otherwise.

    Only for processes that see every GPU of the host (a venv, the end-to-end test). A container
    given one GPU by compose (`device_ids`) sees it as CUDA device 0, so CUDA_VISIBLE_DEVICES=1
    there would hide it: compose's services pass ``--node`` instead of ``--gpu-index``."""
    _check_role(role)
    if gpu_index is None:
        return {}
    if role != "gpu-worker":
        raise ValueError(f"{role}: a GPU index applies to the gpu-worker role only")
    if gpu_index < 0:
        raise ValueError(f"a GPU index is 0 or more, not {gpu_index}")
    # PCI order: CUDA's default (fastest first) may number GPUs unlike nvidia-smi and NVML, and the
    # engine start lock names a GPU by the NVML UUID at this index (scoring/engines/start_lock.py).
    return {"CUDA_VISIBLE_DEVICES": str(gpu_index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def prepare_models_argv(*, verify: bool) -> list[str]:
    """Dequantize the bundled SmolLM2 into MODELS_DIR if it is not there yet (idempotent)."""
    return [sys.executable, "manage.py", "prepare_models", *([] if verify else ["--skip-verify"])]


def run(role: str, options: argparse.Namespace) -> None:
    """Replace this process by ``role``'s (compose's `command:`): signals reach it directly."""
    if not Path("manage.py").is_file():
        sys.exit(f"run {role}: start it in the repository root (no manage.py in {Path.cwd()})")
    node = gpu_node(options.gpu_index) if options.node is None and options.gpu_index is not None else options.node
    argv = process_argv(role, bind=options.bind, concurrency=options.concurrency, node=node, queues=options.queues)
    env = {**os.environ, **process_env(role, gpu_index=options.gpu_index)}
    if role == "migrate":
        # Compose's `models` volume starts empty and every worker loads SmolLM2 from it; this one-shot
        # service runs before any of them (depends_on: service_completed_successfully).
        done = subprocess.run(prepare_models_argv(verify=False), env=env, check=False)
        if done.returncode:
            sys.exit(done.returncode)
    os.execvpe(argv[0], argv, env)


def compose_override(gpus: int, *, base: Path = Path(COMPOSE_FILE)) -> dict[str, Any]:
    """A compose override adding one gpu worker per GPU 1 … gpus-1 to the base file's gpu-worker-0.

    Each is a copy of gpu-worker-0 (read from ``base``, so the two cannot differ but for the GPU)
    that reserves its own device through `device_ids` and names its node by that GPU. A copy of
    gpu-worker-0 itself is left out: compose appends some lists when it merges a service, and a
    second identical device reservation is not worth the risk."""
    import yaml  # PyYAML: the project's dependency; python3-yaml on a bare Docker host

    if gpus < 1:
        raise ValueError(f"--gpus is 1 or more, not {gpus}")
    template = yaml.safe_load(base.read_text())["services"][GPU_SERVICE.format(index=0)]
    devices = template["deploy"]["resources"]["reservations"]["devices"]
    if template["command"] != _gpu_command(0) or [d.get("device_ids") for d in devices] != [["0"]]:
        raise ValueError(f"{base}: gpu-worker-0 must run `{_gpu_command(0)}` and reserve device_ids ['0'] alone")
    services = {}
    for index in range(1, gpus):
        service = copy.deepcopy(template)
        service["command"] = _gpu_command(index)
        service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] = [str(index)]
        services[GPU_SERVICE.format(index=index)] = service
    return {"services": services}


def _gpu_command(index: int) -> str:
    return f"python -m config.processes run gpu-worker --node {gpu_node(index)}"


def write_override(gpus: int, out: str | None) -> None:
    import yaml

    others = {1: "none", 2: "GPU 1"}.get(gpus, f"GPUs 1 to {gpus - 1}")
    text = (
        f"# Generated by `python -m config.processes compose --gpus {gpus}` from {COMPOSE_FILE}'s gpu-worker-0\n"
        f"# (GPU 0): a copy per other GPU ({others}), each reserving its own device. Regenerate it after editing\n"
        "# gpu-worker-0.\n"
        + yaml.safe_dump(compose_override(gpus), sort_keys=False, default_flow_style=False, allow_unicode=True)
    )
    if out is None:
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)


def demo_web_argv(port: int) -> list[str]:
    """The demo's web server: Django's, one threaded process on loopback that needs no tuning on a laptop
    (both serve the static files: gunicorn through WhiteNoise). --noreload: Ctrl-C stops it and nothing
    restarts the workers."""
    return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]


def demo_worker_argvs() -> dict[str, list[str]]:
    """The demo's workers: the production three, not one worker on every queue, so an import in the
    demo does not wait behind a round's training or planning, as in a deployment. On a 2-core
    machine a round's steps run one after another, so they rarely compute at once; the cost is the
    other processes' memory. One CPU worker process, where a deployment has 2."""
    return {
        "worker": process_argv("worker", concurrency=1, node="demo-cpu@%h"),
        "io-worker": process_argv("io-worker", node="demo-io@%h"),
        "gpu-worker": process_argv("gpu-worker", node="demo-gpu@%h"),
    }


def demo(data: str, port: int) -> int:
    """`make demo`: migrate (SQLite), prepare and load the bundled models, set up the TREC project and
    its users, start the workers in the background and the web server in the foreground."""
    for argv in (
        process_argv("migrate"),
        prepare_models_argv(verify=True),
        [sys.executable, "manage.py", "demo_setup", "--data", data],
    ):
        if subprocess.run(argv, check=False).returncode:
            return 1
    var_dir = Path(os.environ.get("VAR_DIR", "var"))
    (var_dir / "log").mkdir(parents=True, exist_ok=True)
    workers: list[subprocess.Popen[bytes]] = []
    # SIGTERM (make stopped, the terminal closed) unwinds like Ctrl-C, so the workers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for role, argv in demo_worker_argvs().items():
            log = var_dir / "log" / f"{role}.log"
            with log.open("ab") as out:  # the child keeps its own copy of the descriptor
                # A session of its own: Ctrl-C reaches the web server, and the workers are stopped below.
                workers.append(subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True))
            print(f"{role}: pid {workers[-1].pid}, log {log}")
        print("Round 1 of the demo project runs on them.")
        print(f"Users and passwords (also in {var_dir / 'demo-passwords.txt'}):")
        print((var_dir / "demo-passwords.txt").read_text())
        print(f"  Open http://127.0.0.1:{port}/ and log in as 'annotator' to label items.\n", flush=True)
        return subprocess.run(demo_web_argv(port), check=False).returncode
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(workers)


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (Celery's warm shutdown), then SIGKILL after 10 s: a task cut short is redelivered
    (acks_late), so waiting for a round's training to finish is not worth it."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m config.processes", description=__doc__.split("\n\n")[0])
    commands = cli.add_subparsers(dest="command", required=True)
    run_cli = commands.add_parser("run", help="exec one process of ROLE")
    run_cli.add_argument("role", choices=ROLES)
    run_cli.add_argument("--gpu-index", type=int, help="gpu-worker: this GPU of the host alone (CUDA_VISIBLE_DEVICES)")
    run_cli.add_argument("--bind", default="0.0.0.0:8000", help="web: the address to listen on")
    run_cli.add_argument("--concurrency", type=int, default=2, help="worker: processes in its pool")
    run_cli.add_argument("--node", help="worker roles: the Celery node name (keep the @%%h)")
    run_cli.add_argument("--queues", help="worker roles: comma list of queues (default, io, gpu)")
    compose_cli = commands.add_parser("compose", help="write the compose override for N GPUs")
    compose_cli.add_argument("--gpus", type=int, required=True)
    compose_cli.add_argument("--out", help="file to write (default: stdout)")
    demo_cli = commands.add_parser("demo", help="what `make demo` runs")
    demo_cli.add_argument("--data", default="../shared/data/trec")
    demo_cli.add_argument("--port", type=int, default=8000)
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        if options.command == "run":
            run(options.role, options)
        elif options.command == "compose":
            write_override(options.gpus, options.out)
        else:
            return demo(options.data, options.port)
    except ValueError as exc:
        sys.exit(f"config.processes: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
