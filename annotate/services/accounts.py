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


def grantable_roles(actor_roles: set[str]) -> set[str]:
    """Roles an actor may give or take: leads the annotator and lead roles, ML staff all three."""
    from annotate.roles import ML

    return set(ALL_ROLES) if ML in actor_roles else set(ALL_ROLES) - {ML}


def _check_target(user: Any) -> None:
    if user.is_superuser:
        raise AccountError(f"{user.username} is an administrator; change them in the admin site")


@transaction.atomic
def user_create_by(*, actor_roles: set[str], username: str, password: str, roles: Sequence[str]) -> Any:
    """A lead or ML staff member adds a user (Team page). Roles outside what they may grant are refused."""
    refused = sorted(set(roles) - grantable_roles(actor_roles))
    if refused:
        raise AccountError(f"you may not give the role(s) {', '.join(refused)}")
    if not username.strip():
        raise AccountError("the username is empty")
    return user_create(username=username.strip(), password=password, roles=roles)


@transaction.atomic
def user_roles_set(*, actor_roles: set[str], user: Any, roles: Sequence[str]) -> Any:
    """Set the user's global roles within what the actor may grant; roles the actor may not grant
    stay as they are (a lead editing an ML user keeps their ml role)."""
    _check_target(user)
    grantable = grantable_roles(actor_roles)
    refused = sorted(set(roles) - grantable)
    if refused:
        raise AccountError(f"you may not give the role(s) {', '.join(refused)}")
    kept = set(user.groups.filter(name__in=ALL_ROLES).values_list("name", flat=True)) - grantable
    ensure_groups()
    user.groups.set(Group.objects.filter(name__in=set(roles) | kept))
    return user


@transaction.atomic
def membership_set(*, actor_roles: set[str], project: Any, user: Any, role: str, added_by: Any = None) -> Any:
    """Add the user to the project with `role`, or change their role there (one row per project and user)."""
    from annotate.models import ProjectMembership

    if role not in ALL_ROLES:
        raise AccountError(f"unknown role {role!r}; roles are {list(ALL_ROLES)}")
    if role not in grantable_roles(actor_roles):
        raise AccountError(f"you may not give the role {role}")
    current = ProjectMembership.objects.filter(project=project, user=user).first()
    if current is not None and current.role not in grantable_roles(actor_roles):
        raise AccountError(f"{user.username} is {current.role} in this project; only ML staff change that")
    membership, _ = ProjectMembership.objects.update_or_create(
        project=project, user=user, defaults={"role": role, "added_by": added_by}
    )
    return membership


@transaction.atomic
def membership_remove(*, actor_roles: set[str], project: Any, user: Any) -> None:
    from annotate.models import ProjectMembership

    current = ProjectMembership.objects.filter(project=project, user=user).first()
    if current is None:
        return
    if current.role not in grantable_roles(actor_roles):
        raise AccountError(f"{user.username} is {current.role} in this project; only ML staff remove that")
    current.delete()


@transaction.atomic
def first_user_create(*, username: str, password: str) -> Any:
    """The first account of an empty install: ML staff (who then add everyone else on the Team page).
    Refused once any user exists, so the first-run page can never make a second one."""
    from annotate.roles import ML

    if get_user_model().objects.exists():
        raise AccountError("this install already has users: ask ML staff for an account")
    return user_create(username=username.strip(), password=password, roles=[ML])


@transaction.atomic
def user_active_set(*, actor: Any, actor_roles: set[str], user: Any, active: bool) -> Any:
    """Deactivate (no login, no API token, its sessions end, its leased items go back to the queue;
    its labels stay) or reactivate a user. Leads may do it to annotators and leads, ML staff to anyone
    but administrators; nobody to themselves."""
    from annotate.models import Lease

    _check_target(user)
    if user.pk == actor.pk:
        raise AccountError("you cannot deactivate yourself")
    beyond = set(user.groups.filter(name__in=ALL_ROLES).values_list("name", flat=True)) - grantable_roles(actor_roles)
    if beyond:
        raise AccountError(f"{user.username} is {', '.join(sorted(beyond))}; only ML staff change that account")
    user.is_active = active
    user.save(update_fields=["is_active"])
    if not active:
        Lease.objects.filter(annotator=user).delete()
    return user
