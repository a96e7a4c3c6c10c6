"""Template helpers: the project navigation (the links each role opens in a project) and units."""

from __future__ import annotations

from typing import Any

from django import template

from annotate.models import Project
from annotate.roles import ANNOTATOR, LEAD, ML, project_roles

register = template.Library()


@register.inclusion_tag("annotate/_project_nav.html", takes_context=True)
def project_nav(context: dict[str, Any], project: Project) -> dict[str, Any]:
    """The project's name and the links the user's roles in it open, the current page marked."""
    request = context.get("request")
    user = getattr(request, "user", None)
    roles = project_roles(user, project.pk) if user is not None else set()
    return {
        "project": project,
        "path": getattr(request, "path", ""),
        "annotator": bool(roles & {ANNOTATOR, LEAD}),
        "lead": LEAD in roles,
        "ml": ML in roles,
    }


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    """0.8123 → '81.2 %'; None → '—'."""
    if value is None or value == "":
        return "—"
    try:
        return f"{100 * float(value):.{int(digits)}f} %"
    except (TypeError, ValueError):
        return "—"


@register.filter
def setup_steps(project: Project) -> dict[str, int]:
    """How far a project is: items, test items, members, rounds (the import page's next-step list)."""
    from annotate.selectors.projects import setup_progress

    return setup_progress(project=project)
