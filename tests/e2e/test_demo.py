"""The `make demo` path: migrate, demo_setup on TREC (project, users, printed passwords, round 1
requested), round 1 runs (here in-process via `manage.py round run-sync`; in the demo a Celery
worker runs it), then the demo annotator logs in with the printed password and sees a TREC item."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.data, pytest.mark.slow]


def test_demo_setup_ends_on_a_page_where_the_annotator_labels_trec(
    shared_data: Path, browser: Any, artifacts_dir: Path
) -> None:
    trec = shared_data / "trec"
    with open(trec / "train.csv", newline="", encoding="utf-8") as f:
        trec_texts = {row["text"] for row in csv.DictReader(f)}
    with LiveServer(kind="runserver", purpose="demo", database_url="") as live:
        live.manage("migrate", "--noinput")
        out = live.manage("demo_setup", "--data", str(trec))
        passwords = dict(re.findall(r"user (\w+)\s+password (\S+)", out))
        assert set(passwords) == {"annotator", "annotator2", "lead", "ml"}
        assert "5,452 items" in out
        assert "an empty install (no user yet) opens /accounts/first-user/" in out  # issue 32, problem 3
        again = live.manage("demo_setup", "--data", str(trec))  # idempotent: same project, new passwords
        assert "5,452 items" in again
        passwords = dict(re.findall(r"user (\w+)\s+password (\S+)", again))
        live.manage("round", "run-sync", "TREC demo")

        page = browser.new_page(base_url=live.url)
        page.goto("/accounts/login/")
        page.fill("input[name=username]", "annotator")
        page.fill("input[name=password]", passwords["annotator"])
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)
        page.get_by_role("link", name="Annotate", exact=True).first.click()
        shown = page.locator("article.item-text").first.inner_text().strip()
        page.screenshot(path=str(artifacts_dir / "demo-annotator-first-item.png"), full_page=True)
        assert shown in trec_texts
        page.keyboard.press("1")  # the first label, by keyboard
        page.wait_for_function("t => !document.body.innerText.includes(t)", arg=shown)
        page.close()
