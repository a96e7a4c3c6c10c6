"""Issue 32, the usability pass: a new team's pages at 390 × 844 (a phone) and 1280 × 800.

- filter bars and the review queue's decision forms wrap: no select is cut off or shows its options
  clipped (tests/e2e/phone.py cut_select_options);
- the phone top bar is one line: the navigation folds behind a "Menu" button (static/js/topbar.js)
  that the keyboard opens and closes, with aria-expanded saying which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.phone import PHONE, cut_select_options, no_sideways_scroll
from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e

DESKTOP = {"width": 1280, "height": 800}


def first_day_project(*, name: str) -> dict[str, Any]:
    """Runs in the live server's database: round 1 labelling, two annotators who disagree on one item
    (the lead's disagreement queue has a row), a finished round 0 (the ML page's full table)."""
    from django.contrib.auth.models import User

    from annotate.models import Label, Project
    from annotate.services.labeling import label_submit, next_item_for
    from tests.e2e.test_data_browser import finished_round
    from tests.live_server import seed_labeling_project

    users = [f"{name}-a", f"{name}-b"]
    seeded = seed_labeling_project(name=name, n_items=6, n_overlap=2, n_test=2, n_pool=4, users=users)
    project = Project.objects.get(pk=seeded["project"])
    a, b = (User.objects.get(username=u) for u in users)
    for annotator, label in ((a, "positive"), (b, "negative")):  # the first item needs both: they disagree
        item = next_item_for(project=project, annotator=annotator)
        assert item is not None and item.required_labels == 2
        label_submit(item=item, annotator=annotator, label=Label.objects.get(project=project, name=label))
    finished_round(project=project.pk)
    return seeded


@pytest.fixture(scope="module")
def project(live_app: LiveServer) -> int:
    """One project for the module's tests (they only read it)."""
    seeded: dict[str, Any] = live_app.call("tests.e2e.test_usability:first_day_project", name="usable")
    return int(seeded["project"])


# (role, page under /p/<id>/): the pages with a filter bar or other selects a new team meets first
SELECT_PAGES = [
    ("lead", "items/"),
    ("lead", "lead/disagreements/"),
    ("lead", "export/"),
    ("ml", "ml/"),
    ("ml", "setup/"),
    ("ml", "ml/autolabel/"),
    ("lead", "members/"),
]


def test_issue32_filter_bars_wrap_no_select_cut_on_a_phone_or_a_laptop(
    live_app: LiveServer, user_page: Any, project: int, artifacts_dir: Path
) -> None:
    pages = {role: user_page(f"usable-{role}", roles=[role]) for role in ("lead", "ml")}
    problems = []
    for viewport in (PHONE, DESKTOP):
        for role, path in SELECT_PAGES:
            page = pages[role]
            page.set_viewport_size(viewport)
            page.goto(f"/p/{project}/{path}")
            problems += [f"{viewport['width']}px /p/…/{path} {cut}" for cut in cut_select_options(page)]
            if viewport is PHONE:
                no_sideways_scroll(page)
    pages["lead"].set_viewport_size(PHONE)
    pages["lead"].goto(f"/p/{project}/lead/disagreements/")
    pages["lead"].screenshot(path=str(artifacts_dir / "usability-phone-review-queue.png"), full_page=True)
    pages["lead"].goto(f"/p/{project}/items/")
    pages["lead"].screenshot(path=str(artifacts_dir / "usability-phone-items.png"), full_page=True)
    assert not problems, "\n".join(problems)


def test_issue32_phone_top_bar_is_one_line_with_the_links_behind_a_menu_button(
    live_app: LiveServer, user_page: Any, project: int, artifacts_dir: Path
) -> None:
    page = user_page("usable-all", roles=["annotator", "lead", "ml"])  # every role: the longest navigation
    page.set_viewport_size(PHONE)
    page.goto(f"/p/{project}/items/")
    bar, menu = page.locator("header.topbar"), page.get_by_role("button", name="Menu")
    rounds = bar.get_by_role("link", name="Rounds")
    height = bar.bounding_box()["height"]
    assert height <= 56, f"the top bar is {height:.0f}px tall: more than one line"
    assert menu.get_attribute("aria-expanded") == "false" and not rounds.is_visible()
    page.screenshot(path=str(artifacts_dir / "usability-phone-topbar-closed.png"))

    # By keyboard: Tab from the top reaches the button beside the brand, Enter opens it, Escape closes it.
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Menu"
    page.keyboard.press("Enter")
    assert menu.get_attribute("aria-expanded") == "true" and rounds.is_visible()
    assert bar.get_by_role("button", name="Log out").is_visible()
    no_sideways_scroll(page)
    page.screenshot(path=str(artifacts_dir / "usability-phone-topbar-open.png"))
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Annotate"  # the first link of the menu
    page.keyboard.press("Escape")
    assert menu.get_attribute("aria-expanded") == "false" and not rounds.is_visible()
    assert page.evaluate("document.activeElement.textContent.trim()") == "Menu"
    menu.click()  # a tap
    rounds.click()
    page.wait_for_url(f"**/p/{project}/ml/")
    assert bar.bounding_box()["height"] <= 56 and menu.get_attribute("aria-expanded") == "false"

    page.goto(f"/p/{project}/lead/disagreements/")  # a page with its own keys: Enter decides the current row
    page.keyboard.press("j")
    menu.focus()
    page.keyboard.press("Enter")
    assert menu.get_attribute("aria-expanded") == "true"
    assert page.locator(".item-row select[name=decision]").count() == 1  # the row is still undecided

    page.set_viewport_size(DESKTOP)  # a laptop: no button, the links in the bar
    assert not menu.is_visible() and rounds.is_visible()

    plain = user_page("usable-nojs", roles=["annotator", "lead", "ml"], javascript=False)
    plain.set_viewport_size(PHONE)
    plain.goto(f"/p/{project}/items/")  # without JavaScript nothing folds: every link stays reachable
    assert plain.locator("header.topbar").get_by_role("link", name="Rounds").is_visible()
    assert not plain.get_by_role("button", name="Menu").is_visible()


def test_issue32_people_table_reads_as_cards_on_a_phone(
    live_app: LiveServer, user_page: Any, project: int, artifacts_dir: Path
) -> None:
    page = user_page("usable-lead", roles=["lead"])
    page.set_viewport_size(PHONE)
    page.goto(f"/p/{project}/lead/agreement/")
    no_sideways_scroll(page)
    aligned = page.eval_on_selector_all("#people td", "cells => cells.map(c => getComputedStyle(c).textAlign)")
    assert aligned and set(aligned) == {"left"}, aligned  # a card's "Labels: 3", not a number pushed right
    page.locator("#people").screenshot(path=str(artifacts_dir / "usability-phone-people.png"))


def test_issue32_laptop_top_bar_is_one_line_for_every_role(live_app: LiveServer, user_page: Any, project: int) -> None:
    """At 1280 px an all-role user (13 project links, the project's name, the account) gets one line with
    every link in view: the account (Password, Log out) folds behind a button with the user's name, which
    the keyboard opens and Escape closes. At 1024 px every link still shows, with no sideways scroll."""
    page = user_page("usable-wide", roles=["annotator", "lead", "ml"])
    bar = page.locator("header.topbar")
    account = bar.get_by_role("button", name="usable-wide")
    log_out = bar.get_by_role("button", name="Log out")
    for width in (1280, 1024):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(f"/p/{project}/ml/")
        height = bar.bounding_box()["height"]
        if width == 1280:
            assert height <= 56, f"{width}px: the top bar is {height:.0f}px tall: more than one line"
        links = bar.locator("nav a")
        assert links.count() == 13 and all(links.nth(i).is_visible() for i in range(13))
        no_sideways_scroll(page)
        assert account.is_visible() and not log_out.is_visible()
    account.focus()
    page.keyboard.press("Enter")
    assert account.get_attribute("aria-expanded") == "true" and log_out.is_visible()
    assert bar.get_by_role("link", name="Password").is_visible()
    page.keyboard.press("Escape")
    assert account.get_attribute("aria-expanded") == "false" and not log_out.is_visible()
    assert page.evaluate("document.activeElement.textContent.trim()").startswith("usable-wide")
    account.click()
    page.locator("main").click(position={"x": 5, "y": 5})  # a click elsewhere closes it
    assert not log_out.is_visible()
