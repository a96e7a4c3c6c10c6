"""Issue 32, problem 6 in headless Chromium: `u` after `s` takes the skip back (it used to reopen the
previous label); a lead's decision is undone from the review queue, refused clearly when the item
changed since; a second relabel keeps the first decision and its note on the item page and in the
labels export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e

PANEL = "#annotate-panel"


def shown_item(page: Any) -> str:
    return str(page.locator(PANEL).get_attribute("data-item"))


def press_and_wait(page: Any, key: str) -> None:
    before = shown_item(page)
    page.keyboard.press(key)
    page.wait_for_function("old => document.querySelector('#annotate-panel').dataset.item !== old", arg=before)


def relabel_as_other_lead(*, item: int, label: str, note: str) -> None:
    """Another lead relabels the item meanwhile (from the item page, in another browser)."""
    from django.contrib.auth.models import User

    from annotate.models import Item, Label
    from annotate.services.review import adjudicate
    from tests.live_server import create_users

    lead = create_users(usernames=["hist-leo"], roles=["lead"])["hist-leo"]
    row = Item.objects.get(pk=item)
    adjudicate(
        item=row, label=Label.objects.get(project=row.project, name=label), lead=User.objects.get(pk=lead), note=note
    )


def test_problem_6_skip_undo_lead_undo_and_history(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    seeded = live_app.call("tests.live_server:seed_labeling_project", name="e2e-history", n_items=4, n_overlap=1)
    project, disputed = seeded["project"], seeded["items"][0]

    ann = user_page("hist-ann")
    ann.goto(f"/p/{project}/annotate/")
    assert shown_item(ann) == str(disputed)
    press_and_wait(ann, "1")  # positive
    skipped = shown_item(ann)
    ann.keyboard.press("s")
    ann.keyboard.type("two topics")
    press_and_wait(ann, "Enter")
    press_and_wait(ann, "u")  # takes the skip back: the skipped item, to label now
    assert shown_item(ann) == skipped
    assert ann.locator("#unskipped").is_visible()
    ann.screenshot(path=str(artifacts_dir / "history-skip-taken-back.png"), full_page=True)
    press_and_wait(ann, "3")
    assert shown_item(ann) != skipped

    bob = user_page("hist-bob")
    bob.goto(f"/p/{project}/annotate/")
    assert shown_item(bob) == str(disputed)
    press_and_wait(bob, "2")  # negative: a disagreement

    lead = user_page("hist-lena", roles=["lead"])
    lead.goto(f"/p/{project}/lead/disagreements/")
    row = lead.locator(f"#item-{disputed}")
    row.get_by_label("Final label for e2e-history-0").select_option(label="positive")
    row.get_by_label("Note for e2e-history-0").fill("irony reads as positive here")
    row.get_by_role("button", name="Decide").click()
    lead.locator(f"#item-{disputed} .decided").wait_for()
    lead.locator(f"#item-{disputed}").get_by_role("button", name="Undo this decision").click()
    lead.get_by_text("Undone: the item is as it was before the decision.").wait_for()
    assert lead.locator(f"#item-{disputed}").get_by_role("button", name="Decide").is_visible()
    lead.goto(f"/p/{project}/lead/disagreements/")  # the item waits for a lead again
    assert lead.locator(f"#item-{disputed}").count() == 1

    row = lead.locator(f"#item-{disputed}")
    row.get_by_label("Final label for e2e-history-0").select_option(label="positive")
    row.get_by_label("Note for e2e-history-0").fill("irony reads as positive here")
    row.get_by_role("button", name="Decide").click()
    lead.locator(f"#item-{disputed} .decided").wait_for()
    live_app.call("tests.e2e.test_history:relabel_as_other_lead", item=disputed, label="neutral", note="second look")
    lead.locator(f"#item-{disputed}").get_by_role("button", name="Undo this decision").click()  # stale button
    refusal = lead.locator(f"#item-{disputed} .error")
    refusal.wait_for()
    assert "changed since" in refusal.inner_text() and "hist-leo" in refusal.inner_text()
    lead.screenshot(path=str(artifacts_dir / "history-undo-refused.png"), full_page=True)

    lead.goto(f"/p/{project}/items/{disputed}/")
    history = lead.locator("#history").inner_text()
    assert "hist-lena decided positive — irony reads as positive here" in history, history
    assert "hist-leo decided neutral — second look" in history, history
    assert "hist-lena undid the decision" in history, history
    lead.locator("#history").get_by_role("button", name="Undo this decision").click()  # leo's relabel
    assert lead.locator("#item-final").inner_text() == "positive"
    lead.screenshot(path=str(artifacts_dir / "history-item-page.png"), full_page=True)

    export = lead.request.get(f"/p/{project}/export/labels.jsonl")
    rows = [json.loads(line) for line in export.text().splitlines()]
    row_history = next(r["history"] for r in rows if r["item_id"] == "e2e-history-0")
    decisions = [(e["by"], e["label"], e["note"]) for e in row_history if e["kind"] == "decision"]
    assert decisions == [
        ("hist-lena", "positive", "irony reads as positive here"),
        ("hist-lena", "positive", "irony reads as positive here"),
        ("hist-leo", "neutral", "second look"),
    ]
    skipped_row = next(r for r in rows if r["item_id"] == f"e2e-history-{seeded['items'].index(int(skipped))}")
    assert [e["kind"] for e in skipped_row["history"]] == ["skip", "undo", "label"]
