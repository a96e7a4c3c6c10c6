"""Account reads."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def install_is_empty() -> bool:
    """No user at all yet: the first visit creates the first ML-staff account (views.accounts)."""
    return not get_user_model().objects.exists()
