"""An annotator works the annotate page in headless Chromium with the keyboard only: five labels with
number keys (each next item swapped in by htmx, no reload), an undo with `u` and a revision, a skip
with `s` and a reason taken back with `u` and made again; `h` and `?` overlays. Then the same page
without JavaScript: plain form posts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e

PANEL = "#annotate-panel"
KEY_LABELS = {"1": "positive", "2": "negative", "3": "neutral"}


def shown_item(page: Any) -> str:
    return str(page.locator(PANEL).get_attribute("data-item"))


def press_and_wait_for_new_item(page: Any, key: str) -> str:
    before = shown_item(page)
    page.keyboard.press(key)
    page.wait_for_function(
        "old => { const p = document.querySelector('#annotate-panel'); return p && p.dataset.item !== old; }",
        arg=before,
    )
    return shown_item(page)


def test_keyboard_labelling_skip_undo_and_revise(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    guidelines = "# Rules\n\n**Irony** counts as *negative*.<script>window.pwned = 1</script>"
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project", name="e2e-keys", n_items=10, guidelines=guidelines
    )
    page = user_page("keys")
    page.goto(f"/p/{seeded['project']}/annotate/")
    page.evaluate("window.__no_reload = true")

    labelled: list[tuple[str, str]] = []
    for key in "12312":
        item = shown_item(page)
        press_and_wait_for_new_item(page, key)
        labelled.append((item, KEY_LABELS[key]))
    assert page.locator(PANEL).get_by_text("Saved “negative”").is_visible()
    page.screenshot(path=str(artifacts_dir / "annotate-after-five-labels.png"), full_page=True)

    page.keyboard.press("u")  # the last labelled item comes back with its label highlighted
    last_item, last_label = labelled[-1]
    page.wait_for_function("id => document.querySelector('#annotate-panel').dataset.item === id", arg=last_item)
    current = page.locator(f"{PANEL} .label-button.current")
    assert current.count() == 1 and last_label in current.inner_text()
    page.screenshot(path=str(artifacts_dir / "annotate-undo.png"), full_page=True)
    press_and_wait_for_new_item(page, "3")  # revise to neutral

    skipped = shown_item(page)
    for attempt in range(2):  # skip, take the skip back with u (issue 32, problem 6), skip again
        page.keyboard.press("s")
        page.keyboard.type("ambiguous: two topics")
        before = shown_item(page)
        page.keyboard.press("Enter")
        page.wait_for_function("old => document.querySelector('#annotate-panel').dataset.item !== old", arg=before)
        if attempt == 0:
            page.keyboard.press("u")
            page.wait_for_function("id => document.querySelector('#annotate-panel').dataset.item === id", arg=skipped)
            assert page.locator("#unskipped").is_visible()

    page.keyboard.press("h")
    assert page.locator("dialog#guidelines").is_visible()
    assert page.locator("dialog#guidelines strong").inner_text() == "Irony"
    page.screenshot(path=str(artifacts_dir / "annotate-guidelines.png"))
    page.keyboard.press("Escape")
    page.keyboard.press("?")
    assert page.locator("dialog#shortcuts").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("dialog[open]").count()
    assert page.evaluate("window.__no_reload === true && window.pwned === undefined")  # htmx swaps, no reload

    state = live_app.call("tests.live_server:labeling_state", project=seeded["project"])
    mine = {a["item"]: a for a in state["annotations"] if a["user"] == "keys"}
    expected = {int(item): label for item, label in labelled[:-1]} | {int(last_item): "neutral"}
    assert {item: a["label"] for item, a in mine.items()} == expected
    assert [a["revisions"] for a in mine.values()].count(1) == 1 and mine[int(last_item)]["revisions"] == 1
    assert state["skips"] == [{"item": int(skipped), "user": "keys", "reason": "ambiguous: two topics"}]
    assert int(skipped) not in mine


def test_annotate_page_works_without_javascript(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    seeded = live_app.call("tests.live_server:seed_labeling_project", name="e2e-nojs", n_items=3)
    page = user_page("nojs", javascript=False)
    page.goto(f"/p/{seeded['project']}/annotate/")
    first = shown_item(page)
    page.get_by_role("button", name="negative").click()  # a plain form POST, then 303 to the queue
    page.wait_for_load_state()
    assert page.url.endswith(f"/p/{seeded['project']}/annotate/")
    assert shown_item(page) != first
    assert page.get_by_text("Saved “negative”").first.is_visible()
    page.locator("details.skip summary").click()
    page.fill("input[name=reason]", "off topic")
    page.get_by_role("button", name="Skip this item").click()
    page.wait_for_load_state()
    page.screenshot(path=str(artifacts_dir / "annotate-no-js.png"), full_page=True)

    state = live_app.call("tests.live_server:labeling_state", project=seeded["project"])
    assert [(a["item"], a["user"], a["label"]) for a in state["annotations"]] == [(int(first), "nojs", "negative")]
    assert [s["reason"] for s in state["skips"]] == ["off topic"]
