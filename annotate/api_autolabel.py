"""REST for auto-labelling, in the style of annotate/api.py (token auth, JSON in and out).

    POST /api/projects/<id>/calibrations/ {"target", "delta", "cascade", "second_model_dir"}
                                          → 201 {"id", "status", "url"}
    GET  /api/calibrations/<id>/          → 200 status, ECE before/after, thresholds, bias, audit, budget
    POST /api/projects/<id>/autolabel/    {"audit_share", "max_shards_in_flight", "max_shards_per_worker",
                                           "chunk_size"} → 201
                                          (400 bad options or no calibration, 409 while a run is going)
    GET  /api/autolabel/<id>/             → 200 status, progress, ETA, tiers, dead letters, prefix-cache hit rate

Starting either, and reading either, needs the ML role in the project (the one named in the URL, or
the calibration's / run's own): annotate.access.token_required, as for the rounds API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from annotate.access import project_of, token_required
from annotate.api import _denied, _options
from annotate.models import AutolabelRun, Calibration, Project
from annotate.roles import ML
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto


def calibration_json(row: Calibration) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": row.id,
        "project": row.project_id,
        "status": row.status,
        "error": row.error,
        "target": row.target,
        "delta": row.delta,
        "cascade": row.cascade,
        "n_items": row.n_items,
        "n_calibration": row.n_calibration,
        "prompt_hash": row.prompt_hash,
        "adapter_set_hash": row.adapter_set_hash,
        "model_version": row.model_version,  # the predictor it was fitted on (predictor/model.py)
    }
    if row.status == Calibration.Status.DONE:
        body.update(
            ece_before=row.before.get("ece"),
            ece_after=row.after.get("ece"),
            calibrator=row.calibrator,
            thresholds=auto_sel.threshold_rows(calibration=row),
            bias=row.bias,
            gold=row.gold_report,
            blocked=row.blocked,
            audit=[asdict(s) for s in auto_sel.audit_statuses(calibration=row)],
            budget=auto_sel.budget(project=row.project, calibration=row),
        )
    return body


def run_json(row: AutolabelRun) -> dict[str, Any]:
    p = auto_sel.run_progress(run=row)
    return {
        "id": row.id,
        "project": row.project_id,
        "calibration": row.calibration_id,
        "status": row.status,
        "reason": row.reason,
        "model_version": row.model_version,  # the calibrated predictor stamped on its auto labels
        "progress": {
            "items_done": row.items_done,
            "n_items": row.n_items,
            "percent": p.percent,
            "shards": row.n_shards,
        },
        "eta_seconds": p.eta_seconds,
        "items_per_second": p.items_per_second,
        "prefix_cache_hit_rate": p.prefix_cache_hit_rate,
        "tiers": p.tiers,
        "dead_letters": p.dead_letters,
    }


def _number(options: dict[str, Any], key: str, default: float, kind: type = float) -> Any:
    value = options.get(key, default)
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise auto.AutolabelError(f"{key} must be a number, got {value!r}") from exc


def _start(
    request: HttpRequest, project_id: int, create: Callable[[Project, Any, dict], Any], url: str
) -> JsonResponse:
    """The POST endpoints (the ML token checked by their policy): the project, the options → one
    service; 201, 400 or 409."""
    project = get_object_or_404(Project, pk=project_id)
    try:
        row = create(project, request.user, _options(request))
    except auto.RunActiveError as exc:
        return _denied(409, str(exc))
    except ValueError as exc:
        return _denied(400, str(exc))
    return JsonResponse({"id": row.id, "status": row.status, "url": reverse(url, args=[row.id])}, status=201)


@csrf_exempt
@token_required(ML)
@require_POST
def api_calibration_start(request: HttpRequest, project_id: int) -> JsonResponse:
    def create(project: Project, user: Any, options: dict) -> Calibration:
        return auto.calibration_request(
            project=project,
            user=user,
            target=_number(options, "target", 0.95),
            delta=_number(options, "delta", 0.05),
            cascade=str(options.get("cascade") or "agreement"),
            second_model_dir=str(options.get("second_model_dir") or ""),
        )

    return _start(request, project_id, create, "api_calibration")


@token_required(ML, project=project_of(Calibration, "calibration_id"))
@require_GET
def api_calibration(request: HttpRequest, calibration_id: int) -> JsonResponse:
    return JsonResponse(calibration_json(get_object_or_404(Calibration, pk=calibration_id)))


@csrf_exempt
@token_required(ML)
@require_POST
def api_autolabel_start(request: HttpRequest, project_id: int) -> JsonResponse:
    def create(project: Project, user: Any, options: dict) -> AutolabelRun:
        return auto.run_request(
            project=project,
            user=user,
            audit_share=_number(options, "audit_share", 0.02),
            max_shards_in_flight=_number(options, "max_shards_in_flight", 4, int),
            max_shards_per_worker=_number(options, "max_shards_per_worker", 2, int),
            chunk_size=_number(options, "chunk_size", 256, int),
        )

    return _start(request, project_id, create, "api_autolabel")


@token_required(ML, project=project_of(AutolabelRun, "run_id"))
@require_GET
def api_autolabel(request: HttpRequest, run_id: int) -> JsonResponse:
    return JsonResponse(run_json(get_object_or_404(AutolabelRun, pk=run_id)))
