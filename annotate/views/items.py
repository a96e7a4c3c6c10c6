"""The item browser (leads and ML staff): search, filter and sort every item of a project, act on
many at once (send to review, assign, relabel: confirm, then undo), save filters, open one item
with its history, relabel it (a lead's decision) or send it to the review bucket."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotate.access import role_required
from annotate.forms_data import BulkForm, ItemFilterForm, SavedFilterForm, SendToReviewForm
from annotate.forms_setup import AdjudicationForm
from annotate.models import BulkAction, Item, Project
from annotate.roles import LEAD, ML, has_project_role
from annotate.selectors.items import (
    PAGE_SIZE,
    browse_items,
    browse_page,
    bulk_sentence,
    item_history,
    item_review_state,
    last_bulk_action,
    project_annotators,
    saved_filters,
    test_items_among,
)
from annotate.services.bulk import BulkRefused, UndoRefused, bulk_apply, bulk_draft, bulk_undo
from annotate.services.review import ReviewError, adjudicate, item_send_to_review
from annotate.services.saved_filters import saved_filter_delete, saved_filter_save


def _filters(project: Project, query: QueryDict) -> tuple[ItemFilterForm, dict[str, Any]]:
    form = ItemFilterForm(query or None, project=project)
    return form, (form.cleaned_data if form.is_valid() else {})


@role_required(LEAD, ML)
def item_browser(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form, filters = _filters(project, request.GET)
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
        "bulk_form": BulkForm(project=project, annotators=project_annotators(project=project)),
        "last_bulk": last_bulk_action(project=project, user=request.user),
        "saved": saved_filters(project=project, user=request.user),
    }
    template = "annotate/items.html#results" if request.htmx else "annotate/items.html"  # type: ignore[attr-defined]
    return render(request, template, context)


def _browser(project: Project, query: str = "") -> HttpResponse:
    url = reverse("item_browser", args=[project.pk])
    return redirect(f"{url}?{query}" if query else url)


@role_required(LEAD, ML)
@require_POST
def item_bulk(request: HttpRequest, project_id: int) -> HttpResponse:
    """Draft a bulk action on the ticked rows or on every matching item, then show its confirmation."""
    project = get_object_or_404(Project, pk=project_id)
    form = BulkForm(request.POST, project=project, annotators=project_annotators(project=project))
    query = request.POST.get("query", "")
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
        return _browser(project, query)
    data = form.cleaned_data
    if data["all_matching"]:
        ids = browse_items(project=project, filters=_filters(project, QueryDict(query))[1]).values_list("id", flat=True)
    else:
        ids = data["items"]
    try:
        action = bulk_draft(
            project=project,
            actor=request.user,
            kind=data["action"],
            item_ids=list(ids),
            label=form.labels.get(data["label"]),
            assignee=form.users.get(data["assignee"]),
            note=data["note"],
        )
    except BulkRefused as exc:
        messages.error(request, str(exc))
        return _browser(project, query)
    confirm = reverse("item_bulk_confirm", args=[project.pk, action.pk])
    return redirect(f"{confirm}?{urlencode({'query': query})}")


@role_required(LEAD, ML)
def item_bulk_confirm(request: HttpRequest, project_id: int, action_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    action = get_object_or_404(BulkAction, pk=action_id, project=project, actor=request.user)
    context = {
        "project": project,
        "action": action,
        "query": request.GET.get("query", ""),
        "test_items": test_items_among(project=project, item_ids=list(action.item_ids)),
    }
    return render(request, "annotate/item_bulk.html", context)


@role_required(LEAD, ML)
@require_POST
def item_bulk_apply(request: HttpRequest, project_id: int, action_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        action = bulk_apply(project=project, action_id=action_id, actor=request.user)
    except BulkRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Done: {bulk_sentence(action)}.")
    return _browser(project, request.POST.get("query", ""))


@role_required(LEAD, ML)
@require_POST
def item_bulk_undo(request: HttpRequest, project_id: int, action_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        action = bulk_undo(project=project, action_id=action_id, actor=request.user)
    except (BulkRefused, UndoRefused) as exc:
        messages.error(request, f"Undo refused: {exc}")
    else:
        messages.success(request, f"Undone: {len(action.item_ids)} items are as they were before.")
    return _browser(project, request.POST.get("query", ""))


@role_required(LEAD, ML)
@require_POST
def item_filter_save(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = SavedFilterForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
        return _browser(project, request.POST.get("query", ""))
    saved = saved_filter_save(project=project, user=request.user, **form.cleaned_data)
    messages.success(request, f"Filter “{saved.name}” saved.")
    return _browser(project, saved.query)


@role_required(LEAD, ML)
@require_POST
def item_filter_delete(request: HttpRequest, project_id: int, filter_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    saved_filter_delete(project=project, user=request.user, filter_id=filter_id)
    return _browser(project, request.POST.get("query", ""))


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
