"""Project setup (ML staff): labels with verified codes, guidelines, prompt, loop knobs."""

from __future__ import annotations

import markdown
import nh3
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotate.access import role_required
from annotate.forms_setup import ProjectSetupForm
from annotate.models import Project
from annotate.roles import ML
from annotate.services.projects import ProjectError, project_create
from annotate.services.setup import project_update


def guidelines_html(text: str) -> str:
    """Markdown to HTML, then sanitised (nh3 drops scripts, event handlers, javascript: links)."""
    return nh3.clean(markdown.markdown(text, extensions=["sane_lists", "tables"]))


def _render(request: HttpRequest, form: ProjectSetupForm, project: Project | None) -> HttpResponse:
    preview = guidelines_html(form["guidelines"].value() or "")
    status = 400 if form.is_bound and form.errors else 200
    context = {"form": form, "project": project, "guidelines_preview": preview}
    return render(request, "annotate/setup.html", context, status=status)


@role_required(ML)
def setup_new(request: HttpRequest) -> HttpResponse:
    form = ProjectSetupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = project_create(
                name=form.cleaned_data["name"],
                labels=form.cleaned_data["labels_text"],
                created_by=request.user,
                **form.project_fields(),
            )
        except ProjectError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Project “{project.name}” created. Next: upload the texts to label.")
            for warning in form.case_warnings:
                messages.warning(request, warning)
            return redirect("import_upload", project_id=project.pk)
    return _render(request, form, None)


@role_required(ML)
def project_setup(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = ProjectSetupForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        try:
            project_update(
                project=project,
                labels=form.cleaned_data["labels_text"],
                name=form.cleaned_data["name"],
                **form.project_fields(),
            )
        except ProjectError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Setup saved.")
            for warning in form.case_warnings:
                messages.warning(request, warning)
            return redirect("project_setup", project_id=project.pk)
    return _render(request, form, project)
