"""Per-project membership: a project with members is open only to them, each with the role of their
membership; a project without members is open to every global role. The sweep walks every project
URL of the app (and the REST endpoints) as members of another project: each one is refused."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse
from django.utils import timezone

from annotate import urls
from annotate.models import (
    ApiToken,
    AutolabelRun,
    BulkAction,
    Calibration,
    ExportSnapshot,
    ImportJob,
    Item,
    ItemEvent,
    LabelSuspect,
    Project,
    ProjectMembership,
    Round,
    SavedFilter,
)
from annotate.services.accounts import AccountError, membership_set, user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def project_with_an_item(name: str) -> Project:
    project = project_create(name=name, labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    Item.objects.create(project=project, external_id=f"{name}-1", text=f"a text of {name}", text_hash=f"h-{name}")
    return project


@pytest.fixture
def world() -> dict[str, Any]:
    a, b, open_project = project_with_an_item("alpha"), project_with_an_item("beta"), project_with_an_item("open")
    people = {
        "alice": user_create(username="alice", password="pw-12345678", roles=["annotator"]),
        "lena": user_create(username="lena", password="pw-12345678", roles=["lead"]),
        "mia": user_create(username="mia", password="pw-12345678", roles=["ml"]),
        "bob": user_create(username="bob", password="pw-12345678", roles=["annotator"]),
    }
    for name, role in (("alice", "annotator"), ("lena", "lead"), ("mia", "ml")):
        ProjectMembership.objects.create(project=a, user=people[name], role=role)
    ProjectMembership.objects.create(project=b, user=people["bob"], role="annotator")
    return {"a": a, "b": b, "open": open_project, **people}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _export_snapshot(project: Project) -> ExportSnapshot:
    """A round's export snapshot (the snapshot download route names one), on a finished round of its own."""
    number = (project.rounds.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    done = Round.objects.create(project=project, number=number, status=Round.Status.DONE)
    return ExportSnapshot.objects.create(project=project, round=done, status=ExportSnapshot.Status.DONE, path="")


def _suspect(project: Project) -> LabelSuspect:
    """A possible label error on the project's item (the label-errors decide route names one)."""
    label = project.labels.first() or project.labels.create(name="x", code="x")
    return LabelSuspect.objects.create(
        project=project,
        item=project.items.get(),
        given=label,
        suggested=label,
        p_given=0.1,
        p_suggested=0.9,
        method="t",
        labels_seen=1,
    )


def project_urls(project: Project, other_user: Any) -> list[str]:
    """Every URL of the app that names a project, filled in with this project's ids."""
    item = project.items.get()
    job = ImportJob.objects.create(project=project, filename="x.csv")
    values = {
        "project_id": project.pk,
        "item_id": item.pk,
        "job_id": job.pk,
        "user_id": other_user.pk,
        # a decision on this project's item (the lead undo route names it)
        "event_id": ItemEvent.objects.create(item=item, kind="return", actor=other_user, at=timezone.now()).pk,
        "action_id": BulkAction.objects.create(project=project, actor=other_user, kind="review", item_ids=[item.pk]).pk,
        "filter_id": SavedFilter.objects.create(project=project, user=other_user, name="f").pk,
        "suspect_id": _suspect(project).pk,
        "snapshot_id": _export_snapshot(project).pk,
        "queue": "disagreements",
        "what": "labels",
        "fmt": "csv",
    }
    found = []
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        params = set(pattern.pattern.regex.groupindex)
        if "project_id" not in params or pattern.name is None or pattern.name.startswith("api_"):
            continue
        found.append(reverse(pattern.name, kwargs={k: values[k] for k in params}))
    return found


def test_members_of_one_project_are_refused_everywhere_in_another(world: dict[str, Any]) -> None:
    targets = project_urls(world["b"], world["bob"])
    assert len(targets) >= 25  # the sweep really walks the app's project pages
    rounds_before = Round.objects.filter(project=world["b"]).count()  # the snapshot's round
    for name in ("alice", "lena", "mia"):
        client = _client(world[name])
        for url in targets:
            for method in ("get", "post"):
                response = getattr(client, method)(url)
                assert response.status_code == 403, (name, method, url, response.status_code)
    assert Round.objects.filter(project=world["b"]).count() == rounds_before  # nothing was written


def test_members_get_the_role_of_their_membership(world: dict[str, Any]) -> None:
    a = world["a"]
    annotate, ml_home = reverse("annotate", args=[a.pk]), reverse("ml_home", args=[a.pk])
    lead_queue = reverse("lead_queue", args=[a.pk, "disagreements"])
    assert _client(world["alice"]).get(annotate).status_code == 200
    assert _client(world["alice"]).get(lead_queue).status_code == 403
    assert _client(world["lena"]).get(lead_queue).status_code == 200
    assert _client(world["lena"]).get(ml_home).status_code == 403
    assert _client(world["mia"]).get(ml_home).status_code == 200
    # A membership narrows a global role: bob is a global annotator but not in alpha.
    assert _client(world["bob"]).get(annotate).status_code == 403
    # A project without members is open to every global role.
    assert _client(world["bob"]).get(reverse("annotate", args=[world["open"].pk])).status_code == 200
    home = _client(world["bob"]).get(reverse("home")).content.decode()
    assert "beta" in home and "open" in home and "alpha" not in home


def test_api_tokens_read_and_start_rounds_only_in_their_projects(world: dict[str, Any]) -> None:
    ApiToken.objects.create(user=world["mia"], digest=hashlib.sha256(b"tok-mia").hexdigest())
    beta_round = Round.objects.create(project=world["b"], number=1)
    alpha_round = Round.objects.create(project=world["a"], number=1, status="done")
    headers = {"Authorization": "Token tok-mia"}
    client = Client()
    assert client.get(reverse("api_round", args=[alpha_round.pk]), headers=headers).status_code == 200
    assert client.get(reverse("api_round", args=[beta_round.pk]), headers=headers).status_code == 403
    started = client.post(reverse("api_round_start", args=[world["b"].pk]), headers=headers)
    assert started.status_code == 403 and Round.objects.filter(project=world["b"]).count() == 1


def test_the_autolabel_api_is_decided_in_the_project_like_the_rounds_api(world: dict[str, Any]) -> None:
    """Issue 34: mia is ML staff globally and a member of alpha only; alice annotates alpha. Neither
    may start or read beta's calibrations and auto-label runs; beta's own ML member may."""
    beta = world["b"]
    max_ = user_create(username="max", password="pw-12345678", roles=["ml"])
    ProjectMembership.objects.create(project=beta, user=max_, role="ml")
    for user, raw in ((world["mia"], b"tok-mia"), (world["alice"], b"tok-alice"), (max_, b"tok-max")):
        ApiToken.objects.create(user=user, digest=hashlib.sha256(raw).hexdigest())
    calibration = Calibration.objects.create(project=beta, created_by=max_)
    run = AutolabelRun.objects.create(project=beta, calibration=calibration, created_by=max_)
    client = Client()
    for token in ("tok-mia", "tok-alice"):
        headers = {"Authorization": f"Token {token}"}
        for name in ("api_calibration_start", "api_autolabel_start"):
            response = client.post(reverse(name, args=[beta.pk]), {"cascade": "none"}, headers=headers)
            assert response.status_code == 403, (token, name, response.status_code, response.content[:200])
        for name, pk in (("api_calibration", calibration.pk), ("api_autolabel", run.pk)):
            response = client.get(reverse(name, args=[pk]), headers=headers)
            assert response.status_code == 403 and "project" not in response.json(), (token, name)
    assert (Calibration.objects.count(), AutolabelRun.objects.count()) == (1, 1)  # nothing was started
    own = {"Authorization": "Token tok-max"}
    assert client.get(reverse("api_calibration", args=[calibration.pk]), headers=own).json()["project"] == beta.pk
    assert client.get(reverse("api_autolabel", args=[run.pk]), headers=own).json()["project"] == beta.pk
    assert client.get(reverse("api_autolabel", args=[run.pk])).status_code == 401


def test_members_page_adds_the_first_member_and_keeps_the_adder_in(world: dict[str, Any]) -> None:
    project, mia, bob = world["open"], world["mia"], world["bob"]
    client = _client(mia)
    url = reverse("project_members", args=[project.pk])
    assert "open to every user by their global role" in client.get(url).content.decode()
    response = client.post(url, {"username": "bob", "role": "annotator"})
    assert response.status_code == 302
    roles = dict(ProjectMembership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {"bob": "annotator", "mia": "ml"}  # the adder stays in with their own role
    assert _client(world["alice"]).get(reverse("annotate", args=[project.pk])).status_code == 403
    assert _client(bob).get(reverse("annotate", args=[project.pk])).status_code == 200
    unknown = client.post(url, {"username": "nobody", "role": "annotator"})
    assert unknown.status_code == 400 and "no such user" in unknown.content.decode()
    removed = client.post(reverse("project_member_remove", args=[project.pk, bob.pk]))
    assert removed.status_code == 302 and not ProjectMembership.objects.filter(project=project, user=bob).exists()


def test_a_lead_cannot_grant_the_ml_role(world: dict[str, Any]) -> None:
    with pytest.raises(AccountError, match="you may not give the role ml"):
        membership_set(actor_roles={"lead"}, project=world["a"], user=world["bob"], role="ml")
    with pytest.raises(AccountError, match="only ML staff change that"):
        membership_set(actor_roles={"lead"}, project=world["a"], user=world["mia"], role="annotator")
