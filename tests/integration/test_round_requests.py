"""Asking for a round with a selection strategy: the service's check, ``manage.py round --strategy``,
the REST endpoint's ``strategy`` option and the ML page's select. Nothing runs here (no broker, no
model): these are the requests and what they record."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from annotate.models import ApiToken, Project, Round
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create
from annotate.services.rounds import UnknownStrategyError, round_request_start

pytestmark = pytest.mark.django_db

ALLOWED = "active, random, uncertainty-only, kcenter-only, margin-kcenter, portfolio"


@pytest.fixture
def project(smollm2_dir: Path, settings: Any) -> Project:
    settings.LLM_DIR = smollm2_dir
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return project_create(name="topics", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])


def test_an_unknown_strategy_is_refused_before_anything_is_written(project: Project) -> None:
    with pytest.raises(ValueError, match=f"unknown strategy 'smart'; expected one of {ALLOWED}"):
        round_request_start(project=project, user=None, strategy="smart")
    assert not Round.objects.exists()
    with pytest.raises(UnknownStrategyError):
        round_request_start(project=project, user=None, strategy="cold-start")  # set by the service, never asked for
    assert round_request_start(project=project, user=None, strategy="kcenter-only").strategy == "kcenter-only"


def test_round_command_takes_a_strategy(project: Project) -> None:
    out = io.StringIO()
    call_command("round", "start", "topics", "--strategy", "uncertainty-only", stdout=out)
    assert "round 1" in out.getvalue() and "uncertainty-only" in out.getvalue()
    assert Round.objects.get(project=project).strategy == "uncertainty-only"
    with pytest.raises(CommandError, match="invalid choice: 'smart'"):
        call_command("round", "start", "topics", "--strategy", "smart")
    with pytest.raises(CommandError, match="--strategy applies to a new round"):
        call_command("round", "status", "topics", "--strategy", "random")
    status = io.StringIO()
    call_command("round", "status", "topics", stdout=status)
    assert json.loads(status.getvalue())["strategy"] == "uncertainty-only"  # the listing shows it
    assert Round.objects.count() == 1


def _api(project: Project) -> tuple[Client, dict[str, str], str]:
    user = user_create(username="mlbot", password="pw-12345678", roles=["ml"])
    ApiToken.objects.create(user=user, digest=hashlib.sha256(b"secret-token").hexdigest())
    url = reverse("api_round_start", args=[project.pk])
    return Client(), {"Authorization": "Token secret-token"}, url


def test_api_round_start_takes_an_optional_strategy(project: Project) -> None:
    client, auth, url = _api(project)
    bad = client.post(url, {"strategy": "smart"}, content_type="application/json", headers=auth)
    assert bad.status_code == 400 and bad.json()["error"] == f"unknown strategy 'smart'; expected one of {ALLOWED}"
    garbled = client.post(url, "{strategy", content_type="application/json", headers=auth)
    assert garbled.status_code == 400 and "unreadable body" in garbled.json()["error"]
    assert not Round.objects.exists()

    made = client.post(url, {"strategy": "random"}, content_type="application/json", headers=auth)
    assert made.status_code == 201 and made.json()["strategy"] == "random"
    assert client.get(made.json()["url"], headers=auth).json()["strategy"] == "random"
    busy = client.post(url, {"strategy": "random"}, headers=auth)  # form fields work too
    assert busy.status_code == 409 and "round 1 is still pending" in busy.json()["error"]

    Round.objects.update(status="done")
    default = client.post(url, headers=auth)  # no body: active
    assert default.status_code == 201 and default.json()["strategy"] == "active"
    assert list(Round.objects.order_by("number").values_list("strategy", flat=True)) == ["random", "active"]


def test_ml_page_starts_a_round_with_the_selected_strategy(project: Project) -> None:
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    page = client.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert '<select name="strategy"' in page and '<option value="active" selected>' in page
    assert all(f'<option value="{name}"' in page for name in ALLOWED.split(", "))

    start = reverse("ml_round_start", args=[project.pk])
    refused = client.post(start, {"strategy": "smart"}, headers={"HX-Request": "true"}).content.decode()
    assert f"unknown strategy smart; expected one of {ALLOWED}" in refused and not Round.objects.exists()
    response = client.post(start, {"strategy": "kcenter-only"}, headers={"HX-Request": "true"}).content.decode()
    assert (
        "Round 1 requested." in response
        and '<div class="muted strategy" data-strategy="kcenter-only">Diversity only (k-center)</div>' in response
    )
    assert Round.objects.get(project=project).strategy == "kcenter-only"


def test_issue32_the_rounds_page_names_steps_and_strategies_in_words(project: Project) -> None:
    """The Rounds page shows a round's step and strategy as words ('Labelling', 'Cold start (typical
    items)', 'Waiting to start'), not the stored codes ('labeling', 'cold-start', 'pending'); the codes
    stay in data attributes for scripts and tests."""
    Round.objects.create(project=project, number=1, status="labeling", strategy="cold-start")
    Round.objects.create(project=project, number=2, status="failed", strategy="final-model", failure_reason="x")
    client = Client()
    client.force_login(user_create(username="mel", password="pw-12345678", roles=["ml"]))
    page = client.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert '<strong class="status" data-status="labeling">Labelling</strong>' in page
    assert 'data-strategy="cold-start">Cold start (typical items)</div>' in page
    assert '<strong class="status" data-status="failed">Failed</strong>' in page and ">Final model</div>" in page
    assert ">labeling<" not in page and ">cold-start<" not in page
