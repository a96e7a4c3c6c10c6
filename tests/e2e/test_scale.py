"""Browser: issue 32, the scale of the job. Problem 7: a project with 200 labels keys its nine most
used labels 1–9 and finds the others with a label search (`/`, arrows, Enter), and its annotate page
fits a 390 px phone in about one screen and a bit. Problem 8: the item browser sorts and acts on many
items at once (confirm, then undo), and a lead reviews by keyboard with the focus on the next row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.login import log_in
from tests.e2e.phone import PHONE, no_sideways_scroll
from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e

LABELS = [f"topic {i:03d}" for i in range(200)]


def test_problem_7_two_hundred_labels_keys_search_and_phone_height(
    live_app: LiveServer, user_page: Any, browser: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project", name="e2e-200", n_items=6, labels=LABELS, users=["sc-ann"]
    )
    project = seeded["project"]
    live_app.call("tests.e2e.test_scale:use_labels", project=project, names=["topic 150", "topic 150", "topic 077"])
    page = user_page("sc-ann")
    page.goto(f"/p/{project}/annotate/")
    buttons = page.locator("form.labels .label-button")
    assert buttons.count() == 9
    keyed = buttons.all_inner_texts()
    assert [t.split()[0] for t in keyed] == list("123456789")
    # The two used labels first, then label order; buttons stay in label order.
    assert [t.split(" ", 1)[1] for t in keyed] == [
        "topic 000", "topic 001", "topic 002", "topic 003", "topic 004", "topic 005", "topic 006", "topic 077",
        "topic 150",
    ]  # fmt: skip
    page.keyboard.press("9")
    page.get_by_text("Saved “topic 150”").wait_for()

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "label-search"
    page.keyboard.type("topic 19")
    options = page.locator("#label-options [role=option]:visible")
    assert options.all_inner_texts() == [f"topic 19{i}" for i in range(8)]  # eight matches at most
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.locator("#label-options [aria-selected=true]").inner_text() == "topic 192"
    page.screenshot(path=str(artifacts_dir / "scale-200-labels-search.png"))  # the README tour's picture
    page.keyboard.press("Enter")
    page.get_by_text("Saved “topic 192”").wait_for()
    page.keyboard.press("/")
    page.keyboard.type("188")
    page.keyboard.press("Enter")  # the first match
    page.get_by_text("Saved “topic 188”").wait_for()
    page.screenshot(path=str(artifacts_dir / "scale-200-labels.png"), full_page=True)

    context = browser.new_context(base_url=live_app.url, viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(15_000)
    phone = log_in(context, "sc-ann")
    phone.goto(f"/p/{project}/annotate/")
    phone.locator("#label-search").wait_for()
    no_sideways_scroll(phone)
    height = phone.evaluate("document.documentElement.scrollHeight")
    phone.screenshot(path=str(artifacts_dir / "scale-200-labels-phone.png"), full_page=True)
    assert height <= 1000, f"the annotate page is {height}px tall on a phone with 200 labels"
    phone.locator("#label-search").fill("topic 05")
    phone.get_by_role("option", name="topic 055").tap()
    phone.get_by_text("Saved “topic 055”").wait_for()
    context.close()


def test_problem_7_without_javascript_the_other_labels_are_a_select(live_app: LiveServer, user_page: Any) -> None:
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project", name="e2e-200-nojs", n_items=2, labels=LABELS[:40], users=["sc-nojs"]
    )
    page = user_page("sc-nojs", javascript=False)
    page.goto(f"/p/{seeded['project']}/annotate/")
    assert page.locator("form.labels .label-button").count() == 9
    assert not page.locator("#label-search").is_visible()
    page.select_option("form.label-more select[name=label]", label="topic 033")
    page.get_by_role("button", name="Save label").click()
    page.get_by_text("Saved “topic 033”").wait_for()


def test_problem_8_item_browser_sorts_bulk_relabels_with_confirm_and_undo_and_saves_filters(
    live_app: LiveServer, user_page: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call("tests.live_server:seed_labeling_project", name="e2e-bulk", n_items=6)
    project = seeded["project"]
    live_app.call("tests.e2e.test_scale:predict", project=project, tops=[0.9, 0.4, 0.7, 0.55, 0.95, 0.35])
    page = user_page("bulk-lead", roles=["lead"])
    page.goto(f"/p/{project}/items/")
    first_id = "#item-results tbody tr:first-child td:nth-child(2)"
    assert page.locator(first_id).inner_text() == "e2e-bulk-0"
    page.select_option("#item-filters select[name=sort]", "confidence")  # htmx: applies on change
    page.locator(first_id, has_text="e2e-bulk-5").wait_for()
    ids = page.locator("#item-results tbody tr td:nth-child(2)").all_inner_texts()
    assert ids == [f"e2e-bulk-{n}" for n in (5, 1, 3, 2, 0, 4)]  # lowest confidence first
    page.select_option("#item-filters select[name=sort]", "uncertainty")
    page.locator(first_id, has_text="e2e-bulk-5").wait_for()  # the flattest distribution first
    page.select_option("#item-filters select[name=sort]", "-confidence")
    page.locator(first_id, has_text="e2e-bulk-4").wait_for()

    page.fill("#save-filter input[name=name]", "sure ones")
    page.get_by_role("button", name="Save filter").click()
    page.get_by_text("Filter “sure ones” saved.").wait_for()
    page.goto(f"/p/{project}/items/")
    page.get_by_role("link", name="sure ones").click()
    page.locator(first_id, has_text="e2e-bulk-4").wait_for()

    page.get_by_label("Select e2e-bulk-4").check()
    page.get_by_label("Select e2e-bulk-0").check()
    page.select_option("#bulk-actions select[name=action]", "relabel")
    page.select_option("#bulk-actions select[name=label]", label="neutral")
    page.get_by_role("button", name="Continue…").click()
    assert "relabel 2 items to neutral" in page.locator("#bulk-summary").inner_text()
    page.screenshot(path=str(artifacts_dir / "bulk-confirm.png"), full_page=True)
    page.get_by_role("button", name="Confirm: relabel 2 items").click()
    page.get_by_text("Done: relabelled 2 items to neutral.").wait_for()
    assert live_app.call("tests.e2e.test_scale:final_labels", project=project) == {
        "e2e-bulk-0": "neutral",
        "e2e-bulk-4": "neutral",
    }
    assert page.locator(first_id).inner_text() == "e2e-bulk-4"  # back on the saved filter's order
    page.screenshot(path=str(artifacts_dir / "bulk-done.png"), full_page=True)
    page.locator("#last-bulk").get_by_role("button", name="Undo it").click()
    page.get_by_text("Undone: 2 items are as they were before.").wait_for()
    assert live_app.call("tests.e2e.test_scale:final_labels", project=project) == {}

    page.locator("#all-matching").check()
    page.select_option("#bulk-actions select[name=action]", "review")
    page.get_by_role("button", name="Continue…").click()
    assert "send 6 items to the review bucket" in page.locator("#bulk-summary").inner_text()
    page.get_by_role("link", name="Cancel").click()
    assert live_app.call("tests.e2e.test_scale:states", project=project) == {"pool": 6}


def test_problem_8_bulk_assign_serves_the_items_to_that_annotator_first(
    live_app: LiveServer, user_page: Any, browser: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call("tests.live_server:seed_labeling_project", name="e2e-assign", n_items=5, users=["as-ann"])
    project = seeded["project"]
    lead = user_page("assign-lead", roles=["lead"])
    lead.goto(f"/p/{project}/items/")
    lead.get_by_label("Select e2e-assign-3").check()
    lead.select_option("#bulk-actions select[name=action]", "assign")
    lead.select_option("#bulk-actions select[name=assignee]", label="as-ann")
    lead.get_by_role("button", name="Continue…").click()
    assert "assign 1 item to as-ann" in lead.locator("#bulk-summary").inner_text()
    lead.get_by_role("button", name="Confirm: assign 1 item").click()
    lead.get_by_text("Done: assigned 1 item to as-ann.").wait_for()
    annotator = user_page("as-ann")
    annotator.goto(f"/p/{project}/annotate/")
    assert "Item 3 of e2e-assign" in annotator.locator(".item-text").inner_text()  # before items 0–2
    annotator.keyboard.press("1")
    annotator.get_by_text("Saved “positive”").wait_for()
    assert "Item 0 of e2e-assign" in annotator.locator(".item-text").inner_text()  # then the queue
    lead.goto(f"/p/{project}/items/{seeded['items'][3]}/")
    assert "assign-lead assigned it to as-ann" in lead.locator("#history").inner_text()

    context = browser.new_context(base_url=live_app.url, viewport=PHONE, is_mobile=True, has_touch=True)
    phone = log_in(context, "assign-lead")
    phone.goto(f"/p/{project}/items/")
    no_sideways_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "items-phone.png"), full_page=True)
    context.close()


def test_problem_8_lead_reviews_by_keyboard_and_decide_moves_the_focus_to_the_next_row(
    live_app: LiveServer, user_page: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call(
        "tests.live_server:seed_labeling_project", name="e2e-lead-keys", n_items=4, n_overlap=4, users=["kla", "klb"]
    )
    project, rows = seeded["project"], seeded["items"]
    live_app.call("tests.e2e.test_scale:disagree", project=project, users=["kla", "klb"])
    page = user_page("keys-lead", roles=["lead"])
    page.goto(f"/p/{project}/lead/disagreements/")
    focused = "document.activeElement.id"
    assert page.evaluate(focused) == f"item-{rows[0]}"
    page.keyboard.press("j")
    assert page.evaluate(focused) == f"item-{rows[1]}"
    page.keyboard.press("k")
    assert page.evaluate(focused) == f"item-{rows[0]}"

    page.keyboard.press("2")  # the second label: negative
    page.keyboard.press("n")
    page.keyboard.type("close call")
    page.keyboard.press("Escape")
    assert page.evaluate(focused) == f"item-{rows[0]}"
    page.keyboard.press("Enter")
    page.locator(f"#item-{rows[0]}", has_text="Decided: negative by keys-lead").wait_for()
    page.wait_for_function(f"{focused} === 'item-{rows[1]}'")  # not the page body: the next row

    page.keyboard.press("x")
    page.keyboard.press("Enter")
    page.locator(f"#item-{rows[1]}", has_text="Decided: unlabelable").wait_for()
    page.wait_for_function(f"{focused} === 'item-{rows[2]}'")
    page.keyboard.press("k")
    page.keyboard.press("u")
    page.locator(f"#item-{rows[1]}", has_text="Undone").wait_for()
    page.wait_for_function(f"{focused} === 'item-{rows[1]}'")  # the focus settles just after the swap
    page.keyboard.press("r")
    page.locator(f"#item-{rows[1]}", has_text="In the review bucket.").wait_for()
    page.wait_for_function(f"{focused} === 'item-{rows[2]}'")
    page.keyboard.press("?")
    page.locator("#lead-shortcuts[open]").wait_for()
    page.screenshot(path=str(artifacts_dir / "lead-keyboard.png"), full_page=True)
    assert live_app.call("tests.e2e.test_scale:decisions", project=project) == [
        ["decision", "negative", "close call"],
        ["decision", None, ""],
        ["undo", None, "undid decision"],
        ["review", None, ""],
    ]


# --- run inside the server's environment (LiveServer.call) ----------------------------------------


def use_labels(*, project: int, names: list[str]) -> None:
    """One annotation per name (by throwaway annotators) on items outside the batch: label usage."""
    from django.contrib.auth.models import User

    from annotate.models import Annotation, Item, Label

    for n, name in enumerate(names):
        user, _ = User.objects.get_or_create(username=f"usage-{project}-{n}")
        item = Item.objects.create(project_id=project, external_id=f"usage-{n}", text=f"used {n}", text_hash=f"u{n}")
        Annotation.objects.create(item=item, annotator=user, label=Label.objects.get(project_id=project, name=name))


def predict(*, project: int, tops: list[float]) -> None:
    """A prediction per batch item (in id order) with top probability tops[n] on the first label."""
    from annotate.models import Item, Label, Prediction

    first = Label.objects.filter(project_id=project).order_by("order")[0]
    for item, top in zip(Item.objects.filter(project_id=project).order_by("id"), tops, strict=False):
        rest = (1.0 - top) / 2
        Prediction.objects.create(
            item=item, prompt_hash="p", adapter_set_hash="a", label=first, probs=[top, rest, rest], mass=0.9
        )


def final_labels(*, project: int) -> dict[str, str]:
    from annotate.models import Item

    rows = Item.objects.filter(project_id=project, final_label__isnull=False).values_list(
        "external_id", "final_label__name"
    )
    return dict(rows)


def states(*, project: int) -> dict[str, int]:
    from collections import Counter

    from annotate.models import Item

    return dict(Counter(Item.objects.filter(project_id=project).values_list("state", flat=True)))


def disagree(*, project: int, users: list[str]) -> None:
    """The first user labels every batch item with the first label, the second with the second."""
    from django.contrib.auth.models import User

    from annotate.models import Label, Project
    from annotate.services.labeling import label_submit, next_item_for

    labels = list(Label.objects.filter(project_id=project).order_by("order"))
    for user, label in zip((User.objects.get(username=u) for u in users), labels, strict=False):
        while (item := next_item_for(project=Project.objects.get(pk=project), annotator=user)) is not None:
            label_submit(item=item, annotator=user, label=label)


def decisions(*, project: int) -> list[list[Any]]:
    """The leads' history events in the project, oldest first: [kind, label name, note]."""
    from annotate.models import ItemEvent

    events = ItemEvent.objects.filter(item__project_id=project, kind__in=["decision", "undo", "review"])
    return [[e.kind, e.label.name if e.label else None, e.note] for e in events.select_related("label").order_by("id")]
