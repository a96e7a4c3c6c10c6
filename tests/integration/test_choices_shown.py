"""Issue 32, the usability pass: the choices a page offers (selects, checkbox lists, the role column)
are capitalised words, never the codes stored behind them ("calib", "cold", "ml"). Project labels
and usernames are the team's own words and are left as they were typed."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import ProjectMembership
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db]

# Selects and checkbox lists whose choices are the team's data (label names, usernames) or the
# export's column names (the file's own headers, shown as written).
DATA_CHOICES = {"label", "labels", "annotator", "assignee", "decision", "columns", "username"}
PROPER_NAMES = ("vLLM",)  # a name spelled with a small first letter


class Choices(HTMLParser):
    """(field name, value, text shown) of every <option> and every checkbox inside a <label>."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self._select = ""
        self._open: tuple[str, str] | None = None  # (name, value) whose text is being read
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "select":
            self._select = a.get("name", "")
        elif tag == "option":
            self._start((self._select, a.get("value", "")))
        elif tag == "input" and a.get("type") == "checkbox" and a.get("value"):
            self._start((a.get("name", ""), a["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("option", "label") and self._open is not None:
            self.found.append((*self._open, " ".join("".join(self._text).split())))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def _start(self, field: tuple[str, str]) -> None:
        self._open, self._text = field, []


def _codes_shown(html: str) -> list[str]:
    parser = Choices()
    parser.feed(html)
    bad = []
    for name, value, text in parser.found:
        if name in DATA_CHOICES or not text or text.startswith(PROPER_NAMES):
            continue
        first = next((c for c in text if c.isalpha()), "")
        if first.islower() or (value and text == value):
            bad.append(f"{name}={value!r} shows {text!r}")
    return bad


@pytest.fixture
def team(settings: Any) -> dict[str, Any]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    project = project_create(name="news", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    boss = user_create(username="boss", password="pw-12345678", roles=["annotator", "lead", "ml"])
    ProjectMembership.objects.create(project=project, user=boss, role="ml")
    client = Client()
    client.force_login(boss)
    return {"project": project, "client": client}


@pytest.mark.parametrize(
    "route",
    ["item_browser", "project_setup", "ml_home", "autolabel_home", "export_page", "project_members", "team"],
)
def test_issue32_choices_are_capitalised_words_not_codes(team: dict[str, Any], route: str) -> None:
    args = [] if route == "team" else [team["project"].pk]
    page = team["client"].get(reverse(route, args=args))
    assert page.status_code == 200
    assert _codes_shown(page.content.decode()) == []


def test_issue32_the_members_table_names_the_role(team: dict[str, Any]) -> None:
    page = team["client"].get(reverse("project_members", args=[team["project"].pk])).content.decode()
    assert '<td data-label="Role">ML staff</td>' in page


def test_issue32_the_home_page_names_the_roles(team: dict[str, Any]) -> None:
    page = team["client"].get(reverse("home")).content.decode()
    assert "Your roles: Annotator, Lead, ML staff." in page


def test_issue32_the_403_page_names_the_roles(team: dict[str, Any]) -> None:
    ml_only = user_create(username="maya", password="pw-12345678", roles=["ml"])
    client = Client()
    client.force_login(ml_only)
    page = client.get(reverse("lead_queue", args=[team["project"].pk, "skipped"]))
    assert page.status_code == 403
    text = page.content.decode()
    assert "this needs the role Lead in this project" in text and "(Annotator, Lead or ML staff)" in text
