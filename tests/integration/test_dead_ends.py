"""Issue 32, the usability pass: dead ends found walking the app as a new team.

- The dead-letters page (items an auto-labelling run could not decide) was unreachable: its URL,
  /p/<id>/lead/dead-letters/, was taken by the lead queue's /p/<id>/lead/<queue>/ route, so ML staff
  got 403 and leads 404. Leads had no link to it either.
- The Auto-label and dead-letters pages had navigation of their own: no project name, no way back to
  Items, Export or Agreement, and a "Lead" link that answered ML staff with 403."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import AutolabelRun, Calibration, DeadLetter, Item
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def team(settings: Any) -> dict[str, Any]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    project = project_create(name="news", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    item = Item.objects.create(project=project, external_id="n1", text="A very long text", text_hash="h1")
    run = AutolabelRun.objects.create(project=project, calibration=Calibration.objects.create(project=project))
    DeadLetter.objects.create(run=run, item=item, reason="over_context", detail="2,100 tokens")
    clients = {}
    for role in ("lead", "ml"):
        client = Client()
        client.force_login(user_create(username=role, password="pw-12345678", roles=[role]))
        clients[role] = client
    return {"project": project, **clients}


def test_issue32_dead_letters_open_for_leads_and_ml_staff_and_leads_find_them(team: dict[str, Any]) -> None:
    url = reverse("dead_letters", args=[team["project"].pk])
    for role in ("lead", "ml"):
        page = team[role].get(url)
        assert page.status_code == 200, (role, page.status_code)
        assert 'data-reason="over_context"' in page.content.decode()
    queue = team["lead"].get(reverse("lead_queue", args=[team["project"].pk, "disagreements"])).content.decode()
    assert f'href="{url}"' in queue and "Dead letters (1)" in queue  # the lead's way to them


@pytest.mark.parametrize("route", ["autolabel_home", "dead_letters"])
def test_issue32_auto_label_pages_have_the_project_navigation(team: dict[str, Any], route: str) -> None:
    project = team["project"]
    page = team["ml"].get(reverse(route, args=[project.pk])).content.decode()
    nav = page.split("<nav")[1].split("</nav>")[0]
    assert '<span class="project-name" title="Project: news">news</span>' in nav
    for name in ("Items", "Export", "Agreement", "Rounds", "Setup"):
        assert f">{name}</a>" in nav, name
    assert f'href="{reverse("lead_home", args=[project.pk])}"' not in nav  # a lead's page: 403 for ML staff


def test_issue32_the_navigation_marks_the_page_it_is_on(team: dict[str, Any]) -> None:
    project = team["project"]
    for route, name in (("item_browser", "Items"), ("export_page", "Export"), ("lead_agreement", "Agreement")):
        url = reverse(route, args=[project.pk])
        nav = team["lead"].get(url).content.decode().split("<nav")[1].split("</nav>")[0]
        assert f'<a href="{url}" aria-current="page">{name}</a>' in nav, nav


def test_issue32_the_navigation_marks_the_section_of_a_page_under_it(team: dict[str, Any]) -> None:
    """An item's page is under Items, every review queue under Review."""
    project = team["project"]
    item = Item.objects.get(project=project)
    for url, section in (
        (reverse("item_detail", args=[project.pk, item.pk]), "Items"),
        (reverse("lead_queue", args=[project.pk, "skipped"]), "Review"),
    ):
        nav = team["lead"].get(url).content.decode().split("<nav")[1].split("</nav>")[0]
        assert f'aria-current="page">{section}</a>' in nav, (url, nav)
