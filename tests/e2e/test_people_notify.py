"""Issue 32's People, notifications and versioned exports, in headless Chromium against a live server:

- the Agreement page has a People table: per annotator accuracy against the leads' decisions and
  against gold labels with the counts behind them, the overrule rate and the median seconds per label;
- the setup page takes a webhook URL (http/https only, with a clear error otherwise) and email
  addresses, and lists recent notification deliveries with their failures;
- the export page lists one snapshot per finished round with its rows, sha256 and a download whose
  bytes hash to that sha256."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e


def people_project(*, name: str) -> int:
    """Runs in the live server's database: ann and bob labelled four items; a lead decided two; two
    have gold labels."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from annotate.models import Adjudication, Annotation, Item, Label
    from annotate.services.projects import LabelInput, project_create
    from tests.live_server import create_users

    project = project_create(name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos, neg = Label.objects.filter(project=project).order_by("order")
    ids = create_users(usernames=["pp-ann", "pp-bob", "pp-lead"], roles=["annotator"])
    ann, bob, lead = (User.objects.get(pk=ids[n]) for n in ("pp-ann", "pp-bob", "pp-lead"))
    items = [
        Item.objects.create(project=project, external_id=f"{name}-{n}", text=f"t{n}", text_hash=f"{name}{n}")
        for n in range(4)
    ]
    Item.objects.filter(id__in=[items[2].id, items[3].id]).update(gold_label=pos)
    start = timezone.now() - timedelta(minutes=5)
    for n, (item, label, spent) in enumerate(
        [(items[0], pos, 3.0), (items[1], pos, 5.0), (items[2], pos, 4.0), (items[3], neg, 6.0)]
    ):
        row = Annotation.objects.create(item=item, annotator=ann, label=label, seconds_spent=spent)
        Annotation.objects.filter(id=row.id).update(created_at=start + timedelta(seconds=10 * n))
    Annotation.objects.create(item=items[0], annotator=bob, label=neg, seconds_spent=2.0)
    Annotation.objects.create(item=items[1], annotator=bob, label=pos, seconds_spent=2.0)
    Adjudication.objects.create(item=items[0], label=neg, decided_by=lead)
    Adjudication.objects.create(item=items[1], label=pos, decided_by=lead)
    return project.pk


def test_people_table_on_the_agreement_page(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    project = live_app.call("tests.e2e.test_people_notify:people_project", name="e2e-people")
    page = user_page("people-lead", roles=["lead"])
    page.goto(f"/p/{project}/lead/agreement/")

    table = page.locator("#people")
    ann, bob = table.locator("#person-pp-ann"), table.locator("#person-pp-bob")
    assert ann.locator("td").nth(1).inner_text() == "4"
    assert ann.locator("td.adjudicated").inner_text() == "50 % (1 of 2)"  # kept on item 1, overruled on item 0
    assert ann.locator("td.gold").inner_text() == "50 % (1 of 2)"
    assert ann.locator("td.overruled").inner_text() == "25 % (1 of 4)"
    assert ann.locator("td.speed").inner_text() == "4.5 (4 timed)"  # 3, 4, 5, 6 s
    assert bob.locator("td.adjudicated").inner_text() == "100 % (2 of 2)"
    assert bob.locator("td.gold").inner_text() == "— (0 labels)"  # no gold item among bob's: says so
    assert bob.locator("td.overruled").inner_text() == "0 % (0 of 2)"
    assert table.locator("#person-pp-lead").count() == 0  # the lead labelled nothing
    page.locator("h2", has_text="People").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "agreement-people.png"), full_page=True)


def deliveries(*, project: int) -> None:
    """Runs in the live server's database: a finished round with a delivered and a failed notice."""
    from django.utils import timezone

    from annotate.models import NotificationDelivery, Round

    row = Round.objects.create(project_id=project, number=1, status="done", finished_at=timezone.now())
    NotificationDelivery.objects.create(
        project_id=project,
        round=row,
        event="round_done",
        channel="email",
        target="lead@example.org",
        status="sent",
        attempts=1,
        sent_at=timezone.now(),
    )
    NotificationDelivery.objects.create(
        project_id=project,
        round=row,
        event="round_done",
        channel="webhook",
        target="https://hooks.example.org/alann",
        status="failed",
        attempts=6,
        last_error="HTTPError: HTTP Error 500: Internal Server Error",
    )


def test_setup_takes_a_webhook_and_lists_failed_deliveries(
    live_app: LiveServer, user_page: Any, artifacts_dir: Path
) -> None:
    project = live_app.call("tests.e2e.test_setup_and_ml_pages:new_project", name="e2e-notify")
    ml = user_page("notify-ml", roles=["ml"])
    ml.goto(f"/p/{project}/setup/")

    ml.fill("input[name=notify_webhook_url]", "ftp://hooks.example.org/alann")
    ml.fill("input[name=notify_emails]", "lead@example.org, not-an-address")
    ml.get_by_role("button", name="Save setup").click()
    summary = ml.locator("#error-summary")
    summary.wait_for()
    text = summary.inner_text()
    assert "Webhook URL: the webhook URL must start with http:// or https:// (its scheme: “ftp://”)" in text, text
    assert "Email addresses: not an email address: not-an-address" in text, text

    ml.fill("input[name=notify_webhook_url]", "https://hooks.example.org/alann")
    ml.fill("input[name=notify_emails]", "lead@example.org; ml@example.org")
    ml.get_by_role("button", name="Save setup").click()
    ml.get_by_text("Setup saved.").wait_for()
    assert ml.input_value("input[name=notify_webhook_url]") == "https://hooks.example.org/alann"
    assert ml.input_value("input[name=notify_emails]") == "lead@example.org, ml@example.org"
    assert "None yet" in ml.locator("#deliveries").inner_text()

    live_app.call("tests.e2e.test_people_notify:deliveries", project=project)
    ml.reload()
    failed, sent = ml.locator("#deliveries tr.delivery.failed"), ml.locator("#deliveries tr.delivery.sent")
    assert "HTTP Error 500" in failed.inner_text() and "https://hooks.example.org/alann" in failed.inner_text()
    assert failed.locator("td.num").inner_text() == "6"
    assert "email: lead@example.org" in sent.inner_text()
    ml.goto(f"/p/{project}/ml/")  # the ML page points at the failure
    ml.locator("#failed-notices").get_by_role("link", name="Setup → Recent notifications").click()
    ml.locator("#deliveries tr.delivery.failed").wait_for()
    ml.locator("#deliveries").scroll_into_view_if_needed()
    ml.screenshot(path=str(artifacts_dir / "setup-notifications.png"), full_page=True)


def snapshot_rounds(*, name: str) -> int:
    """Runs in the live server's database: round 1 finished with three labelled items and its
    snapshot written; round 2's snapshot could not be written."""
    from django.contrib.auth.models import User

    from annotate.models import Annotation, ExportSnapshot, Item, Label, Round
    from annotate.services.projects import LabelInput, project_create
    from annotate.services.snapshots import snapshot_write

    project = project_create(name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos = Label.objects.filter(project=project).order_by("order")[0]
    ann = User.objects.create_user(f"{name}-ann")
    for n in range(3):
        item = Item.objects.create(project=project, external_id=f"{name}-{n}", text=f"=1+{n}", text_hash=f"{name}{n}")
        Annotation.objects.create(item=item, annotator=ann, label=pos)
    first = Round.objects.create(project=project, number=1, status="done")
    snapshot_write(round_id=first.id)
    second = Round.objects.create(project=project, number=2, status="done")
    ExportSnapshot.objects.create(
        project=project, round=second, status="failed", error="OSError: No space left on device"
    )
    return project.pk


def test_export_page_lists_snapshots_per_round(live_app: LiveServer, user_page: Any, artifacts_dir: Path) -> None:
    project = live_app.call("tests.e2e.test_people_notify:snapshot_rounds", name="e2e-snapshots")
    page = user_page("snapshot-lead", roles=["lead"])
    page.goto(f"/p/{project}/export/")

    first = page.locator("#snapshot-round-1")
    assert first.locator("td.num").inner_text() == "3"
    sha256 = first.locator("code[title]").get_attribute("title")
    assert sha256 and len(sha256) == 64
    assert "not written: OSError: No space left on device" in page.locator("#snapshot-round-2").inner_text()
    with page.expect_download() as info:
        first.get_by_role("link", name="labels.jsonl").click()
    download = info.value
    assert download.suggested_filename == f"project{project}-round1-labels.jsonl"
    data = Path(download.path()).read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha256
    assert data.count(b"\n") == 3 and b'"=1+0"' not in data  # the audit rows (no texts), exact JSON
    page.locator("#snapshots").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "export-snapshots.png"), full_page=True)
