"""Browser: a lead settles a disagreement on the queue page (htmx swaps the row), and an annotator who
types a lead URL gets the 403 page."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from annotate.models import Adjudication, Annotation, Item, Project
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create
from tests.e2e.conftest import CHROMIUM
from tests.prerequisites import missing_prerequisite

# Playwright's sync API runs an event loop in this thread; the ORM calls below are still plain sync.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "pw-12345678"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_prerequisite("playwright is not installed (make install)")
    if not Path(CHROMIUM).exists():
        missing_prerequisite(f"no system Chromium at {CHROMIUM} (make browser)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def log_in(page: Any, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


@pytest.fixture
def disagreement() -> tuple[Project, Item]:
    project = project_create(name="news topics", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    alice = user_create(username="alice", password=PASSWORD, roles=["annotator"])
    bob = user_create(username="bob", password=PASSWORD, roles=["annotator"])
    user_create(username="lena", password=PASSWORD, roles=["lead"])
    item = Item.objects.create(
        project=project, external_id="split", text="The minister opened the stadium.", text_hash="h", required_labels=2
    )
    Annotation.objects.create(item=item, annotator=alice, label=project.labels.get(name="sports"))
    Annotation.objects.create(item=item, annotator=bob, label=project.labels.get(name="politics"))
    return project, item


def test_lead_adjudicates_a_disagreement(
    page: Any, live_server: Any, disagreement: tuple[Project, Item], artifacts_dir: Path
) -> None:
    project, item = disagreement
    log_in(page, live_server.url, "lena")
    queue_url = f"{live_server.url}/p/{project.pk}/lead/disagreements/"
    page.goto(queue_url)
    row = page.locator(f"#item-{item.pk}")
    assert "alice: sports" in row.inner_text() and "bob: politics" in row.inner_text()
    page.screenshot(path=str(artifacts_dir / "lead-disagreement-queue.png"), full_page=True)

    row.get_by_label("Final label for split").select_option(label="politics")
    row.get_by_label("Note for split").fill("about a minister")
    row.get_by_role("button", name="Decide").click()
    page.locator(f"#item-{item.pk} .decided").wait_for()
    assert "Decided: politics by lena" in page.locator(f"#item-{item.pk}").inner_text()
    assert page.url == queue_url  # htmx swapped the row in place
    page.screenshot(path=str(artifacts_dir / "lead-disagreement-decided.png"), full_page=True)

    item.refresh_from_db()
    assert item.final_label is not None and item.final_label.name == "politics"
    decision = Adjudication.objects.get(item=item)
    assert decision.decided_by.username == "lena" and decision.note == "about a minister"


def test_annotator_gets_403_on_a_lead_page(
    page: Any, live_server: Any, disagreement: tuple[Project, Item], artifacts_dir: Path
) -> None:
    project, item = disagreement
    log_in(page, live_server.url, "alice")
    response = page.goto(f"{live_server.url}/p/{project.pk}/lead/disagreements/")
    assert response is not None and response.status == 403
    assert "Not allowed" in page.locator("#forbidden").inner_text()
    assert "split" not in page.content()
    page.screenshot(path=str(artifacts_dir / "lead-403-for-annotator.png"), full_page=True)
