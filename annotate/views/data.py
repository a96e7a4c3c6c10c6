"""Data in and out in the browser: upload an import (runs as a background task, polled progress bar),
the export page (the training export with columns and filters) and the label / prediction downloads."""

from __future__ import annotations

import uuid
from pathlib import Path

from django import forms
from django.conf import settings
from django.db import transaction
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from annotate.access import role_required
from annotate.forms_data import ExportForm
from annotate.models import ExportSnapshot, ImportJob, Project
from annotate.roles import LEAD, ML
from annotate.selectors.notify import round_snapshots
from annotate.selectors.projects import test_set_state
from annotate.services.exports import export_labels, export_predictions
from annotate.services.exports_dataset import DATASET_COLUMNS, export_dataset, export_dataset_parquet
from annotate.services.imports import ImportFailed, detect_format, import_create


class UploadForm(forms.Form):
    # allow_empty_file: the import's own check names the file ("x.csv: the file is empty"), Django's does not.
    file = forms.FileField(
        allow_empty_file=True, help_text="CSV or JSONL: text (required), id, label; other columns kept as metadata"
    )
    gold_for_test = forms.BooleanField(required=False, label="Gold labels (id,label) for test-set items")
    keep_duplicates = forms.BooleanField(
        required=False,
        label="Keep rows whose text is already in the project",
        help_text="Off: a row whose text (ignoring differences in spacing) is already in the project, or earlier "
        "in the file, is skipped and counted.",
    )

    def clean_file(self) -> object:
        upload = self.cleaned_data["file"]
        try:
            detect_format(upload.name)
        except ImportFailed as exc:
            raise forms.ValidationError(str(exc)) from exc
        if not upload.size:
            raise forms.ValidationError(f"{upload.name}: the file is empty")
        return upload


def _store_upload(project: Project, upload: object) -> Path:
    """Uploads land in a fresh directory each, so two uploads of the same name never collide."""
    target = settings.UPLOAD_DIR / f"p{project.id}" / uuid.uuid4().hex / Path(upload.name).name  # type: ignore[attr-defined]
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        for chunk in upload.chunks():  # type: ignore[attr-defined]
            out.write(chunk)
    return target


@role_required(ML)
def import_upload(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = UploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        path = _store_upload(project, form.cleaned_data["file"])
        with transaction.atomic():
            job = import_create(
                project=project,
                path=path,
                filename=form.cleaned_data["file"].name,
                user=request.user,
                gold_for_test=form.cleaned_data["gold_for_test"],
                skip_duplicates=not form.cleaned_data["keep_duplicates"],
            )
        return redirect("import_status", project_id=project.id, job_id=job.id)
    jobs = ImportJob.objects.filter(project=project).order_by("-created_at")[:10]
    context = {"project": project, "form": form, "jobs": jobs, "test_set": test_set_state(project=project)}
    return render(request, "annotate/import.html", context)


@role_required(ML)
def import_status(request: HttpRequest, project_id: int, job_id: int) -> HttpResponse:
    job = get_object_or_404(ImportJob, pk=job_id, project_id=project_id)
    context = {"project": job.project, "job": job}
    htmx: HtmxDetails = request.htmx  # type: ignore[attr-defined]
    if htmx:
        response = render(request, "annotate/import_status.html#job", context)
        if job.status in (ImportJob.Status.DONE, ImportJob.Status.FAILED):
            return HttpResponseStopPolling(response.content)
        return response
    return render(request, "annotate/import_status.html", context)


# format → (content type, file extension)
DOWNLOADS = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "csv_raw": ("text/csv; charset=utf-8", "csv"),
    "jsonl": ("application/x-ndjson; charset=utf-8", "jsonl"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
}


def _streamed(chunks: object, *, project: Project, name: str, fmt: str) -> StreamingHttpResponse:
    content_type, extension = DOWNLOADS[fmt]
    response = StreamingHttpResponse(chunks, content_type=content_type)  # type: ignore[arg-type]
    response["Content-Disposition"] = f'attachment; filename="project{project.id}-{name}.{extension}"'
    return response


@role_required(ML, LEAD)
def export_page(request: HttpRequest, project_id: int) -> HttpResponseBase:
    """The export page (leads and ML staff): the training export with a choice of columns and
    filters (GET ?download=1 streams it), and the audit and prediction downloads."""
    project = get_object_or_404(Project, pk=project_id)
    bound = "download" in request.GET
    form = ExportForm(request.GET if bound else None, project=project)
    if bound and form.is_valid():
        fmt = form.cleaned_data["fmt"]
        body = (
            export_dataset_parquet(project=project, spec=form.spec())
            if fmt == "parquet"
            else export_dataset(project=project, fmt=fmt, spec=form.spec())
        )
        return _streamed(body, project=project, name="labels", fmt=fmt)
    snapshots = round_snapshots(project=project)
    context = {"project": project, "form": form, "columns": DATASET_COLUMNS, "snapshots": snapshots}
    return render(request, "annotate/export.html", context, status=400 if bound else 200)


@role_required(ML, LEAD)
def export_snapshot(request: HttpRequest, project_id: int, snapshot_id: int) -> FileResponse:
    """A round's export snapshot, as written when the round finished."""
    snapshot = get_object_or_404(
        ExportSnapshot, pk=snapshot_id, project_id=project_id, status=ExportSnapshot.Status.DONE
    )
    path = Path(snapshot.path)
    if not path.is_file():
        raise Http404("the snapshot's file is gone from the export folder")
    name = f"project{project_id}-round{snapshot.round.number}-labels.{snapshot.fmt}"
    return FileResponse(path.open("rb"), as_attachment=True, filename=name, content_type=DOWNLOADS[snapshot.fmt][0])


@role_required(ML, LEAD)
def export_download(request: HttpRequest, project_id: int, what: str, fmt: str) -> HttpResponseBase:
    project = get_object_or_404(Project, pk=project_id)
    export = export_labels if what == "labels" else export_predictions
    return _streamed(export(project=project, fmt=fmt), project=project, name=what, fmt=fmt)
