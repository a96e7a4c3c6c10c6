"""Rounds. For now the ML page only records requests: a new pending Round row, or a retrain flag on the
current round. The orchestration (scoring, selection, training, evaluation) extends this module."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from annotate.models import Project, Round

ACTIVE_STATUSES = (
    Round.Status.PENDING,
    Round.Status.SCORING,
    Round.Status.SELECTING,
    Round.Status.LABELING,
    Round.Status.TRAINING,
    Round.Status.EVALUATING,
)


class RoundError(ValueError):
    pass


def round_request_start(*, project: Project, user: Any) -> Round:
    """Record a request for the next round (status pending). Refused while another round is active."""
    try:
        with transaction.atomic():
            active = Round.objects.filter(project=project, status__in=ACTIVE_STATUSES).order_by("-number").first()
            if active is not None:
                raise RoundError(f"round {active.number} is still {active.status}; wait until it is done")
            last = Round.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0
            number = last + 1
            return Round.objects.create(
                project=project,
                number=number,
                status=Round.Status.PENDING,
                requested_by=user,
                seed=project.seed + number,
            )
    except IntegrityError as exc:  # two clicks raced for the same number: the other one won
        raise RoundError("another request for this round was recorded at the same moment") from exc


@transaction.atomic
def round_request_retrain(*, project: Project, user: Any) -> Round:
    """Flag the current (latest) round for retraining. Idempotent."""
    current = Round.objects.select_for_update().filter(project=project).order_by("-number").first()
    if current is None:
        raise RoundError("there is no round to retrain yet; start a round first")
    if not current.retrain_requested:
        current.retrain_requested = True
        current.save(update_fields=["retrain_requested", "updated_at"])
    return current
