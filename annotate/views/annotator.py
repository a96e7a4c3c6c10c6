"""Annotator pages: one item at a time, label / skip / undo, keyboard first, htmx swaps the panel.

Without JavaScript every action is a plain form POST answered by a redirect to the queue (PRG); with
htmx the POST answers the panel partial with the next item."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from annotate.access import role_required
from annotate.forms import LabelForm, SkipForm
from annotate.models import Annotation, Item, Project
from annotate.roles import ANNOTATOR, LEAD
from annotate.selectors.history import last_action_is_skip
from annotate.selectors.labeling import (
    empty_queue_reason,
    guidelines_html,
    label_choice,
    progress_for,
    project_labels,
    suggestion_for,
    test_labels_wanted,
)
from annotate.services.history import UndoRefused, skip_undo
from annotate.services.labeling import (
    AlreadyLabelled,
    LabelingError,
    NotLeased,
    Queue,
    label_submit_and_next,
    label_undo,
    next_item_for,
    skip_submit,
)

TEMPLATE = "annotate/annotate.html"


def _queue(value: str | None) -> Queue:
    return "test" if value == "test" else "batch"


def _queue_url(project: Project, queue: Queue) -> str:
    return reverse("annotate_test" if queue == "test" else "annotate", args=[project.pk])


def _panel(
    request: HttpRequest,
    project: Project,
    queue: Queue,
    *,
    item: Item | None,
    revising: Annotation | None = None,
    saved: Annotation | None = None,
    unskipped: bool = False,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    """The annotate page, or only its panel for htmx, showing `item` (or the label being revised)."""
    shown = revising.item if revising is not None else item
    context: dict[str, Any] = {
        "project": project,
        "queue": queue,
        "queue_url": _queue_url(project, queue),
        "item": shown,
        "revising": revising,
        "saved": saved,
        "unskipped": unskipped,
        "error": error,
        "choice": label_choice(project=project),
        "suggestion": suggestion_for(item=shown, project=project) if shown is not None else None,
        # An empty queue recounts the team now: "nothing to label" next to a lagging bar reads as lost work.
        "progress": progress_for(project=project, annotator=request.user, fresh=shown is None),
        "empty_reason": empty_queue_reason(project=project, annotator=request.user, queue=queue)
        if shown is None
        else "",  # An empty batch queue points at the Test set queue when the test set is what holds things up.
        "test_wanted": test_labels_wanted(project=project, annotator=request.user)
        if shown is None and queue == "batch"
        else 0,
    }
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, f"{TEMPLATE}#panel", context, status=status)
    context["guidelines"] = guidelines_html(project=project)
    return render(request, TEMPLATE, context, status=status)


def _next(request: HttpRequest, project: Project, queue: Queue) -> Item | None:
    return next_item_for(project=project, annotator=request.user, queue=queue)


def _refused(request: HttpRequest, project: Project, queue: Queue, error: str, status: int = 200) -> HttpResponse:
    """The panel again with the error, showing the annotator's next item (their held one, if any)."""
    return _panel(request, project, queue, item=_next(request, project, queue), error=error, status=status)


def _back_to_queue(request: HttpRequest, project: Project, queue: Queue, note: str) -> HttpResponse:
    """No JavaScript: Post/Redirect/Get, the note shown as a message on the queue page."""
    messages.success(request, note)
    response = redirect(_queue_url(project, queue))
    response.status_code = 303  # See Other: the browser GETs the queue; a reload never re-POSTs
    return response


def _form_error(form: LabelForm | SkipForm) -> str:
    return "; ".join(str(e) for errors in form.errors.values() for e in errors)


@role_required(ANNOTATOR, LEAD)
@require_GET
def annotate(request: HttpRequest, project_id: int, queue: str = "batch") -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    return _panel(request, project, _queue(queue), item=_next(request, project, _queue(queue)))


@role_required(ANNOTATOR, LEAD)
@require_POST
def annotate_label(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = LabelForm(request.POST, labels=project_labels(project=project))
    queue = _queue(request.POST.get("queue"))
    if not form.is_valid():
        return _refused(request, project, queue, _form_error(form), status=400)
    data = form.cleaned_data
    try:
        annotation, item = label_submit_and_next(
            project=project,
            annotator=request.user,
            item_id=data["item"],
            label=data["label"],
            queue=queue,
            seconds_spent=data["seconds"],
            revise=data["revise"],
        )
    except LabelingError as exc:
        # A clash with the item's state (labelled already, not leased to me) is 409, as for skips.
        status = 409 if isinstance(exc, AlreadyLabelled | NotLeased) else 400
        return _refused(request, project, queue, str(exc), status=status)
    if request.htmx:  # type: ignore[attr-defined]
        return _panel(request, project, queue, item=item, saved=annotation)
    return _back_to_queue(request, project, queue, f"Saved “{annotation.label.name}”. Press u to revise it.")


@role_required(ANNOTATOR, LEAD)
@require_POST
def annotate_skip(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = SkipForm(request.POST, project=project)
    queue = _queue(request.POST.get("queue"))
    if not form.is_valid():
        return _refused(request, project, queue, _form_error(form), status=400)
    try:
        skip_submit(item=form.cleaned_data["item"], annotator=request.user, reason=form.cleaned_data["reason"])
    except LabelingError as exc:
        return _refused(request, project, queue, str(exc), status=409)
    if request.htmx:  # type: ignore[attr-defined]
        return _panel(request, project, queue, item=_next(request, project, queue))
    return _back_to_queue(request, project, queue, "Skipped. A lead will look at it.")


@role_required(ANNOTATOR, LEAD)
@require_http_methods(["GET", "POST"])
def annotate_undo(request: HttpRequest, project_id: int) -> HttpResponse:
    """Take back my last action: a skip is withdrawn and its item shown to label; a label's item is
    shown again, its label highlighted, and choosing a label revises it."""
    project = get_object_or_404(Project, pk=project_id)
    queue = _queue(request.POST.get("queue") if request.method == "POST" else request.GET.get("queue"))
    # Taking a skip back writes, so only a POST does it (the page's u); a GET only shows the last label.
    if request.method == "POST" and last_action_is_skip(
        project=project, annotator=request.user, is_test=queue == "test"
    ):
        try:
            item = skip_undo(project=project, annotator=request.user, is_test=queue == "test")
        except UndoRefused as exc:
            return _refused(request, project, queue, str(exc), status=409)
        return _panel(request, project, queue, item=item, unskipped=True)
    last = label_undo(annotator=request.user, project=project, queue=queue)
    if last is None:
        return _refused(request, project, queue, "nothing to undo yet")
    return _panel(request, project, queue, item=None, revising=last)


@role_required(ANNOTATOR, LEAD)
@require_GET
def annotate_guidelines(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    queue = _queue(request.GET.get("queue"))
    context = {
        "project": project,
        "guidelines": guidelines_html(project=project),
        "queue_url": _queue_url(project, queue),
    }
    return render(request, "annotate/annotate_guidelines.html", context)


__all__ = ["annotate", "annotate_guidelines", "annotate_label", "annotate_skip", "annotate_undo"]
