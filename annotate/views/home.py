from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from annotate.access import signed_in
from annotate.roles import ALL_ROLES, LEAD, ML, ROLE_NAMES, roles_of
from annotate.selectors.projects import archived_projects, project_cards


@signed_in
def home(request: HttpRequest) -> HttpResponse:
    """Landing page: what the app does, the projects the user may open with their progress and the
    links the user's roles open there, and for ML staff the way to a new project."""
    roles = roles_of(request.user)
    context = {
        "cards": project_cards(user=request.user),
        "archived": archived_projects(user=request.user),
        "role_names": [ROLE_NAMES[role] for role in ALL_ROLES if role in roles],
        "is_lead": LEAD in roles,
        "is_ml": ML in roles,
    }
    return render(request, "annotate/home.html", context)
