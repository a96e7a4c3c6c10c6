"""Lead pages: the three queues with inline adjudication, and the agreement dashboard."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from annotate.access import role_required
from annotate.forms_setup import AdjudicationForm
from annotate.models import Item, Project
from annotate.roles import LEAD, ML
from annotate.selectors import agreement
from annotate.selectors import autolabel as auto_sel
from annotate.selectors.history import undoable_decision
from annotate.selectors.people import people_stats
from annotate.selectors.progress import current_batch
from annotate.selectors.review import QUEUES, item_for_lead, queue_counts, queue_items
from annotate.services.history import UndoRefused, decision_undo
from annotate.services.review import ReviewError, adjudicate, item_return_to_pool, item_send_to_review


@role_required(LEAD)
def lead_home(request: HttpRequest, project_id: int) -> HttpResponse:
    return redirect("lead_queue", project_id=project_id, queue="disagreements")


@role_required(LEAD)
def lead_queue(request: HttpRequest, project_id: int, queue: str) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    if queue not in QUEUES:
        raise Http404(f"no queue {queue!r}")
    context = {
        "project": project,
        "queue": queue,
        "queues": QUEUES,
        "counts": queue_counts(project=project),
        "dead_letters": auto_sel.dead_letters(project=project).count(),  # a run's undecided items: a link
        "batch": current_batch(project_id=project.pk),
        "items": queue_items(project=project, queue=queue)[:200],
        "form": AdjudicationForm(project=project),
    }
    return render(request, "annotate/lead.html", context)


def _item_row(request: HttpRequest, project: Project, item_id: int, queue: str, **extra: object) -> HttpResponse:
    try:
        item = item_for_lead(project=project, item_id=item_id)
    except Item.DoesNotExist as exc:
        raise Http404("no such item in this project") from exc
    context = {
        "project": project,
        "item": item,
        "queue": queue,
        "form": AdjudicationForm(project=project),
        "undo_event": undoable_decision(item_id=item.pk),
        **extra,
    }
    return render(request, "annotate/lead.html#item-row", context)


def _queue_of(request: HttpRequest) -> str:
    queue = request.POST.get("queue", "disagreements")
    return queue if queue in QUEUES else "disagreements"


@role_required(LEAD)
@require_POST
def lead_adjudicate(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    item = get_object_or_404(Item, pk=item_id, project=project)
    form = AdjudicationForm(request.POST, project=project)
    error = ""
    if form.is_valid():
        try:
            adjudicate(item=item, label=form.label(), lead=request.user, note=form.cleaned_data["note"])
        except ReviewError as exc:
            error = str(exc)
    else:
        error = "; ".join(str(e) for errors in form.errors.values() for e in errors)
    if request.htmx:  # type: ignore[attr-defined]
        return _item_row(request, project, item_id, _queue_of(request), error=error)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Item {item.external_id} decided.")
    return redirect("lead_queue", project_id=project.pk, queue=_queue_of(request))


@role_required(LEAD)
@require_POST
def lead_return_to_pool(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    item = get_object_or_404(Item, pk=item_id, project=project)
    error = ""
    try:
        item_return_to_pool(item=item, lead=request.user)
    except ReviewError as exc:
        error = str(exc)
    if request.htmx:  # type: ignore[attr-defined]
        return _item_row(request, project, item_id, _queue_of(request), error=error, returned=not error)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Item {item.external_id} is back in the pool.")
    return redirect("lead_queue", project_id=project.pk, queue=_queue_of(request))


@role_required(LEAD)
@require_POST
def lead_send_to_review(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    """Move a queue's item to the review bucket (the queue row's `r`)."""
    project = get_object_or_404(Project, pk=project_id)
    item = get_object_or_404(Item, pk=item_id, project=project)
    error = ""
    try:
        item_send_to_review(item=item, lead=request.user, reason=request.POST.get("reason", ""))
    except ReviewError as exc:
        error = str(exc)
    if request.htmx:  # type: ignore[attr-defined]
        return _item_row(request, project, item_id, _queue_of(request), error=error, reviewed=not error)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Item {item.external_id} is in the review bucket.")
    return redirect("lead_queue", project_id=project.pk, queue=_queue_of(request))


@role_required(LEAD)
@require_POST
def lead_undo(request: HttpRequest, project_id: int, event_id: int) -> HttpResponse:
    """Take back a lead's decision or return to the pool (from a queue row or the item page)."""
    project = get_object_or_404(Project, pk=project_id)
    error = ""
    try:
        undo = decision_undo(project=project, event_id=event_id, lead=request.user)
    except UndoRefused as exc:
        error, item_id = str(exc), int(request.POST.get("item") or 0)
    else:
        item_id = undo.item_id
    if request.htmx and item_id:  # type: ignore[attr-defined]
        return _item_row(request, project, item_id, _queue_of(request), error=error, undone=not error)
    if error:
        messages.error(request, f"Undo refused: {error}")
    else:
        messages.success(request, "Decision undone: the item is as it was before it.")
    if request.POST.get("next") == "item" and item_id:
        return redirect("item_detail", project_id=project.pk, item_id=item_id)
    return redirect("lead_queue", project_id=project.pk, queue=_queue_of(request))


def _int_param(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "")
    return int(raw) if raw.isdigit() else None


@role_required(LEAD, ML)
def lead_agreement(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    summary = agreement.agreement_summary(project=project)
    a, b = _int_param(request, "a"), _int_param(request, "b")
    if (a is None or b is None) and summary.pairs:
        a, b = summary.pairs[0].a.id, summary.pairs[0].b.id
    pair = agreement.pair_confusion(project=project, a_id=a, b_id=b) if a is not None and b is not None else None
    if request.htmx and request.GET.get("partial") == "confusion":  # type: ignore[attr-defined]
        return render(request, "annotate/lead_agreement.html#confusion", {"project": project, "pair": pair})
    context = {
        "project": project,
        "summary": summary,
        "pair": pair,
        "people": people_stats(project=project),
    }
    return render(request, "annotate/lead_agreement.html", context)
