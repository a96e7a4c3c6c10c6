"""Browser: a lead presses "Scan the labels now"; the page shows the scan's progress while a real Celery
worker runs it (htmx polls the status every 2 s) and then, without a reload, the suspects to decide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.login import log_in
from tests.live_server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.celery, pytest.mark.slow, pytest.mark.data]


def test_a_lead_scans_watches_the_progress_and_gets_the_suspects(
    app_with_worker: tuple[LiveServer, Path], browser: Any, shared_data: Path, smollm2_dir: Path, artifacts_dir: Path
) -> None:
    live, logs = app_with_worker
    seeded = live.call(
        "tests.e2e.autolabel_seed:seed_flipped_project",
        data_dir=str(shared_data),
        model_dir=str(smollm2_dir),
        tmp=str(logs / "seed"),
    )
    project = seeded["project"]
    live.call("tests.live_server:create_users", usernames=["lena"], roles=["lead"])
    context = browser.new_context(base_url=live.url, viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(20_000)
    page = log_in(context, "lena")
    try:
        page.goto(f"/p/{project}/lead/label-errors/")
        assert page.locator("#label-suspects").count() == 0 and "No open possible label errors" in page.inner_text(
            "body"
        )
        page.click("button:has-text('Scan the labels now')")
        page.wait_for_selector("#label-error-scan progress")  # the progress bar, from the click's own answer
        assert "Step" in page.inner_text("#scan-step") and page.locator("text=Scan the labels now").count() == 0
        page.wait_for_selector("#label-error-scan[data-status='done']", timeout=180_000)
        page.wait_for_selector("#label-suspects tr[id^='suspect-']")  # swapped in, no reload
        shown = page.locator("#label-suspects tr[id^='suspect-']").count()
        assert shown > 0 and f"{shown} new in the queue" in page.inner_text("#scan-result")
        assert page.locator("#label-error-scan progress").count() == 0
        page.screenshot(path=str(artifacts_dir / "label-errors-scanned.png"), full_page=True)
        page.locator("#label-suspects button:has-text('Keep')").first.click()  # the queue works as before
        page.wait_for_selector("#suspects-decided")
    except BaseException:
        page.screenshot(path=str(artifacts_dir / "label-errors-failed.png"), full_page=True)
        print((logs / "worker.log").read_text(errors="replace")[-3000:], live.log_tail())
        raise
    finally:
        context.close()
