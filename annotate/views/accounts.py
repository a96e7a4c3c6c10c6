"""Accounts outside the Team page: the login page, which sends an empty install (no user at all) to
the first-run page, and that page, which creates the first ML-staff account and is gone (404) once
any user exists. Password changes are Django's own pages (accounts/password_change/)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render

from annotate.access import public
from annotate.selectors.accounts import install_is_empty
from annotate.services.accounts import AccountError, first_user_create


@public
def login_page(request: HttpRequest) -> HttpResponseBase:
    if install_is_empty():
        return redirect("first_user")
    return LoginView.as_view()(request)


@public
def first_user(request: HttpRequest) -> HttpResponse:
    if not install_is_empty():
        raise Http404("this install already has users")
    form: UserCreationForm[Any] = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = first_user_create(username=form.cleaned_data["username"], password=form.cleaned_data["password1"])
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome, {user.username}: you are ML staff. Add your team on the Team page.")
            return redirect("home")
    return render(request, "registration/first_user.html", {"form": form}, status=400 if form.errors else 200)
