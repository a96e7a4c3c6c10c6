"""Every route of the URLconf — the app's pages, the REST API, and any route added later — refuses an
anonymous client, a non-member of the route's project and a member of each role it does not admit,
and lets a member of an admitted role through. The routes are read from the URLconf
(annotate.access.routes), not listed here: a route without a policy fails the first test (the
second shows that one added is caught), and a route with one is tried by the last with the rest,
which prints its count of routes × identities."""

from __future__ import annotations

import hashlib
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path, reverse
from django.utils import timezone

from annotate.access import Policy, Route, routes, unguarded_routes
from annotate.apps import _routes_without_policy
from annotate.models import (
    Adjudication,
    Annotation,
    ApiToken,
    AutolabelRun,
    BulkAction,
    Calibration,
    ImportJob,
    Item,
    ItemEvent,
    Lease,
    ProjectMembership,
    Round,
    SavedFilter,
    Skip,
)
from annotate.roles import ALL_ROLES
from annotate.services.accounts import user_create
from tests.integration.test_membership import (  # noqa: F401 (autouse fixture)
    _export_snapshot,
    _suspect,
    fast_passwords,
    project_with_an_item,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
# Values for the URL parameters the routes take, besides the ids of the world below.
SAMPLES = {"queue": "disagreements", "what": "labels", "fmt": "csv"}
WRITTEN = (
    Annotation,
    Skip,
    Lease,
    Adjudication,
    Round,
    Calibration,
    AutolabelRun,
    ImportJob,
    ProjectMembership,
    BulkAction,
    SavedFilter,
    ItemEvent,
)


class World:
    """Two restricted projects. Beta has one member per role; the outsider holds every global role
    and is ML staff of alpha, so only membership keeps them out of beta. Every user has a token."""

    def __init__(self) -> None:
        self.alpha, self.beta = project_with_an_item("alpha"), project_with_an_item("beta")
        self.members = {role: self._user(f"beta-{role}", [role]) for role in ALL_ROLES}
        for role, user in self.members.items():
            ProjectMembership.objects.create(project=self.beta, user=user, role=role)
        self.outsider = self._user("outsider", list(ALL_ROLES))
        ProjectMembership.objects.create(project=self.alpha, user=self.outsider, role="ml")
        self.global_users = {role: self._user(f"global-{role}", [role]) for role in ALL_ROLES}
        self.no_role = self._user("no-role", [])
        calibration = Calibration.objects.create(project=self.beta)
        self.ids = {
            "project_id": self.beta.pk,
            "item_id": self.beta.items.get().pk,
            "job_id": ImportJob.objects.create(project=self.beta, filename="x.csv").pk,
            "round_id": Round.objects.create(project=self.beta, number=1).pk,
            "calibration_id": calibration.pk,
            "run_id": AutolabelRun.objects.create(project=self.beta, calibration=calibration).pk,
            "user_id": self.no_role.pk,
            # A lead's decision on beta's item (recorded before history was kept: undo refuses it).
            "event_id": ItemEvent.objects.create(
                item=self.beta.items.get(), kind="return", actor=self.members["lead"], at=timezone.now()
            ).pk,
            # The item browser's bulk action (drafted by beta's lead) and saved filter.
            "action_id": BulkAction.objects.create(
                project=self.beta, actor=self.members["lead"], kind="review", item_ids=[self.beta.items.get().pk]
            ).pk,
            "filter_id": SavedFilter.objects.create(project=self.beta, user=self.members["lead"], name="f").pk,
            "suspect_id": _suspect(self.beta).pk,
            "snapshot_id": _export_snapshot(self.beta).pk,
        }

    @staticmethod
    def _user(name: str, roles: list[str]) -> Any:
        user = user_create(username=name, password="pw-12345678", roles=roles)
        ApiToken.objects.create(user=user, digest=hashlib.sha256(f"tok-{name}".encode()).hexdigest())
        return user

    def url(self, route: Route) -> str:
        assert route.name, f"route {route.route!r} has no name: name it, so it can be reversed and tried"
        params = route.params
        missing = [p for p in params if p not in self.ids and p not in SAMPLES]
        assert not missing, f"route {route.route!r} takes {missing}: add a value for them to this test's world"
        return reverse(route.name, kwargs={p: self.ids.get(p, SAMPLES.get(p)) for p in params})

    def refused_identities(self, policy: Policy) -> Iterator[tuple[str, Any]]:
        """(who, user) that the policy must refuse; user None is the anonymous client."""
        if policy.auth == "public":
            return  # the login and first-run pages: anyone
        yield "anonymous", None
        if not policy.roles:
            return  # any signed-in user: only the anonymous client is refused
        wrong = [role for role in ALL_ROLES if role not in policy.roles]
        if policy.project is None:
            yield "no role", self.no_role
            for role in wrong:
                yield f"global {role}", self.global_users[role]
            return
        yield "non-member with every role", self.outsider
        for role in wrong:
            yield f"member as {role}", self.members[role]

    def admitted(self, policy: Policy) -> Any:
        if not policy.roles:
            return self.no_role
        users = self.members if policy.project is not None else self.global_users
        return users[policy.roles[0]]


def _request(policy: Policy, user: Any, method: str, url: str) -> HttpResponse:
    client = Client()
    headers: dict[str, str] = {}
    if user is not None and policy.auth == "token":
        headers["Authorization"] = f"Token tok-{user.username}"
    elif user is not None:
        client.force_login(user)
    return getattr(client, method)(url, headers=headers)  # type: ignore[no-any-return]


def _refused(policy: Policy, user: Any, response: HttpResponse) -> bool:
    if user is not None:
        return response.status_code == 403
    if policy.auth == "token":
        return response.status_code == 401
    return response.status_code == 302 and response["Location"].startswith(reverse("login"))


def _snapshot() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in WRITTEN} | {
        "final labels": Item.objects.exclude(final_label=None).count()
    }


def test_every_route_has_a_policy() -> None:
    assert unguarded_routes() == []
    assert _routes_without_policy() == []
    public = sorted(str(r.name) for r in routes() if r.policy is not None and r.policy.auth == "public")
    assert public == ["first_user", "login"]  # anyone may open these two, and no other


def _forgotten(request: HttpRequest) -> HttpResponse:
    return HttpResponse("anyone")


def test_a_route_added_without_a_policy_is_caught() -> None:
    urlconf = types.ModuleType("forgotten_urls")
    urlconf.urlpatterns = [path("p/<int:project_id>/new-page/", _forgotten, name="new_page")]  # type: ignore[attr-defined]
    with override_settings(ROOT_URLCONF=urlconf):
        assert [r.route for r in unguarded_routes()] == ["p/<int:project_id>/new-page/"]
        assert [e.id for e in _routes_without_policy()] == ["annotate.E001"]


def test_every_route_refuses_outsiders_and_wrong_roles_and_admits_its_roles(capsys: pytest.CaptureFixture) -> None:
    world = World()
    guarded = [r for r in routes() if not r.self_guarded]
    assert len(guarded) >= 45  # the walk really reads the app's URLconf
    before = _snapshot()
    checks, requests, failures = 0, 0, []
    for route in guarded:
        policy = route.policy
        assert policy is not None, f"route {route.route!r} has no policy"
        url = world.url(route)
        for who, user in world.refused_identities(policy):
            checks += 1
            for method in ("get", "post"):
                requests += 1
                response = _request(policy, user, method, url)
                if not _refused(policy, user, response):
                    failures.append(f"{method.upper()} {url} as {who}: {response.status_code}")
    assert not failures, "\n".join(failures)
    assert _snapshot() == before  # no refused request wrote anything
    for route in guarded:  # and the policy is not "refuse everyone": an admitted role gets past it
        assert route.policy is not None
        response = _request(route.policy, world.admitted(route.policy), "get", world.url(route))
        assert not _refused(route.policy, world.admitted(route.policy), response), (route.route, response.status_code)
    with capsys.disabled():
        print(
            f"\naccess matrix: {len(guarded)} routes x their refused identities = {checks} route-identity checks "
            f"({requests} GET/POST requests, all refused), {len(guarded)} admitted-role checks passed"
        )
