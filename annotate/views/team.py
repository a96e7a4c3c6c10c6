"""Team administration in the app: leads and ML staff add users and set their roles (Team page), and
choose a project's members with a role each (Members page). What a lead may grant is narrower than
ML staff (annotate.services.accounts.grantable_roles)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from annotate.access import role_required
from annotate.forms_data import MemberForm, UserCreateForm, UserRolesForm
from annotate.models import Project, ProjectMembership
from annotate.roles import ALL_ROLES, LEAD, ML, ROLE_NAMES, project_roles, roles_of
from annotate.services.accounts import (
    AccountError,
    grantable_roles,
    membership_remove,
    membership_set,
    user_active_set,
    user_create_by,
    user_roles_set,
)


def _team_context(request: HttpRequest, form: UserCreateForm | None = None) -> dict[str, object]:
    actor = roles_of(request.user)
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    rows = [
        {
            "user": user,
            "roles": sorted(g.name for g in user.groups.all() if g.name in ALL_ROLES),
            "editable": not user.is_superuser,
        }
        for user in users
    ]
    return {
        "rows": rows,
        "form": form or UserCreateForm(actor_roles=actor),
        "grantable": [ROLE_NAMES[role] for role in ALL_ROLES if role in grantable_roles(actor)],
        "all_roles": ROLE_NAMES.items(),
    }


@role_required(LEAD, ML)
def team(request: HttpRequest) -> HttpResponse:
    actor = roles_of(request.user)
    form = UserCreateForm(request.POST or None, actor_roles=actor)
    if request.method == "POST" and form.is_valid():
        try:
            user = user_create_by(actor_roles=actor, **form.cleaned_data)
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request, f"User {user.username} added ({', '.join(form.cleaned_data['roles']) or 'no role yet'})."
            )
            return redirect("team")
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "annotate/team.html", _team_context(request, form), status=status)


@role_required(LEAD, ML)
@require_POST
def team_roles(request: HttpRequest, user_id: int) -> HttpResponse:
    actor = roles_of(request.user)
    user = get_object_or_404(get_user_model(), pk=user_id)
    form = UserRolesForm(request.POST, actor_roles=actor)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errors in form.errors.values() for e in errors))
        return redirect("team")
    try:
        user_roles_set(actor_roles=actor, user=user, roles=form.cleaned_data["roles"])
    except AccountError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Roles of {user.username} saved.")
    return redirect("team")


@role_required(LEAD, ML)
@require_POST
def team_user_active(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_object_or_404(get_user_model(), pk=user_id)
    active = request.POST.get("active") == "1"
    try:
        user_active_set(actor=request.user, actor_roles=roles_of(request.user), user=user, active=active)
    except AccountError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, f"{user.username} {'reactivated' if active else 'deactivated: they can no longer log in'}."
        )
    return redirect("team")


@role_required(LEAD, ML)
def project_members(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    actor = project_roles(request.user, project.pk)
    form = MemberForm(request.POST or None, actor_roles=actor)
    if request.method == "POST" and form.is_valid():
        try:
            _keep_my_access(request, project, actor)
            membership_set(
                actor_roles=actor,
                project=project,
                user=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
                added_by=request.user,
            )
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request, f"{form.cleaned_data['username'].username} is now {form.cleaned_data['role']} here."
            )
            return redirect("project_members", project_id=project.pk)
    members = (
        ProjectMembership.objects.filter(project=project).select_related("user", "added_by").order_by("user__username")
    )
    context = {
        "project": project,
        "members": members,
        "form": form,
        "grantable": sorted(grantable_roles(actor)),
        "usernames": get_user_model().objects.order_by("username").values_list("username", flat=True),
    }
    return render(request, "annotate/members.html", context, status=400 if form.is_bound and form.errors else 200)


def _keep_my_access(request: HttpRequest, project: Project, actor: set[str]) -> None:
    """The first member restricts the project: the user adding them becomes a member too (with their
    own role here), so they do not lock themselves out."""
    if request.user.is_superuser or ProjectMembership.objects.filter(project=project).exists():
        return
    role = ML if ML in actor else LEAD
    membership_set(actor_roles=actor, project=project, user=request.user, role=role, added_by=request.user)


@role_required(LEAD, ML)
@require_POST
def project_member_remove(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    user = get_object_or_404(get_user_model(), pk=user_id)
    try:
        membership_remove(actor_roles=project_roles(request.user, project.pk), project=project, user=user)
    except AccountError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{user.username} is no longer a member.")
    return redirect("project_members", project_id=project.pk)
