"""Named points in the step services where something outside the app may act: the crash tests stop a
worker there and SIGKILL it (devtools/stall.py, tests/integration/test_kill_every_step.py).
Production runs nothing: the ``STEP_HOOK`` setting (env ``ALANN_STEP_HOOK``) is None unless a
dotted path names a callable ``hook(point, key)``.

Points: ``import`` (an import's insert, after its first chunk, inside the transaction; key: the file
name), ``score`` (a shard, after its first scored chunk was cached and counted; key: the round's
number), ``select`` (a batch chosen, not yet written), ``evaluate`` (the test set scored, metrics not
yet written), ``evaluate_progress`` (a chunk of the evaluation scored and counted on the round; key: the
round's id), ``autolabel`` (a bulk run's shard, after a chunk's decisions committed; key: the shard's
number), ``train`` (an adapter halfway, its checkpoint written; key ``<project name>-<arm>:<k>``),
``label_error_scan`` (a possible-label-errors scan's labels embedded, nothing written; key: the scan's id),
``claim`` (a round's unit of work received by a worker, not yet claimed; key ``<round id>-<what>``, e.g.
``7-adapter prod:1``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

Hook = Callable[[str, object], None]


def reached(point: str, key: object = "") -> None:
    """Run the configured hook at ``point``; without one (production), one settings lookup."""
    path = getattr(settings, "STEP_HOOK", None)
    if path:
        _hook(path)(point, key)


@cache
def _hook(path: str) -> Hook:
    hook: Hook = import_string(path)
    return hook
