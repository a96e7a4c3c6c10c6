"""Auto-labelling pages: the ML section (gold set → calibrate → review thresholds → launch →
progress/ETA → audit) and the leads' dead letters with retry. Thin: a form, one service, render."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from annotate.access import role_required
from annotate.forms_autolabel import CalibrateForm, GoldDrawForm, LaunchForm, SplitDrawForm, first_error, given
from annotate.models import Project
from annotate.roles import LEAD, ML
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto
from annotate.services.exports_autolabel import export_dataset, export_dataset_parquet


def _context(project: Project, **extra: Any) -> dict[str, Any]:
    calibration = auto_sel.latest_calibration(project=project)
    done = calibration if calibration is not None and calibration.status == "done" else None
    run = auto_sel.latest_run(project=project)
    progress = auto_sel.run_progress(run=run) if run is not None else None
    working = (calibration is not None and calibration.status in ("pending", "running")) or bool(
        progress and progress.active
    )
    return {
        "project": project,
        "calibration": calibration,
        "thresholds": auto_sel.threshold_rows(calibration=done) if done else [],
        "budget": auto_sel.budget(project=project, calibration=done) if done else None,
        "audit": [s for s in auto_sel.audit_statuses(calibration=done) if s.audited] if done else [],
        "audits_waiting": auto_sel.audits_waiting(calibration=done) if done else 0,
        "oracle": auto_sel.oracle_precision(calibration=done) if done else [],
        "split": auto_sel.calibration_split_counts(project=project),
        "run": run,
        "progress": progress,
        "working": working,
        "eval_count": len(auto_sel.eval_items(project=project).item_ids),
        "gold_count": project.gold_items.count(),
        **extra,
    }


@role_required(ML)
def autolabel_home(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    forms = {
        "gold_form": GoldDrawForm(),
        "split_form": SplitDrawForm(),
        "calibrate_form": CalibrateForm(),
        "launch_form": LaunchForm(),
    }
    return render(request, "annotate/autolabel.html", _context(project, **forms))


@role_required(ML)
def autolabel_status(request: HttpRequest, project_id: int) -> HttpResponse:
    """The polled status partial; stops the polling once nothing is working."""
    project = get_object_or_404(Project, pk=project_id)
    context = _context(project)
    response = render(request, "annotate/autolabel.html#status", context)
    return response if context["working"] else HttpResponseStopPolling(response.content)


def _after(request: HttpRequest, project: Project, done: str, error: str) -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "annotate/autolabel.html#status", _context(project, notice=done, error=error))
    if error:
        messages.error(request, error)
    else:
        messages.success(request, done)
    return redirect("autolabel_home", project_id=project.pk)


def _form_post(
    request: HttpRequest, project_id: int, form_class: type, act: Callable[[Project, dict], str]
) -> HttpResponse:
    """Validate the form, call one service through ``act`` (returns the notice), answer."""
    project = get_object_or_404(Project, pk=project_id)
    form = form_class(request.POST)
    if not form.is_valid():
        return _after(request, project, "", first_error(form))
    try:
        notice = act(project, form.cleaned_data)
    except auto.AutolabelError as exc:
        return _after(request, project, "", str(exc))
    return _after(request, project, notice, "")


@role_required(ML)
@require_POST
def autolabel_gold(request: HttpRequest, project_id: int) -> HttpResponse:
    def act(project: Project, data: dict) -> str:
        added = auto.gold_draw(project=project, per_class=data["per_class"], seed=project.seed)
        return f"{added} gold items drawn; annotators label each twice, blind."

    return _form_post(request, project_id, GoldDrawForm, act)


@role_required(ML)
@require_POST
def autolabel_split(request: HttpRequest, project_id: int) -> HttpResponse:
    def act(project: Project, data: dict) -> str:
        added = auto.calibration_split_draw(project=project, n=data["n"], seed=project.seed)
        return f"{added} random pool items drawn into the calibration split; annotators label each once."

    return _form_post(request, project_id, SplitDrawForm, act)


@role_required(ML)
@require_POST
def autolabel_calibrate(request: HttpRequest, project_id: int) -> HttpResponse:
    def act(project: Project, data: dict) -> str:
        row = auto.calibration_request(project=project, user=request.user, **given(data))
        return f"Calibration #{row.id} requested."

    return _form_post(request, project_id, CalibrateForm, act)


@role_required(ML)
@require_POST
def autolabel_launch(request: HttpRequest, project_id: int) -> HttpResponse:
    def act(project: Project, data: dict) -> str:
        return f"Run #{auto.run_request(project=project, user=request.user, **given(data)).id} requested."

    return _form_post(request, project_id, LaunchForm, act)


@role_required(ML)
@require_POST
def autolabel_audit_refresh(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    calibration = auto_sel.latest_calibration(project=project, done=True)
    if calibration is None:
        return _after(request, project, "", "calibrate first")
    alarms = [s.label for s in auto.audit_refresh(calibration=calibration) if s.alarm]
    note = f"Auto-accept stopped for {', '.join(alarms)}." if alarms else "Audit settled; no class under target."
    return _after(request, project, note, "")


@role_required(LEAD, ML)
def dead_letters(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    rows = list(auto_sel.dead_letters(project=project)[:500])
    return render(request, "annotate/dead_letters.html", {"project": project, "letters": rows})


@role_required(LEAD, ML)
@require_POST
def dead_letters_retry(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    raw = request.POST.getlist("letter")
    ids = [int(x) for x in raw if x.isdigit()] if raw else None
    count = auto.dead_letter_retry(project=project, ids=ids)
    messages.success(request, f"{count} dead letters queued for another try.")
    return redirect("dead_letters", project_id=project.pk)


CONTENT_TYPES = {"csv": "text/csv", "jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


@role_required(LEAD, ML)
def dataset_download(request: HttpRequest, project_id: int, fmt: str) -> StreamingHttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    body = export_dataset_parquet(project=project) if fmt == "parquet" else export_dataset(project=project, fmt=fmt)
    response = StreamingHttpResponse(body, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="project-{project.pk}-dataset.{fmt}"'
    return response
