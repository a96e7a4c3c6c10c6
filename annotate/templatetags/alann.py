"""Template helpers: the project navigation (the links each role opens in a project) and units."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from annotate.models import Project
from annotate.roles import ANNOTATOR, LEAD, ML, project_roles

register = template.Library()


# The project's pages in the order of its navigation: (who sees it, URL name, its name, extra URL argument).
NAV = [
    ("annotator", "annotate", "Annotate", None),
    ("annotator", "annotate_test", "Test set", None),
    ("annotator", "annotate_guidelines", "Guidelines", None),
    ("lead", "lead_queue", "Review", "disagreements"),
    ("lead_or_ml", "label_errors", "Label errors", None),
    ("lead_or_ml", "lead_agreement", "Agreement", None),
    ("lead_or_ml", "item_browser", "Items", None),
    ("lead_or_ml", "export_page", "Export", None),
    ("lead_or_ml", "project_members", "Members", None),
    ("ml", "ml_home", "Rounds", None),
    ("ml", "project_setup", "Setup", None),
    ("ml", "import_upload", "Import", None),
    ("ml", "autolabel_home", "Auto-label", None),
]


@register.inclusion_tag("annotate/_project_nav.html", takes_context=True)
def project_nav(context: dict[str, Any], project: Project) -> dict[str, Any]:
    """The project's name and the links the user's roles in it open, the page it is on marked (every
    queue of the Review link marks it)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    roles = project_roles(user, project.pk) if user is not None else set()
    shows = {
        "annotator": bool(roles & {ANNOTATOR, LEAD}),
        "lead": LEAD in roles,
        "lead_or_ml": bool(roles & {LEAD, ML}),
        "ml": ML in roles,
    }
    match = getattr(request, "resolver_match", None)
    here = match.url_name if match is not None else ""
    links = [
        {
            "url": reverse(name, args=[project.pk] if arg is None else [project.pk, arg]),
            "title": title,
            "current": name == here,
        }
        for who, name, title, arg in NAV
        if shows[who]
    ]
    return {"project": project, "links": links}


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
