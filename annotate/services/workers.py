"""Who is doing a unit of round work, and whether that process still runs.

A claim (annotate/services/jobs.py) records ``worker_id()`` of the process holding it; any other
process asks ``worker_alive`` before taking it over. Same host: the pid is checked (a zombie counts
as dead); another host: its Celery node must answer a ping within 2 s.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def on_this_host(worker: str) -> bool:
    return worker.rpartition(":")[0] == socket.gethostname()


def worker_alive(worker: str) -> bool:
    """Whether the process named ``host:pid`` still runs. This very process counts as dead: a claim
    it holds is one an earlier attempt of its own left (a retry), which it may take over."""
    host, _, pid = worker.rpartition(":")
    if not host or not pid.isdigit():
        return False
    if host == socket.gethostname():
        if int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _is_zombie(int(pid))
    return any(host in name for name in _celery_nodes())


_NODES: list[Any] = [0.0, set()]  # (monotonic time of the last ping, node names that answered)
NODES_TTL_S = 10.0  # a ping waits its whole timeout: one per 10 s serves every check in between


def _celery_nodes() -> set[str]:
    """Names of the Celery nodes answering a 2 s ping (reused for NODES_TTL_S)."""
    if time.monotonic() - _NODES[0] > NODES_TTL_S:
        from config.celery import app

        replies = app.control.ping(timeout=2.0) or []
        _NODES[:] = [time.monotonic(), {name for reply in replies for name in reply}]
    return set(_NODES[1])


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False
