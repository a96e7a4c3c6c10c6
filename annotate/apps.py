from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _create_role_groups(sender: AppConfig, **kwargs: Any) -> None:
    from annotate.services.accounts import ensure_groups

    ensure_groups()


class AnnotateConfig(AppConfig):
    name = "annotate"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The role groups exist as soon as the database does (migrate), not only after a demo setup.
        post_migrate.connect(_create_role_groups, sender=self)
        from annotate import signals

        signals.connect()
