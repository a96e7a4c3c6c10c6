"""A small REST endpoint for scripts and CI: start a round, poll its status.

    POST /api/projects/<id>/rounds/   → 201 {"id", "number", "status", "strategy", "url"}
         optional body {"strategy": one of acquisition.strategies.STRATEGIES: "active", "random", "portfolio", ...}
         (JSON or form fields; default active) → 400 for an unknown one, 409 when a round is active
    GET  /api/rounds/<id>/            → 200 {"status", "progress": {...}, "metrics": {...}, "cost": {...},
                                             "config": {...}, "config_fingerprint": sha256}

Auth: ``Authorization: Token <token>`` (annotate.access.token_required: 401 without one, 403 JSON when
the policy refuses). Starting a round needs the ML role in its project, reading one any role in the
round's project.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from annotate.access import project_of, token_required
from annotate.models import Project, Round
from annotate.roles import ALL_ROLES, ML
from annotate.selectors import loop as loop_sel
from annotate.services.imports import strict_json
from annotate.services.rounds import RoundError, UnknownStrategyError, round_request_start


def _denied(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _options(request: HttpRequest) -> dict[str, Any]:
    """The POST's options: a JSON object, or form fields. ValueError for a body that is neither, is
    too big, repeats a key or nests too deeply."""
    try:
        if request.content_type != "application/json":
            return request.POST.dict()
        payload = strict_json(request.body or b"{}")
    except RequestDataTooBig:
        raise ValueError(f"the body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes") from None
    if not isinstance(payload, dict):
        raise ValueError("the body must be a JSON object")
    return payload


def round_json(row: Round) -> dict[str, Any]:
    metrics = {k: v for k, v in (row.metrics or {}).items() if not k.endswith("_svg")}
    return {
        "id": row.id,
        "project": row.project_id,
        "number": row.number,
        "status": row.status,
        "failure_reason": row.failure_reason,
        "strategy": row.strategy,
        "pool_exhausted": row.pool_exhausted,  # the pool's end: no batch, the final model, the last round
        "training_mode": row.training_mode,  # "warm" or "scratch" once its training plan is fixed
        "progress": {
            "items_to_score": row.items_to_score,
            "items_scored": row.items_scored,
            "batch_size": loop_sel.batch_size(round=row),
            "labels_collected": loop_sel.labels_collected(round=row),
            "train_steps_total": row.train_steps_total,
            "train_steps_done": row.train_steps_done,
        },
        "metrics": metrics,
        "cost": row.cost,
        # what every process ran this round with, frozen when it was requested (annotate/loopconfig.py)
        "config": row.config,
        "config_fingerprint": row.config_fingerprint,
    }


@csrf_exempt
@token_required(ML)
@require_POST
def api_round_start(request: HttpRequest, project_id: int) -> JsonResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        strategy = str(_options(request).get("strategy") or "active")[:100]  # no names that long: keep errors short
    except ValueError as exc:
        return _denied(400, f"unreadable body: {exc}")
    try:
        row = round_request_start(project=project, user=request.user, strategy=strategy)
    except UnknownStrategyError as exc:
        return _denied(400, str(exc))
    except RoundError as exc:
        return _denied(409, str(exc))
    body = {
        "id": row.id,
        "number": row.number,
        "status": row.status,
        "strategy": row.strategy,
        "url": reverse("api_round", args=[row.id]),
    }
    return JsonResponse(body, status=201)


@token_required(*ALL_ROLES, project=project_of(Round, "round_id"))
@require_GET
def api_round(request: HttpRequest, round_id: int) -> JsonResponse:
    row = get_object_or_404(Round, pk=round_id)
    return JsonResponse(round_json(row))
