"""Browser: a lead finds items in the item browser (text search, filters, the item's history) and acts
on one; leads and ML staff manage the team (roles on the Team page, members of a project); the
annotate and ML pages on a 390 px phone screen never scroll sideways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.phone import PHONE, no_sideways_scroll
from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e


def test_item_browser_search_filter_history_and_relabel(
    live_app: LiveServer, user_page: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project", name="e2e-browse", n_items=6, n_overlap=2, users=["bra", "brb"]
    )
    project = seeded["project"]
    live_app.call("tests.e2e.test_data_browser:label_some", project=project)
    page = user_page("browse-lead", roles=["lead"])
    page.goto("/")
    page.locator(f"#project-{project}").get_by_role("link", name="Items").click()
    assert "6 items" in page.locator("#item-count").inner_text()
    page.evaluate("window.__no_reload = true")

    page.fill("#item-filters input[name=q]", "Item 3 of")
    page.get_by_role("button", name="Search").click()
    page.locator("#item-count", has_text="1 item").wait_for()
    assert "Item 3 of e2e-browse" in page.locator("#item-results").inner_text()
    page.screenshot(path=str(artifacts_dir / "browser-search.png"), full_page=True)

    page.get_by_role("link", name="Clear").click()
    page.select_option("#item-filters select[name=state]", "disagreement")  # htmx: filters apply on change
    page.locator("#item-count", has_text="1 item").wait_for()
    assert "bra: positive, brb: negative" in page.locator("#item-results").inner_text()
    page.select_option("#item-filters select[name=state]", "")
    page.select_option("#item-filters select[name=annotator]", label="bra")
    page.locator("#item-count", has_text="3 items").wait_for()
    page.screenshot(path=str(artifacts_dir / "browser-filter.png"), full_page=True)

    page.select_option("#item-filters select[name=state]", "disagreement")
    page.locator("#item-count", has_text="1 item").wait_for()
    page.locator("#item-results a").first.click()
    history = page.locator("#history").inner_text()
    assert "bra labelled it positive" in history and "brb labelled it negative" in history
    assert "selected into round 1's batch (random)" in history
    page.screenshot(path=str(artifacts_dir / "browser-item-history.png"), full_page=True)
    page.select_option("select[name=decision]", label="neutral")
    page.fill("input[name=note]", "neither")
    page.get_by_role("button", name="Relabel").click()
    page.locator("#item-final", has_text="neutral").wait_for()
    assert "browse-lead decided neutral — neither" in page.locator("#history").inner_text()


def test_team_admin_roles_and_project_members(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    seeded = live_app.call("tests.live_server:seed_labeling_project", name="e2e-team", n_items=2, users=["tm-ann"])
    project = seeded["project"]
    page = user_page("tm-ml", roles=["ml"])
    page.goto("/team/")
    page.fill("#add-user input[name=username]", "tm-new")
    page.fill("#add-user input[name=password]", "pw-tm-new-1")
    page.locator("#add-user input[name=roles][value=annotator]").check()
    page.get_by_role("button", name="Add user").click()
    row = page.locator("#user-tm-new")
    row.get_by_label("lead for tm-new").check()
    row.get_by_role("button", name="Save").click()
    page.get_by_text("Roles of tm-new saved.").wait_for()
    assert page.locator("#user-tm-new").get_by_label("lead for tm-new").is_checked()
    page.screenshot(path=str(artifacts_dir / "team-roles.png"), full_page=True)

    page.goto(f"/p/{project}/members/")
    assert "open to every user" in page.locator("#access-mode").inner_text()
    page.fill("#add-member input[name=username]", "tm-new")
    page.select_option("#add-member select[name=role]", "annotator")
    page.get_by_role("button", name="Save member").click()
    page.locator("#member-tm-new").wait_for()
    assert "tm-ml" in page.locator("#members").inner_text()  # the adder keeps access
    page.screenshot(path=str(artifacts_dir / "project-members.png"), full_page=True)
    outsider = user_page("tm-ann")  # a global annotator, not a member now
    response = outsider.goto(f"/p/{project}/annotate/")
    assert response is not None and response.status == 403


def test_annotate_and_ml_pages_fit_a_390px_phone(live_app: LiveServer, browser: Any, artifacts_dir: Path) -> None:
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project",
        name="e2e-phone with a rather long project name",
        n_items=4,
        labels=["very positive indeed", "negative", "neutral", "mixed feelings", "off topic"],
        users=["phone-ann"],
    )
    live_app.call("tests.live_server:create_users", usernames=["phone-ml"], roles=["ml"])
    live_app.call("tests.e2e.test_data_browser:finished_round", project=seeded["project"])
    context = browser.new_context(base_url=live_app.url, viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(15_000)
    for username, path in (("phone-ann", "annotate/"), ("phone-ml", "ml/")):
        page = context.new_page()
        page.goto("/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", live_app.password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.goto(f"/p/{seeded['project']}/{path}")
        no_sideways_scroll(page)
        page.screenshot(path=str(artifacts_dir / f"phone-{username}.png"), full_page=True)
        if username == "phone-ann":
            page.get_by_role("button", name="mixed feelings").click()  # a tap, not a key
            page.get_by_text("Saved “mixed feelings”").wait_for()
            no_sideways_scroll(page)
        else:
            assert "Test accuracy" in page.locator("#rounds").inner_text()
        page.context.clear_cookies()
    context.close()


# --- run inside the server's environment (LiveServer.call) ----------------------------------------


def label_some(*, project: int) -> None:
    """bra labels items 0–2 positive; brb labels the overlap items (0, 1): 0 agrees, 1 disagrees."""
    from django.contrib.auth.models import User

    from annotate.models import Item, Label, Round
    from annotate.services.labeling import label_submit, next_item_for

    labeling = Round.objects.get(project_id=project)
    positive, negative = (Label.objects.get(project_id=project, name=n) for n in ("positive", "negative"))
    bra, brb = User.objects.get(username="bra"), User.objects.get(username="brb")
    for _ in range(3):
        item = next_item_for(project=labeling.project, annotator=bra)
        assert item is not None
        label_submit(item=item, annotator=bra, label=positive)
    for label in (positive, negative):
        item = next_item_for(project=labeling.project, annotator=brb)
        assert item is not None and item.required_labels == 2
        label_submit(item=item, annotator=brb, label=label)
    assert Item.objects.filter(project_id=project, final_label__isnull=False).count() == 2


def finished_round(*, project: int) -> None:
    """A finished round 0 with metrics and cost, so the ML page shows its full round table."""
    from annotate.models import Round

    Round.objects.create(
        project_id=project,
        number=0,
        status="done",
        strategy="cold-start",
        metrics={"accuracy": 0.61, "macro_f1": 0.55, "labels": 20, "test_n": 50, "note": ""},
        cost={"steps": {"training": {"seconds": 75.0, "device": "cpu"}}, "human_minutes": 3.5, "labels": 20},
    )
