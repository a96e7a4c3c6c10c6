"""Accounts: the three role groups and users that belong to them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from annotate.roles import ALL_ROLES


class AccountError(ValueError):
    pass


def ensure_groups() -> list[Group]:
    """Create the annotator, lead and ml groups if missing. Idempotent; safe to call on every start."""
    return [Group.objects.get_or_create(name=role)[0] for role in ALL_ROLES]


@transaction.atomic
def user_create(*, username: str, password: str, roles: Sequence[str], email: str = "", is_staff: bool = False) -> Any:
    """Create a user in the given role groups. Unknown roles are refused, not silently dropped."""
    unknown = sorted(set(roles) - set(ALL_ROLES))
    if unknown:
        raise AccountError(f"unknown role(s) {unknown}; roles are {list(ALL_ROLES)}")
    user_model = get_user_model()
    if user_model.objects.filter(username=username).exists():
        raise AccountError(f"user {username!r} already exists")
    ensure_groups()
    user = user_model.objects.create_user(username=username, password=password, email=email, is_staff=is_staff)
    user.groups.set(Group.objects.filter(name__in=roles))
    return user
