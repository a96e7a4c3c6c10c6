from __future__ import annotations

from django.urls import path

from annotate.views import home

urlpatterns = [
    path("", home.home, name="home"),
]
