from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


def _create_role_groups(sender: AppConfig, **kwargs: Any) -> None:
    from annotate.services.accounts import ensure_groups

    ensure_groups()


def _routes_without_policy(**kwargs: Any) -> list[checks.CheckMessage]:
    """A route added without an access policy stops ``manage.py check`` / migrate / runserver, before
    any user can reach it."""
    from annotate.access import unguarded_routes

    return [
        checks.Error(
            f"route {route.route!r} ({route.name}) has no access policy",
            hint="decorate its view with annotate.access.role_required, signed_in or token_required",
            obj=route.view,
            id="annotate.E001",
        )
        for route in unguarded_routes()
    ]


class AnnotateConfig(AppConfig):
    name = "annotate"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The role groups exist as soon as the database does (migrate), not only after a demo setup.
        post_migrate.connect(_create_role_groups, sender=self)
        checks.register(_routes_without_policy, checks.Tags.security, checks.Tags.urls)
        from annotate import signals

        signals.connect()
