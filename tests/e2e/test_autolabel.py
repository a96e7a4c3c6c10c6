"""Browser: ML staff calibrate, review the per-class thresholds, launch the bulk job, watch it finish
and read the audit results — headless Chromium against a live server with a real Celery worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live_server import PASSWORD, LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.celery, pytest.mark.slow, pytest.mark.data]


def test_calibrate_review_launch_and_audit(
    app_with_worker: tuple[LiveServer, Path],
    browser: Any,
    shared_data: Path,
    tiny_llama_dir: Path,
    artifacts_dir: Path,
) -> None:
    live, logs = app_with_worker
    seeded = live.call(
        "tests.e2e.autolabel_seed:seed_project",
        data_dir=str(shared_data),
        model_dir=str(tiny_llama_dir),
        tmp=str(logs / "seed"),
    )
    project = seeded["project"]
    live.call("tests.live_server:create_users", usernames=["mia"], roles=["ml"])
    context = browser.new_context(base_url=live.url, viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("input[name=username]", "mia")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.goto(f"/p/{project}/ml/")
        page.click("text=Auto-label")
        page.wait_for_url(f"**/p/{project}/ml/autolabel/")

        # 1. calibrate (a worker scores the 16 test items); the status section polls until done
        page.select_option("select[name=cascade]", "agreement")
        page.click("button:has-text('Calibrate')")
        page.wait_for_selector(".calibration-status:text('done')", timeout=180_000)
        assert "ECE" in page.inner_text("#calibration")

        # 2. review thresholds: no calibration split yet → no class can be auto-accepted
        rows = page.locator("#thresholds .threshold-row")
        assert rows.count() == 12  # 6 classes × (tier 1 + agreement tier)
        assert page.locator("#thresholds .never").count() == 12
        assert "more needed" in page.inner_text("#thresholds")  # no calibration split labelled yet
        page.screenshot(path=str(artifacts_dir / "autolabel-thresholds.png"), full_page=True)

        # test state: thresholds of 0 so that every item is auto-accepted and a share is audited
        live.call("tests.e2e.autolabel_seed:accept_everything", project=project)
        page.reload()
        assert page.locator("#thresholds .never").count() == 6  # the agreement tier still has none
        assert "GPU-hours" in page.inner_text("#launch")

        # 3. launch with a large audit share, 4. watch progress until done
        page.fill("input[name=audit_share]", "0.5")
        page.fill("input[name=chunk_size]", "8")
        page.click("button:has-text('Launch')")
        page.wait_for_selector(".run-status:text('done')", timeout=180_000)
        tier1 = page.locator("#tiers tr[data-tier='model'] td")
        assert [tier1.nth(i).inner_text() for i in range(4)] == ["model", "44", "44", "0"]
        assert "44 / 44 items" in page.inner_text("#run")
        waiting = int(page.inner_text("#audit p").split()[0])
        assert waiting >= 10

        # 5. annotators disagree with every audited item; settling the audit raises the alarm
        assert live.call("tests.e2e.autolabel_seed:label_audits_wrong", project=project) == waiting
        page.click("button:has-text('Settle audit')")
        page.wait_for_selector("#audit .audit-row")
        assert page.locator("#audit .alarm").count() >= 1
        assert "Auto-accept stopped for" in page.inner_text("#autolabel-status")
        assert page.locator("#thresholds .alarm").count() >= 1  # the blocked class, in the threshold table
        page.screenshot(path=str(artifacts_dir / "autolabel-audit.png"), full_page=True)
    except BaseException:
        page.screenshot(path=str(artifacts_dir / "autolabel-failed.png"), full_page=True)
        worker_log = (logs / "worker.log").read_text(errors="replace")[-3000:]
        print(worker_log, live.log_tail())
        raise
    finally:
        context.close()
