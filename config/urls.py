from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from annotate.views import accounts

urlpatterns = [
    path("admin/", admin.site.urls),
    # Before Django's own: the login page sends an empty install to the first-run page.
    path("accounts/login/", accounts.login_page, name="login"),
    path("accounts/first-user/", accounts.first_user, name="first_user"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("annotate.urls")),
]
