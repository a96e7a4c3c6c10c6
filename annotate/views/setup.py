"""Project setup (ML staff): labels with verified codes, guidelines, prompt, loop knobs."""

from __future__ import annotations

import markdown
import nh3
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from annotate.access import role_required
from annotate.forms_setup import ProjectDeleteForm, ProjectSetupForm
from annotate.models import Project
from annotate.roles import ML
from annotate.selectors.notify import recent_deliveries
from annotate.selectors.projects import setup_progress, test_set_state
from annotate.services.projects import ProjectError, TestSetRedraw, project_create
from annotate.services.projects import project_archive as project_archive_service
from annotate.services.projects import project_delete as project_delete_service
from annotate.services.setup import project_update


def guidelines_html(text: str) -> str:
    """Markdown to HTML, then sanitised (nh3 drops scripts, event handlers, javascript: links)."""
    return nh3.clean(markdown.markdown(text, extensions=["sane_lists", "tables"]))


def _render(request: HttpRequest, form: ProjectSetupForm, project: Project | None) -> HttpResponse:
    preview = guidelines_html(form["guidelines"].value() or "")
    test_set = test_set_state(project=project) if project is not None else None
    deliveries = recent_deliveries(project=project) if project is not None else []
    context = {
        "form": form,
        "project": project,
        "guidelines_preview": preview,
        "test_set": test_set,
        "deliveries": deliveries,
    }
    if request.htmx:  # type: ignore[attr-defined]  # htmx swaps only 2xx answers: the form with its error summary comes back as 200
        return render(request, "annotate/setup.html#setup-card", context)
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "annotate/setup.html", context, status=status)


def _saved(request: HttpRequest, url: str) -> HttpResponse:
    """After a save: a plain redirect, or for htmx a whole-page one (the next page is not this form)."""
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)  # type: ignore[attr-defined]


def redraw_message(redraw: TestSetRedraw | None) -> str:
    if redraw is None:
        return ""
    returned = ""
    if redraw.labelled_returned:
        returned = f"; {redraw.labelled_returned} labelled test items went back to the pool"
    return f" The test set was redrawn: {redraw.after} items (was {redraw.before}){returned}."


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
            return _saved(request, reverse("import_upload", kwargs={"project_id": project.pk}))
    return _render(request, form, None)


@role_required(ML)
def project_setup(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = ProjectSetupForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        try:
            saved = project_update(
                project=project,
                labels=form.cleaned_data["labels_text"],
                name=form.cleaned_data["name"],
                **form.project_fields(),
            )
        except ProjectError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Setup saved." + redraw_message(saved.redraw))
            for warning in form.case_warnings:
                messages.warning(request, warning)
            return _saved(request, reverse("project_setup", kwargs={"project_id": project.pk}))
    return _render(request, form, project)


@role_required(ML)
@require_POST
def project_archive(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    archived = request.POST.get("archived") == "1"
    project_archive_service(project=project, archived=archived)
    if archived:
        messages.success(request, f"“{project.name}” archived: it is listed under Archived on the home page.")
        return redirect("home")
    messages.success(request, f"“{project.name}” is back on the home page.")
    return redirect("project_setup", project_id=project.pk)


@role_required(ML)
def project_delete(request: HttpRequest, project_id: int) -> HttpResponse:
    """A confirmation page: the project's name typed exactly deletes it and everything in it."""
    project = get_object_or_404(Project, pk=project_id)
    form = ProjectDeleteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            name = project_delete_service(project=project, confirm_name=form.cleaned_data["confirm_name"])
        except ProjectError as exc:
            form.add_error("confirm_name", str(exc))
        else:
            messages.success(request, f"Project “{name}” deleted.")
            return redirect("home")
    context = {"project": project, "form": form, "progress": setup_progress(project=project)}
    return render(request, "annotate/project_delete.html", context, status=400 if form.is_bound else 200)
