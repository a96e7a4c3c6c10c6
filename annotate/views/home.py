from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from annotate.models import Project
from annotate.roles import ANNOTATOR, LEAD, ML, roles_of


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Landing page: every project, with the links the user's roles open."""
    roles = roles_of(request.user)
    context = {
        "projects": Project.objects.order_by("name"),
        "roles": sorted(roles),
        "is_annotator": ANNOTATOR in roles or LEAD in roles,
        "is_lead": LEAD in roles,
        "is_ml": ML in roles,
    }
    return render(request, "annotate/home.html", context)
