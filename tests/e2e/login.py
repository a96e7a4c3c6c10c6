"""Logging a browser context in through the login form, as a user would."""

from __future__ import annotations

from typing import Any

from tests.live_server import PASSWORD


def log_in(context: Any, username: str, password: str = PASSWORD) -> Any:
    """A new page of ``context``, logged in as ``username`` (it has left the login page)."""
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return page
