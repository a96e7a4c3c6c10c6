"""The crash tests' step hook: stop a worker at a named step point (annotate/steppoints.py) so that
a test SIGKILLs it exactly there (tests/integration/test_kill_every_step.py). A worker runs it when
its environment names it (``stall_env``):

    ALANN_STEP_HOOK=devtools.stall.stall            the app calls this at every step point
    ALANN_TEST_STALL=select,score,evaluate,import   the points that stall (``point=key``: at that key only)
    ALANN_TEST_STALL_DIR=/tmp/...                   where the markers go
    ALANN_TEST_STALL_S=120                          how long a stalled process sleeps

The first process to reach a listed point with a given key creates ``<dir>/<point>-<key>``
(atomically: one process wins) and sleeps; the marker stays, so the run that resumes after the kill
passes the point.

Points: ``import`` (an import's insert, after its first chunk, inside the transaction), ``score`` (a
shard, after its first scored chunk was cached and counted), ``select`` (a batch chosen, not yet
written), ``evaluate`` (the test set scored, metrics not yet written), ``evaluate_progress`` (a chunk of the
evaluation scored and counted; key: the round's id), ``autolabel`` (a bulk run's
shard, after a chunk's decisions committed; key: the shard's number), ``calibrate`` (a calibration's
items scored, nothing written; key: its id), ``train`` (an adapter halfway, its checkpoint written;
key ``<project name>-<arm>:<k>``), ``label_error_scan`` (a label-error scan's labels embedded, nothing
written; key: its id), ``claim`` (a round's unit received by a worker, not yet claimed; key
``<round id>-<what>``, e.g. ``7-adapter prod:1``)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def stall_env(points: str, directory: Path) -> dict[str, str]:
    """The environment that makes a worker stall at ``points`` (comma-separated), markers in ``directory``."""
    return {
        "ALANN_STEP_HOOK": "devtools.stall.stall",
        "ALANN_TEST_STALL": points,
        "ALANN_TEST_STALL_DIR": str(directory),
    }


def stall(point: str, key: object = "") -> None:
    points = os.environ.get("ALANN_TEST_STALL")
    if not points or not any(entry in (point, f"{point}={key}") for entry in points.split(",")):
        return
    marker = Path(os.environ["ALANN_TEST_STALL_DIR"]) / f"{point}-{key}"
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    time.sleep(float(os.environ.get("ALANN_TEST_STALL_S", "120")))
