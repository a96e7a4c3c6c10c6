"""Roles are Django groups. Every view declares the roles it admits; the check runs server-side, so a
URL typed by hand gets 403, never the page."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
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


class RoleBackend(ModelBackend):
    """ModelBackend that reads the user's roles in the query that loads the user for each request,
    instead of a second query at the role check."""

    def get_user(self, user_id: Any) -> Any:
        model = get_user_model()
        user_groups = model.groups.through._meta.db_table  # type: ignore[attr-defined]
        in_role = [
            f"EXISTS (SELECT 1 FROM {user_groups} ug JOIN {Group._meta.db_table} g ON g.id = ug.group_id "
            f"WHERE ug.user_id = u.id AND g.name = %(role{n})s) AS in_role{n}"
            for n in range(len(ALL_ROLES))
        ]
        sql = f"SELECT u.*, {', '.join(in_role)} FROM {model._meta.db_table} u WHERE u.id = %(id)s"
        params = {"id": model._meta.pk.to_python(user_id), **{f"role{n}": r for n, r in enumerate(ALL_ROLES)}}
        user: Any = next(iter(model._default_manager.raw(sql, params)), None)
        if user is None or not self.user_can_authenticate(user):
            return None
        user._alann_roles = {role for n, role in enumerate(ALL_ROLES) if getattr(user, f"in_role{n}")}
        return user


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
