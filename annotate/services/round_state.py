"""A round's bookkeeping, shared by every round service: the guarded status move, failing a round,
its cost, its folders and training plan, and the state of its deferred comparison arms. Imports only
the models and the frozen configuration, so any service may import it and it imports none.

Statuses and the allowed moves are on the model (``Round.Status``, ``Round.TRANSITIONS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotate.loopconfig import round_arms_deferred
from annotate.models import AdapterVersion, AutolabelRun, Round, WorkClaim, WorkStatus
from scoring.files import atomic_write_json

S = Round.Status
MAX_REASON = 2000

Plan = dict[str, list[list[int]]]  # "arm:k" -> [[item id, label index], ...]


class RoundError(ValueError):
    """A request the round cannot take now; the message is shown as is."""


def round_transition(round_id: int, from_status: str, to_status: str, **fields: Any) -> bool:
    """Move the round from ``from_status`` to ``to_status`` (and set ``fields``) if and only if it is
    still in ``from_status``. True for the one caller that moved it."""
    if to_status not in Round.TRANSITIONS.get(from_status, frozenset()):
        raise RoundError(f"a round cannot go from {from_status} to {to_status}")
    if to_status == S.DONE:
        fields.setdefault("finished_at", timezone.now())
    moved = Round.objects.filter(id=round_id, status=from_status).update(
        status=to_status, updated_at=timezone.now(), **fields
    )
    return moved == 1


def round_fail(*, round_id: int, reason: str) -> bool:
    """Mark an unfinished round failed with the reason (shown on the ML page). Idempotent."""
    moved = Round.objects.filter(id=round_id, status__in=Round.ACTIVE_STATUSES).update(
        status=S.FAILED, failure_reason=reason[:MAX_REASON], finished_at=timezone.now(), updated_at=timezone.now()
    )
    if moved:  # a failed round owes no comparison (its arms are trained after a done round only)
        WorkClaim.objects.filter(round_id=round_id, kind=WorkClaim.Kind.ARMS_EVAL).exclude(
            status=WorkStatus.DONE
        ).update(status=WorkStatus.DONE, error="the round failed")
    return moved == 1


# The comparison adapters trained after the round (loop option arms_timing "deferred"): their state in
# the round's metrics["comparison"] ({"state": ..., "reason": ...}), what the ML page shows until their
# points join the learning curve.
COMPARISON = "comparison"
COMPARISON_WAITING = "waiting"  # planned; trained once the next round's batch is out
COMPARISON_RUNNING = "running"
COMPARISON_DONE = "done"
COMPARISON_FAILED = "failed"  # given up after MAX_ATTEMPTS: the round stays done, the reason is shown
# their seconds in Round.cost["steps"], apart from the round's own training and evaluating
COMPARISON_TRAINING_COST = "comparison_training"
COMPARISON_EVALUATING_COST = "comparison_evaluating"


def comparison_mark(*, round_id: int, state: str, reason: str = "", **metrics: Any) -> bool:
    """Set the round's comparison ``state`` (and merge ``metrics`` into Round.metrics) under its row
    lock; a comparison already done or failed stays so. True when it wrote."""
    with transaction.atomic():
        row = Round.objects.select_for_update().get(id=round_id)
        current = dict(row.metrics or {})
        if (current.get(COMPARISON) or {}).get("state") in (COMPARISON_DONE, COMPARISON_FAILED):
            return False
        current.update(metrics)
        current[COMPARISON] = {"state": state, **({"reason": reason[:MAX_REASON]} if reason else {})}
        Round.objects.filter(id=round_id).update(metrics=current)
        return True


def comparison_give_up(*, round_id: int, reason: str) -> None:
    """The deferred comparison failed every attempt: the round says why, and its ``arms_eval`` unit is
    closed (nothing more is owed, nothing is left running; the round stays done)."""
    comparison_mark(round_id=round_id, state=COMPARISON_FAILED, reason=f"not measured: {reason}")
    WorkClaim.objects.filter(round_id=round_id, kind=WorkClaim.Kind.ARMS_EVAL).exclude(status=WorkStatus.DONE).update(
        status=WorkStatus.DONE, error=reason[:MAX_REASON]
    )


def comparison_keys(row: Round) -> list[str]:
    """The planned comparison adapters ("arm:k" of scratch, active, random) the round trains after it is
    done (loop option arms_timing "deferred"); empty when it trains them in the round, or has none."""
    if not plan_path(row).is_file() or not round_arms_deferred(row):
        return []
    return [key for key in read_plan(row) if not key.startswith(f"{AdapterVersion.Arm.PROD}:")]


def add_cost(*, round_id: int, step: str, seconds: float, device: str, **counts: float) -> None:
    """Accumulate a step's seconds (and counters) in Round.cost under a row lock."""
    with transaction.atomic():
        row = Round.objects.select_for_update().get(id=round_id)
        cost = dict(row.cost or {})
        steps = dict(cost.get("steps", {}))
        entry = dict(steps.get(step, {"seconds": 0.0, "device": device}))
        entry["seconds"] = round(float(entry.get("seconds", 0.0)) + seconds, 3)
        entry["device"] = device
        for key, value in counts.items():
            entry[key] = entry.get(key, 0) + value
        steps[step] = entry
        cost["steps"] = steps
        Round.objects.filter(id=round_id).update(cost=cost)


# -- folders ----------------------------------------------------------------------------------------


def run_key(row: Round) -> str:
    """The round's creation time in µs: part of its folder names, so a database that reuses ids (SQLite
    after a rollback, a restored backup) never finds another round's shards or adapters there."""
    return f"{int(row.created_at.timestamp() * 1_000_000):x}"


def round_score_dir(row: Round) -> Path:
    """The round's candidates and score shards."""
    return Path(settings.SCORE_DIR) / f"round_{row.id}-{run_key(row)}"


def autolabel_run_dir(run: AutolabelRun) -> Path:
    """An auto-labelling run's item list, shard index and decisions (annotate/services/autolabel.py)."""
    return Path(settings.SCORE_DIR) / f"autolabel_{run.id}-{int(run.created_at.timestamp() * 1e6):x}"


def round_dir(row: Round) -> Path:
    """The round's adapters and its frozen training plan."""
    return Path(settings.ADAPTER_DIR) / f"project_{row.project_id}" / f"round_{row.number}-{run_key(row)}"


def plan_path(row: Round) -> Path:
    return round_dir(row) / "train_plan.json"


def read_plan(row: Round) -> Plan:
    return dict(json.loads(plan_path(row).read_text()))


def write_plan(row: Round, plan: Plan) -> None:
    atomic_write_json(plan_path(row), plan)
