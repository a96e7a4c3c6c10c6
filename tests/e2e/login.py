"""Logging a browser context in through the login form, and adding users on the Team page, as a user would."""

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


def team_add(page: Any, users: list[tuple[str, str]]) -> None:
    """On the Team page (already open): add each (username, role); the password is pw-<username>-secret."""
    for username, role in users:
        page.fill("#add-user input[name=username]", username)
        page.fill("#add-user input[name=password]", f"pw-{username}-secret")
        page.locator(f"#add-user input[name=roles][value={role}]").check()
        page.get_by_role("button", name="Add user").click()
        page.locator(f"#user-{username}").wait_for()
