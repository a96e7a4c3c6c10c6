"""Roles are Django groups, and per project a membership can narrow them. Every route declares the
roles it admits (annotate.access, the one place that decides); the check runs server-side, so a URL
typed by hand gets 403, never the page.

Who can open a project (decision, README "Who can open a project"): a project without members is
open to every user by their global role (one team, one install: nothing to set up); once a lead or
ML staff adds a member, the project is open only to its members, each with the role of their
membership (a global "ml" user who is not a member gets 403 there, an annotator of project A cannot
label project B). Superusers open everything."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group

ANNOTATOR = "annotator"
LEAD = "lead"
ML = "ml"
ALL_ROLES = (ANNOTATOR, LEAD, ML)
ROLE_NAMES = {ANNOTATOR: "Annotator", LEAD: "Lead", ML: "ML staff"}  # as pages show them


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


def _membership_sql() -> str:
    from annotate.models import ProjectMembership

    table = ProjectMembership._meta.db_table
    # One statement: my role if I am a member; else any member's row (the project is restricted).
    return (
        f"SELECT role, user_id = %(user)s FROM {table} WHERE project_id = %(project)s "
        "ORDER BY CASE WHEN user_id = %(user)s THEN 0 ELSE 1 END LIMIT 1"
    )


def project_roles(user: Any, project_id: int) -> set[str]:
    """The user's roles in one project: their global roles while the project has no members, else
    the role of their membership (none: not a member). Read once per request and project."""
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(ALL_ROLES)
    cache: dict[int, set[str]] = user.__dict__.setdefault("_alann_project_roles", {})
    if project_id not in cache:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(_membership_sql(), {"user": user.pk, "project": int(project_id)})
            row = cursor.fetchone()
        if row is None:
            cache[project_id] = set(roles_of(user))
        else:
            cache[project_id] = {row[0]} if row[1] else set()
    return cache[project_id]


def has_project_role(user: Any, project_id: int, *roles: str) -> bool:
    return bool(project_roles(user, project_id) & set(roles))
