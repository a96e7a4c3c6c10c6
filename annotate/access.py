"""Who may do what to which project, decided in one place for every route: the browser pages, the
REST API and any route added later.

Every view carries a `Policy` (set by `role_required`, `signed_in` or `token_required` below): the
roles it admits and how its project is found from the URL (a ``project_id``, or the project of the
round / calibration / run the URL names). `Policy.allows` is the only decision: in the route's project
it is the user's roles there (annotate.roles.project_roles: membership narrows the global role);
without a project, the global roles. A route whose view carries no policy is an error of
`manage.py check` (annotate.apps) and fails tests/integration/test_access.py, which walks the URLconf
and tries every route as an anonymous client, a non-member and each wrong role."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any, Literal, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponseBase, JsonResponse
from django.urls import URLPattern, URLResolver, get_resolver

from annotate.models import ApiToken
from annotate.roles import ROLE_NAMES, has_project_role, has_role

View = TypeVar("View", bound=Callable[..., HttpResponseBase])
ProjectOf = Callable[[Mapping[str, Any]], int]
NO_TOKEN = "missing or unknown token (Authorization: Token <token>)"
# URLconfs included from Django itself that check their own access: the admin site (staff only, its
# own login) and the login / logout / password pages (public by design; a password change needs a login).
SELF_GUARDED = {"admin", "django.contrib.auth.urls"}


def project_in_url(kwargs: Mapping[str, Any]) -> int:
    return int(kwargs["project_id"])


def project_of(model: type[Model], kwarg: str) -> ProjectOf:
    """The project of the ``model`` row the URL names by ``kwarg`` (404 when there is none), so a
    route like /api/rounds/<id>/ is decided in the round's project, like /p/<id>/ routes."""

    def find(kwargs: Mapping[str, Any]) -> int:
        found = model._default_manager.filter(pk=int(kwargs[kwarg])).values_list("project_id", flat=True).first()
        if found is None:
            raise Http404(f"no such {model._meta.verbose_name}")
        return int(found)

    return find


@dataclass(frozen=True)
class Policy:
    roles: tuple[str, ...]  # admitted roles; empty: any signed-in user
    project: ProjectOf | None  # how the route's project is found; None: a route outside projects
    auth: Literal["session", "token", "public"] = "session"  # public: anyone, signed in or not

    def allows(self, user: Any, kwargs: Mapping[str, Any]) -> bool:
        if self.auth == "public":
            return True
        if not user.is_authenticated:
            return False
        if not self.roles:
            return True
        if self.project is None:
            return has_role(user, *self.roles)
        return has_project_role(user, self.project(kwargs), *self.roles)

    def refusal(self) -> str:
        where = " in this project" if self.project is not None else ""
        return f"this needs the role {' or '.join(ROLE_NAMES.get(role, role) for role in self.roles)}{where}"


def _attach(view: Callable[..., HttpResponseBase], policy: Policy) -> None:
    view.access_policy = policy  # type: ignore[attr-defined]


def role_required(*roles: str, project: ProjectOf | None = None) -> Callable[[View], View]:
    """Session views: login first (anonymous → the login page), then the policy (403). The project is
    the URL's ``project_id`` where it has one. Leads may do what annotators do (views list both)."""

    def decorator(view: View) -> View:
        policy = Policy(roles=roles, project=project or (project_in_url if _names_project(view) else None))

        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not policy.allows(request.user, kwargs):
                raise PermissionDenied(policy.refusal())
            return view(request, *args, **kwargs)

        guarded = login_required(wrapped)
        _attach(guarded, policy)
        return guarded  # type: ignore[return-value]

    return decorator


def signed_in(view: View) -> View:
    """Pages for every signed-in user, whatever their roles (the home page lists what each may open)."""
    return role_required()(view)


def public(view: View) -> View:
    """Pages anyone opens, signed in or not: the login page, and the first-run page (which itself
    answers 404 once any user exists)."""
    _attach(view, Policy(roles=(), project=None, auth="public"))
    return view


def _names_project(view: Callable[..., Any]) -> bool:
    return "project_id" in inspect.signature(view).parameters  # follows __wrapped__ (require_POST etc.)


def token_user(request: HttpRequest) -> Any:
    """The active user of ``Authorization: Token <token>`` (its sha256 digest is looked up), or None."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "token" or not raw.strip():
        return None
    digest = hashlib.sha256(raw.strip().encode()).hexdigest()
    token = ApiToken.objects.select_related("user").filter(digest=digest).first()
    return token.user if token is not None and token.user.is_active else None


def token_required(*roles: str, project: ProjectOf | None = None) -> Callable[[View], View]:
    """REST views: the token's user (401 without one) must pass the policy (403, JSON); the view
    then finds that user as ``request.user``. Sessions do not count here: scripts send tokens."""
    if not roles:
        raise ValueError("a token route names the roles it admits (ALL_ROLES: any role in the project)")

    def decorator(view: View) -> View:
        policy = Policy(roles=roles, project=project or project_in_url, auth="token")

        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            user = token_user(request)
            if user is None:
                return JsonResponse({"error": NO_TOKEN}, status=401)
            if not policy.allows(user, kwargs):
                return JsonResponse({"error": policy.refusal()}, status=403)
            request.user = user
            return view(request, *args, **kwargs)

        _attach(wrapped, policy)
        return wrapped  # type: ignore[return-value]

    return decorator


@dataclass(frozen=True)
class Route:
    route: str  # the pattern as written, prefixes joined ("p/<int:project_id>/annotate/")
    name: str | None
    view: Callable[..., Any]
    params: tuple[str, ...]  # the URL's keyword parameters, prefixes' included
    included_from: str  # the Django URLconf it came from, if one of SELF_GUARDED; else ""

    @property
    def policy(self) -> Policy | None:
        return getattr(self.view, "access_policy", None)

    @property
    def self_guarded(self) -> bool:
        return bool(self.included_from)


def _guarded_include(resolver: URLResolver) -> str:
    names = {resolver.app_name or "", getattr(resolver.urlconf_name, "__name__", str(resolver.urlconf_name))}
    return next(iter(names & SELF_GUARDED), "")


def routes(
    patterns: list[Any] | None = None, prefix: str = "", params: tuple[str, ...] = (), included_from: str = ""
) -> Iterator[Route]:
    """Every URL pattern of the URLconf, included ones too (the admin's, the login pages')."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        names = params + tuple(entry.pattern.regex.groupindex)
        if isinstance(entry, URLResolver):
            inner = included_from or _guarded_include(entry)
            yield from routes(entry.url_patterns, prefix + str(entry.pattern), names, inner)
        elif isinstance(entry, URLPattern):
            yield Route(prefix + str(entry.pattern), entry.name, entry.callback, names, included_from)


def unguarded_routes() -> list[Route]:
    """Routes whose view carries no policy (and is not one of Django's self-guarded apps)."""
    return [r for r in routes() if r.policy is None and not r.self_guarded]
