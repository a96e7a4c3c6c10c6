"""The item browser (leads and ML staff): search and filter every item of a project, open one with
its history, relabel it (a lead's decision) or send it to the review bucket."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from annotate.access import role_required
from annotate.forms_data import ItemFilterForm, SendToReviewForm
from annotate.forms_setup import AdjudicationForm
from annotate.models import Item, Project
from annotate.roles import LEAD, ML, has_project_role
from annotate.selectors.items import PAGE_SIZE, browse_page, item_history, item_review_state
from annotate.services.review import ReviewError, adjudicate, item_send_to_review


@role_required(LEAD, ML)
def item_browser(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = ItemFilterForm(request.GET or None, project=project)
    filters = form.cleaned_data if form.is_valid() else {}
    page = int(filters.get("page") or 1)
    rows, total = browse_page(project=project, filters=filters, page=page)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "project": project,
        "form": form,
        "rows": rows,
        "total": total,
        "page": page,
        "pages": max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1),
        "query": query.urlencode(),
    }
    template = "annotate/items.html#results" if request.htmx else "annotate/items.html"  # type: ignore[attr-defined]
    return render(request, template, context)


@role_required(LEAD, ML)
def item_detail(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        item, events = item_history(project=project, item_id=item_id)
    except Item.DoesNotExist as exc:
        raise Http404("no such item in this project") from exc
    context = {
        "project": project,
        "item": item,
        "events": events,
        "state": item_review_state(item),
        "may_act": has_project_role(request.user, project.pk, LEAD),
        "relabel_form": AdjudicationForm(project=project),
        "review_form": SendToReviewForm(),
    }
    return render(request, "annotate/item.html", context)


def _back(project: Project, item: Item) -> HttpResponse:
    return redirect("item_detail", project_id=project.pk, item_id=item.pk)


@role_required(LEAD)
@require_POST
def item_relabel(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    item = get_object_or_404(Item, pk=item_id, project=project)
    form = AdjudicationForm(request.POST, project=project)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
        return _back(project, item)
    try:
        adjudicate(item=item, label=form.label(), lead=request.user, note=form.cleaned_data["note"])
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Item {item.external_id} relabelled.")
    return _back(project, item)


@role_required(LEAD)
@require_POST
def item_to_review(request: HttpRequest, project_id: int, item_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    item = get_object_or_404(Item, pk=item_id, project=project)
    form = SendToReviewForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        item_send_to_review(item=item, lead=request.user, reason=reason)
    except ReviewError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Item {item.external_id} is in the review bucket.")
    return _back(project, item)
