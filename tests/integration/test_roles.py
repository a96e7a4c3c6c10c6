"""Roles: every lead, ML and setup URL checks its role on the server; writes need the CSRF token."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from annotate.models import Item, Project
from annotate.services.accounts import AccountError, ensure_groups, user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def project() -> Project:
    project = project_create(name="topics", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    Item.objects.create(project=project, external_id="1", text="a goal", text_hash="h1")
    return project


def client_for(*roles: str, username: str | None = None) -> tuple[Client, Any]:
    user = user_create(username=username or "-".join(roles) or "nobody", password="pw-12345678", roles=roles)
    client = Client()
    client.force_login(user)
    return client, user


def lead_urls(project: Project) -> list[tuple[str, str]]:
    item = project.items.get()
    p = project.pk
    return [
        ("get", reverse("lead_home", args=[p])),
        ("get", reverse("lead_queue", args=[p, "disagreements"])),
        ("get", reverse("lead_queue", args=[p, "skipped"])),
        ("get", reverse("lead_queue", args=[p, "review"])),
        ("get", reverse("lead_agreement", args=[p])),
        ("post", reverse("lead_adjudicate", args=[p, item.pk])),
        ("post", reverse("lead_return", args=[p, item.pk])),
    ]


def ml_urls(project: Project) -> list[tuple[str, str]]:
    p = project.pk
    return [
        ("get", reverse("ml_home", args=[p])),
        ("get", reverse("ml_rounds", args=[p])),
        ("post", reverse("ml_round_start", args=[p])),
        ("post", reverse("ml_round_retrain", args=[p])),
        ("get", reverse("setup_new")),
        ("get", reverse("project_setup", args=[p])),
    ]


def test_anonymous_is_sent_to_login_everywhere(project: Project) -> None:
    client = Client()
    for method, url in [*lead_urls(project), *ml_urls(project), ("get", reverse("home"))]:
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_annotator_gets_a_readable_403_on_every_lead_and_ml_page(project: Project) -> None:
    client, _ = client_for("annotator")
    for method, url in [*lead_urls(project), *ml_urls(project)]:
        response = getattr(client, method)(url)
        assert response.status_code == 403, url
        assert b"Not allowed" in response.content and b"annotator" in response.content, url
    assert not project.rounds.exists()


def test_lead_opens_lead_pages_but_not_ml_pages(project: Project) -> None:
    client, _ = client_for("lead")
    for method, url in lead_urls(project):
        if method == "get":
            assert client.get(url, follow=True).status_code == 200, url
    for method, url in ml_urls(project):
        assert getattr(client, method)(url).status_code == 403, url


def test_ml_opens_setup_and_ml_pages_and_agreement_but_not_lead_queues(project: Project) -> None:
    client, _ = client_for("ml")
    for method, url in ml_urls(project):
        if method == "get":
            assert client.get(url).status_code in (200, 286), url
    assert client.get(reverse("lead_agreement", args=[project.pk])).status_code == 200
    assert client.get(reverse("lead_queue", args=[project.pk, "review"])).status_code == 403
    assert client.post(reverse("lead_adjudicate", args=[project.pk, project.items.get().pk])).status_code == 403


def test_writes_without_csrf_token_are_refused(project: Project) -> None:
    user = user_create(username="boss", password="pw-12345678", roles=["lead", "ml"])
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    item = project.items.get()
    label = project.labels.first()
    assert label is not None
    response = client.post(reverse("lead_adjudicate", args=[project.pk, item.pk]), {"decision": label.pk})
    assert response.status_code == 403
    assert client.post(reverse("ml_round_start", args=[project.pk])).status_code == 403
    item.refresh_from_db()
    assert item.final_label is None and not project.rounds.exists()


def test_get_on_a_write_url_is_not_a_write(project: Project) -> None:
    client, _ = client_for("lead", "ml")
    assert client.get(reverse("ml_round_start", args=[project.pk])).status_code == 405
    assert client.get(reverse("lead_adjudicate", args=[project.pk, project.items.get().pk])).status_code == 405
    assert not project.rounds.exists()


def test_home_lists_projects_with_the_links_of_each_role(project: Project) -> None:
    annotator, _ = client_for("annotator")
    page = annotator.get(reverse("home")).content.decode()
    assert "topics" in page and reverse("annotate", args=[project.pk]) in page
    assert reverse("ml_home", args=[project.pk]) not in page and reverse("setup_new") not in page
    ml, _ = client_for("ml")
    page = ml.get(reverse("home")).content.decode()
    assert reverse("ml_home", args=[project.pk]) in page and reverse("setup_new") in page
    assert reverse("lead_queue", args=[project.pk, "disagreements"]) not in page


def test_user_create_puts_users_in_groups_and_refuses_unknown_roles() -> None:
    ensure_groups()
    ensure_groups()  # idempotent
    assert sorted(Group.objects.values_list("name", flat=True)) == ["annotator", "lead", "ml"]
    user = user_create(username="both", password="pw-12345678", roles=["lead", "annotator"])
    assert sorted(user.groups.values_list("name", flat=True)) == ["annotator", "lead"]
    assert user.check_password("pw-12345678")
    with pytest.raises(AccountError, match="unknown role"):
        user_create(username="x", password="pw-12345678", roles=["admin"])
    with pytest.raises(AccountError, match="already exists"):
        user_create(username="both", password="pw-12345678", roles=["lead"])


def test_admin_registers_every_model_with_a_working_search(project: Project, admin_client: Client) -> None:
    for model in apps.get_app_config("annotate").get_models():
        assert model in admin.site._registry, model.__name__
        model_admin = admin.site._registry[model]
        assert model_admin.list_display != ("__str__",), model.__name__
        url = reverse(f"admin:annotate_{model._meta.model_name}_changelist")
        assert admin_client.get(url, {"q": "x"}).status_code == 200, model.__name__
