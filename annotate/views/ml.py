"""ML staff page: rounds with live progress, start/retrain requests, learning curve, test set, the
selection strategy in charge, and the stopping evidence (a recommendation; nothing stops the loop).

The live part (round table, learning curve, latest evaluation) is one polled region: it refreshes
every 2 s while a round is active, and its last answer (the round done) carries the new curve, so the
page never needs a reload. Messages answering a button live outside that region (an out-of-band
swap), so the next refresh never wipes them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from annotate.access import role_required
from annotate.forms_setup import RoundStartForm
from annotate.models import Project
from annotate.roles import ML
from annotate.selectors import agreement as agreement_sel
from annotate.selectors import rounds as rounds_sel
from annotate.selectors import stopping as stopping_sel
from annotate.selectors.notify import failed_deliveries
from annotate.selectors.progress import batch_status, labeling_round
from annotate.selectors.round_display import next_step_sentence, round_views
from annotate.services.rounds import RoundError, round_request_final, round_request_retrain, round_request_start


def _live_context(project: Project, **extra: object) -> dict[str, object]:
    rounds = rounds_sel.rounds_with_progress(project=project)
    test_set = rounds_sel.test_set_status(project=project)
    evaluated = rounds_sel.evaluations(project=project)
    evaluation = evaluated[-1] if evaluated else None
    withheld = rounds_sel.curve_withheld(test_set=test_set, evaluation=evaluation)
    return {
        "project": project,
        "rounds": round_views(rounds=rounds, min_test=test_set.required),
        # polled while a round is active, or a done round's comparison arms train after it
        "active": rounds_sel.any_round_active(project=project) or rounds_sel.comparison_running(project=project),
        "test_set": test_set,
        "withheld": withheld,
        "curve_uri": None if withheld else rounds_sel.learning_curve_data_uri(project=project),
        "evaluation": None if withheld else evaluation,
        "evaluations": [] if withheld else evaluated,
        "agreement": agreement_sel.agreement_summary(project=project),
        "stopping": stopping_sel.stopping_report(project=project),
        "selection": rounds_sel.selection_in_charge(project=project),
        "n_rounds": len(rounds),
        "pool_end": (ended := rounds_sel.pool_end_round(project=project)),
        "pool_end_text": rounds_sel.pool_end_sentence(ended) if ended else "",
        "in_review": rounds_sel.in_review(project=project) if ended else 0,
        **extra,
    }


@role_required(ML)
def ml_home(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    context = _live_context(project, start_form=RoundStartForm(), failed_notices=failed_deliveries(project=project))
    return render(request, "annotate/ml.html", context)


@role_required(ML)
def ml_rounds(request: HttpRequest, project_id: int) -> HttpResponse:
    """The polled live region. Once no round is active, the last answer also stops the polling."""
    project = get_object_or_404(Project, pk=project_id)
    context = _live_context(project)
    response = render(request, "annotate/ml.html#live", context)
    if not context["active"]:
        return HttpResponseStopPolling(response.content)
    return response


def _refusal(project: Project, error: str) -> str:
    """A refusal while a round labels says what its batch waits for and what to press."""
    current = labeling_round(project_id=project.pk)
    if current is None:
        return error
    return f"{error}. {next_step_sentence(project=project, batch=batch_status(round=current))}"


def _after_request(request: HttpRequest, project: Project, done: str, error: str) -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        context = _live_context(project, notice=done, error=error, oob=True)
        return render(request, "annotate/ml.html#answer", context)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, done)
    return redirect("ml_home", project_id=project.pk)


@role_required(ML)
@require_POST
def ml_round_start(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = RoundStartForm(request.POST)
    if not form.is_valid():
        return _after_request(request, project, "", " ".join(map(str, form.errors["strategy"])))
    try:
        new = round_request_start(project=project, user=request.user, strategy=form.cleaned_data["strategy"])
    except RoundError as exc:
        return _after_request(request, project, "", _refusal(project, str(exc)))
    return _after_request(request, project, f"Round {new.number} requested.", "")


@role_required(ML)
@require_POST
def ml_round_retrain(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        current = round_request_retrain(project=project, user=request.user)
    except RoundError as exc:
        return _after_request(request, project, "", str(exc))
    return _after_request(request, project, f"Retrain requested on round {current.number}.", "")


@role_required(ML)
@require_POST
def ml_round_final(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        new = round_request_final(project=project, user=request.user)
    except RoundError as exc:
        return _after_request(request, project, "", _refusal(project, str(exc)))
    return _after_request(request, project, f"Final model requested: round {new.number} retrains from scratch.", "")
