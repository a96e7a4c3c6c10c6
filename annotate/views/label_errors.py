"""The possible-label-errors queue (leads): human labels an out-of-sample predictor contradicts with
confidence, with the evidence; a scan on demand, run by a worker while the page polls its status; keep
or relabel, one suspect at a time."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from annotate.access import role_required
from annotate.models import Label, LabelErrorScan, LabelSuspect, Project
from annotate.roles import LEAD, ML
from annotate.services.label_errors import (
    DEFAULT_MIN_RATIO,
    MIN_LABELS,
    LabelErrorError,
    label_error_scan_request,
    label_suspect_decide,
)

PAGE = "annotate/label_errors.html"


def _context(project: Project, **extra: Any) -> dict[str, Any]:
    suspects = LabelSuspect.objects.filter(project=project).select_related("item", "given", "suggested", "decided_by")
    return {
        "project": project,
        "scan": LabelErrorScan.objects.filter(project=project).select_related("requested_by").order_by("-id").first(),
        "steps": len(LabelErrorScan.Step.choices) - 1,
        "open": suspects.filter(decision=LabelSuspect.Decision.OPEN).order_by("p_given", "id")[:200],
        "decided": suspects.exclude(decision=LabelSuspect.Decision.OPEN).order_by("-decided_at")[:50],
        "labels": Label.objects.filter(project=project).order_by("order", "id"),
        "min_ratio": DEFAULT_MIN_RATIO,
        "min_labels": MIN_LABELS,
        **extra,
    }


@role_required(LEAD, ML)
def label_errors(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    return render(request, PAGE, _context(project))


def _scan_status(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """The scan's status partial; once the scan is over it also swaps the suspects in (out of band) and
    stops the polling."""
    scan = context["scan"]
    if scan is not None and scan.active:
        return render(request, f"{PAGE}#scan", context)
    response = render(request, f"{PAGE}#scan", {**context, "suspects_oob": True})
    return HttpResponseStopPolling(response.content)


@role_required(LEAD, ML)
def label_errors_scan_status(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    if not request.htmx:  # type: ignore[attr-defined]
        return redirect("label_errors", project_id=project.pk)
    return _scan_status(request, _context(project))


@role_required(LEAD, ML)
@require_POST
def label_errors_scan(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    scan, new = label_error_scan_request(project=project, user=request.user)
    notice = "" if new else f"Scan #{scan.pk} is already {scan.status}: this is it."
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, f"{PAGE}#scan", _context(project, notice=notice))
    if notice:
        messages.info(request, notice)
    return redirect("label_errors", project_id=project.pk)


@role_required(LEAD, ML)
@require_POST
def label_errors_decide(request: HttpRequest, project_id: int, suspect_id: int) -> HttpResponse:
    suspect = get_object_or_404(LabelSuspect, pk=suspect_id, project_id=project_id)
    choice = request.POST.get("label", "")
    if not choice:  # the "other label" list left on "Choose…": nothing is decided (never read as keep)
        messages.error(request, f"{suspect.item.external_id}: not decided: choose a label, or keep the label.")
        return redirect("label_errors", project_id=project_id)
    label = None
    if choice != "keep":
        label = Label.objects.filter(project_id=project_id, pk=choice).first() if choice.isdigit() else None
        if label is None:
            messages.error(request, "Choose a label of this project, or keep the label.")
            return redirect("label_errors", project_id=project_id)
    try:
        done = label_suspect_decide(suspect=suspect, lead=request.user, label=label, note=request.POST.get("note", ""))
    except LabelErrorError as exc:
        messages.error(request, f"Not decided: {exc}.")
    else:
        what = "kept" if done.decision == LabelSuspect.Decision.KEPT else f"relabelled to {label.name if label else ''}"
        messages.success(request, f"{done.item.external_id}: label {what}.")
    return redirect("label_errors", project_id=project_id)
