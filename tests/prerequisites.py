"""What a test does when something it needs outside the checkout is missing (the shared data sets,
Chromium): a skip on a developer's machine, an error under ``CI=true``, so a CI run can never pass
by silently skipping the core-loop or browser tests."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def missing_prerequisite(reason: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"{reason} — CI=true: a missing prerequisite is an error, not a skip", pytrace=False)
    pytest.skip(reason)
