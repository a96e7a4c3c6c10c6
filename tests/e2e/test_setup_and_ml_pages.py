"""Issue 32, problems 11 and 12, in headless Chromium against a live server:

11. the ML page agrees with the Agreement page and says what it shows;
12. setup errors are summarised at the top of the form, each linked to its field, focus moves to
    the summary on a failed submit (htmx and a plain post), and any batch size below 1 gets one
    message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e


def new_project(*, name: str) -> int:
    """Runs in the live server's database: a project with the defaults a new one gets."""
    from annotate.services.projects import LabelInput, project_create

    return project_create(name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")]).pk


def _submit_batch_size(page: Any, value: str) -> Any:
    page.fill("input[name=batch_size]", value)
    page.get_by_role("button", name="Save setup").click()
    summary = page.locator("#error-summary")
    summary.wait_for()
    return summary


def test_problem_12_setup_errors_summarised_at_the_top_linked_and_focused(live_app: LiveServer, user_page: Any) -> None:
    project = live_app.call("tests.e2e.test_setup_and_ml_pages:new_project", name="Setup errors")
    ml = user_page("setup-err-ml", roles=["ml"])
    ml.goto(f"/p/{project}/setup/")

    # −5 (htmx submit): a summary in the first screen, focused, linking to the field.
    summary = _submit_batch_size(ml, "-5")
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'error-summary'")
    box = summary.bounding_box()
    assert box is not None and box["y"] + box["height"] < 900, box  # within the first screen, not 1,600 px down
    link = summary.get_by_role("link", name="Batch size")
    assert link.get_attribute("href") == "#id_batch_size"
    minus_five = link.inner_text()
    assert "batch size B must be at least 1" in minus_five, minus_five
    link.click()
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'id_batch_size'")

    # 0: the same reason as −5 (it used to be Django's "greater than or equal to 0" for −5).
    zero = _submit_batch_size(ml, "0").get_by_role("link", name="Batch size").inner_text()
    assert zero.replace("got 0", "got -5") == minus_five, (zero, minus_five)

    # A plain post (a reload of the page with the errors): focus still lands on the summary.
    ml.evaluate("document.querySelector('#setup-card form').removeAttribute('hx-post')")
    ml.fill("input[name=batch_size]", "-1")
    with ml.expect_navigation():
        ml.evaluate("document.querySelector('#setup-card form').submit()")
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'error-summary'")
    assert "batch size B must be at least 1; got -1" in ml.locator("#error-summary").inner_text()

    # A valid value saves (htmx: a whole-page redirect with the message).
    ml.fill("input[name=batch_size]", "30")
    ml.get_by_role("button", name="Save setup").click()
    ml.get_by_text("Setup saved.").wait_for()
    assert ml.locator("#error-summary").count() == 0
