"""Template helpers: the project navigation (the links each role opens in a project) and units."""

from __future__ import annotations

from typing import Any, NamedTuple

from django import template
from django.urls import reverse

from annotate.models import Project
from annotate.roles import ANNOTATOR, LEAD, ML, project_roles

register = template.Library()


class NavLink(NamedTuple):
    shown_to: str  # annotator | lead | lead_or_ml | ml
    url_name: str
    title: str
    arg: str | None = None  # a second URL argument after the project's id
    under: tuple[str, ...] = ()  # the URL names of other pages it marks as the page's section


# The project's pages in the order of its navigation.
NAV = [
    NavLink("annotator", "annotate", "Annotate"),
    NavLink("annotator", "annotate_test", "Test set"),
    NavLink("annotator", "annotate_guidelines", "Guidelines"),
    NavLink("lead", "lead_queue", "Review", "disagreements"),
    NavLink("lead_or_ml", "label_errors", "Label errors"),
    NavLink("lead_or_ml", "lead_agreement", "Agreement"),
    NavLink("lead_or_ml", "item_browser", "Items", under=("item_detail", "item_bulk_confirm")),
    NavLink("lead_or_ml", "export_page", "Export"),
    NavLink("lead_or_ml", "project_members", "Members"),
    NavLink("ml", "ml_home", "Rounds"),
    NavLink("ml", "project_setup", "Setup", under=("project_delete",)),
    NavLink("ml", "import_upload", "Import", under=("import_status",)),
    NavLink("ml", "autolabel_home", "Auto-label"),
]


@register.inclusion_tag("annotate/_project_nav.html", takes_context=True)
def project_nav(context: dict[str, Any], project: Project) -> dict[str, Any]:
    """The project's name and the links the user's roles in it open, the page it is on marked (or the
    section it is under: every review queue is under Review, an item's page under Items)."""
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
            "url": reverse(link.url_name, args=[project.pk] if link.arg is None else [project.pk, link.arg]),
            "title": link.title,
            "current": here == link.url_name or here in link.under,
        }
        for link in NAV
        if shows[link.shown_to]
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
def strategy_name(code: str) -> str:
    """A round's strategy as the Rounds page names it: 'cold-start' → 'Cold start (typical items)';
    a code it does not know is shown as it is."""
    from annotate.forms_setup import ROUND_STRATEGY_NAMES

    return ROUND_STRATEGY_NAMES.get(code, code)


@register.filter
def setup_steps(project: Project) -> dict[str, int]:
    """How far a project is: items, test items, members, rounds (the import page's next-step list)."""
    from annotate.selectors.projects import setup_progress

    return setup_progress(project=project)
