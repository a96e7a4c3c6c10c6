"""Roles are Django groups. Every view declares the roles it admits; the check runs server-side, so a
URL typed by hand gets 403, never the page."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase

ANNOTATOR = "annotator"
LEAD = "lead"
ML = "ml"
ALL_ROLES = (ANNOTATOR, LEAD, ML)

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


def roles_of(user: Any) -> set[str]:
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(ALL_ROLES)
    cached = getattr(user, "_alann_roles", None)
    if cached is None:
        cached = set(user.groups.filter(name__in=ALL_ROLES).values_list("name", flat=True))
        user._alann_roles = cached
    return cached


def has_role(user: Any, *roles: str) -> bool:
    return bool(roles_of(user) & set(roles))


def role_required(*roles: str) -> Callable[[View], View]:
    """Login required, then one of `roles` (403 otherwise). Leads may do what annotators do."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not has_role(request.user, *roles):
                raise PermissionDenied(f"this page needs the role {' or '.join(roles)}")
            return view(request, *args, **kwargs)

        return login_required(wrapped)  # type: ignore[return-value]

    return decorator
