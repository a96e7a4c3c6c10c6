"""Issue 32, a new team's first day, in headless Chromium against a live server with a real Celery
worker (imports run as tasks on it). One test per numbered problem of the issue:

1. dead ends: a small upload no longer goes all into the test set (capped, with a warning before
   it is drawn), a new size redraws it until round 1 trains, a project can be archived and
   deleted (typed confirmation, ML staff only);
2. a round measured on too few labelled test items shows how many are missing instead of an
   accuracy, and an annotator with nothing left in the batch is sent to the Test set queue;
3. an empty install opens a page that creates the first ML-staff account (then 404); every user
   changes their password; leads and ML staff deactivate users;
9. re-uploading texts already in the project skips them (spacing aside), by default, and says how
   many; an option keeps them;
13. the export offers spreadsheet-safe CSV and exact CSV / JSONL / Parquet, the test set unticked."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.deployed import stop_groups
from tests.e2e.login import log_in, team_add
from tests.live_server import ROOT, LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.celery]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    """A live server and one Celery worker on the default queue (imports and bookkeeping; nothing
    here trains), both on this run's own Redis database (REDIS_URL, claimed by tests/conftest.py)."""
    logs = tmp_path_factory.mktemp("first-day")
    with LiveServer(kind="runserver", purpose="firstday") as live:
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "default,io", "-c", "1"]
        cmd += ["--pool", "solo", "-n", "firstday@%h", "--loglevel", "INFO"]
        log = (logs / "worker.log").open("ab")
        worker = subprocess.Popen(cmd, cwd=ROOT, env=live.env, stdout=log, stderr=log, start_new_session=True)
        try:
            yield live, logs
        finally:
            stop_groups({"worker": worker})


@pytest.fixture
def open_as(app: tuple[LiveServer, Path], browser: Any, artifacts_dir: Path, request: pytest.FixtureRequest) -> Any:
    """``open_as(username, roles)`` → a logged-in page; pages are screenshotted when the test fails."""
    live, logs = app
    pages: list[tuple[str, Any]] = []

    def login(username: str, roles: list[str]) -> Any:
        live.call("tests.live_server:create_users", usernames=[username], roles=roles)
        context = browser.new_context(base_url=live.url, viewport={"width": 1200, "height": 900})
        context.set_default_timeout(30_000)
        page = log_in(context, username)
        pages.append((username, page))
        return page

    yield login
    report = getattr(request.node, "report_call", None)
    for username, page in pages:
        if report is not None and report.failed:
            page.screenshot(path=str(artifacts_dir / f"{request.node.name}-{username}-failed.png"), full_page=True)
            print((logs / "worker.log").read_text(errors="replace")[-3000:], live.log_tail())
        page.context.close()


def _csv(path: Path, n: int, prefix: str) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text"])
        writer.writerows([f"{prefix} text number {i}"] for i in range(n))
    return path


def _upload(page: Any, project: int, path: Path, *, keep_duplicates: bool = False) -> str:
    page.goto(f"/p/{project}/import/")
    page.set_input_files("input[name=file]", str(path))
    if keep_duplicates:
        page.get_by_label("Keep rows whose text is already in the project").check()
    page.get_by_role("button", name="Upload and import").click()
    page.locator("#import-job .status-done, #import-job .status-failed").wait_for(timeout=60_000)
    return str(page.locator("#import-job").inner_text())


def new_project(*, name: str, test_set_size: int = 500) -> int:
    """Runs in the live server's database: a project with the defaults a new one gets."""
    from annotate.services.projects import LabelInput, project_create

    return project_create(
        name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")], test_set_size=test_set_size
    ).pk


def round_trained(*, project: int) -> None:
    from annotate.models import Round

    Round.objects.create(project_id=project, number=1, status=Round.Status.DONE)


def project_counts(*, project: int) -> dict[str, int]:
    from annotate.models import Item, Project

    return {
        "projects": Project.objects.filter(pk=project).count(),
        "items": Item.objects.filter(project_id=project).count(),
        "test": Item.objects.filter(project_id=project, is_test=True).count(),
    }


def test_problem_1_small_upload_test_set_capped_redrawn_archive_and_delete(
    app: tuple[LiveServer, Path], open_as: Any, tmp_path: Path, artifacts_dir: Path
) -> None:
    live, _ = app
    project = live.call("tests.e2e.test_first_day:new_project", name="First day small")
    ml = open_as("fd-ml", ["ml"])

    # The warning comes before anything is drawn: the import page says the cap and what it means.
    ml.goto(f"/p/{project}/import/")
    warning = ml.locator("#test-set-state").inner_text()
    assert "No test set yet" in warning and "never more than 30 %" in warning
    assert "Uploads under 1667 rows get fewer test items" in warning
    ml.screenshot(path=str(artifacts_dir / "firstday-import-warning.png"), full_page=True)

    # 300 rows with the default size 500: 90 go to the test set, 210 stay to label (not "0 texts").
    status = _upload(ml, project, _csv(tmp_path / "small.csv", 300, "small"))
    assert "300 items imported" in status, status
    assert live.call("tests.e2e.test_first_day:project_counts", project=project)["test"] == 90
    ml.goto("/")
    assert "210 texts" in ml.locator(f"#project-{project}").inner_text()

    # A new size redraws it (no round has trained), and the setup page says what it is now.
    ml.goto(f"/p/{project}/setup/")
    assert "90 items drawn (500 asked, capped at 30 % of the 300 texts)" in ml.locator("#test-set-state").inner_text()
    ml.fill("input[name=test_set_size]", "40")
    ml.get_by_role("button", name="Save setup").click()
    ml.get_by_text("The test set was redrawn: 40 items (was 90).").wait_for()
    assert live.call("tests.e2e.test_first_day:project_counts", project=project)["test"] == 40

    # Once a round has trained, the size is frozen: a clear error, and nothing changes.
    live.call("tests.e2e.test_first_day:round_trained", project=project)
    ml.fill("input[name=test_set_size]", "60")
    ml.get_by_role("button", name="Save setup").click()
    ml.locator("#form-errors", has_text="the test set is fixed once round 1 has trained").wait_for()
    assert live.call("tests.e2e.test_first_day:project_counts", project=project)["test"] == 40

    # Annotators and leads cannot archive or delete.
    lead = open_as("fd-lead", ["lead", "annotator"])
    assert lead.goto(f"/p/{project}/delete/").status == 403

    # Archive: off the home list, listed under Archived for ML staff; then back.
    ml.goto(f"/p/{project}/setup/")
    ml.get_by_role("button", name="Archive project").click()
    ml.get_by_text("archived: it is listed under Archived").wait_for()
    assert ml.locator(f"#project-{project}").count() == 0
    ml.locator("#archived-projects summary").click()
    ml.locator("#archived-projects").get_by_role("link", name="First day small").click()
    ml.get_by_role("button", name="Bring back to the home page").click()
    ml.goto("/")
    assert ml.locator(f"#project-{project}").count() == 1

    # Delete: a wrong name is refused and deletes nothing; the exact name deletes it all.
    ml.goto(f"/p/{project}/setup/")
    ml.get_by_role("link", name="Delete project…").click()
    assert "300 texts" in ml.locator("#delete-warning").inner_text()
    ml.fill("input[name=confirm_name]", "First day")
    ml.get_by_role("button", name="Delete this project").click()
    ml.get_by_text("type the project's name exactly").wait_for()
    assert live.call("tests.e2e.test_first_day:project_counts", project=project) == {
        "projects": 1,
        "items": 300,
        "test": 40,
    }
    ml.fill("input[name=confirm_name]", "First day small")
    ml.get_by_role("button", name="Delete this project").click()
    ml.get_by_text("Project “First day small” deleted.").wait_for()
    assert live.call("tests.e2e.test_first_day:project_counts", project=project) == {
        "projects": 0,
        "items": 0,
        "test": 0,
    }


def evaluated_on_one_test_item(*, name: str) -> dict[str, int]:
    """A project whose round 1 is done and was evaluated on 1 labelled test item of 40 (no gold)."""
    from annotate.models import Item, Round

    project = new_project(name=name, test_set_size=40)
    Item.objects.bulk_create(
        Item(project_id=project, external_id=f"t{i}", text=f"test text {i}", text_hash=f"t{i}", is_test=i < 40)
        for i in range(200)
    )
    first = Item.objects.filter(project_id=project, is_test=True).order_by("id").first()
    assert first is not None
    Item.objects.filter(pk=first.pk).update(final_label=first.project.labels.first())
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>'
    metrics = {"accuracy": 0.0, "macro_f1": 0.0, "labels": 20, "test_n": 1, "curve_svg": svg}
    Round.objects.create(project_id=project, number=1, status=Round.Status.DONE, metrics=metrics)
    return {"project": project}


def test_problem_2_accuracy_withheld_below_the_minimum_and_annotators_sent_to_the_test_queue(
    app: tuple[LiveServer, Path], open_as: Any, artifacts_dir: Path
) -> None:
    live, _ = app
    project = live.call("tests.e2e.test_first_day:evaluated_on_one_test_item", name="First day curve")["project"]
    ml = open_as("fd-ml2", ["ml"])
    ml.goto(f"/p/{project}/ml/")
    withheld = ml.locator("#curve-withheld").inner_text()
    assert "measured on 1 labelled test item" in withheld and "29 more are missing" in withheld, withheld
    assert ml.locator("#learning-curve img").count() == 0
    assert "0.0 %" not in ml.locator("main").inner_text()
    assert "withheld: 1 labelled test item, 29 missing" in ml.locator("main").inner_text()
    assert "29 more labelled test items are needed" in ml.locator("#test-set-missing").inner_text()
    ml.screenshot(path=str(artifacts_dir / "firstday-curve-withheld.png"), full_page=True)

    annotator = open_as("fd-ann2", ["annotator"])
    annotator.goto(f"/p/{project}/annotate/")
    pointer = annotator.locator("#test-queue-pointer")
    assert "29 more test items need labels" in pointer.inner_text()
    annotator.screenshot(path=str(artifacts_dir / "firstday-test-queue-pointer.png"), full_page=True)
    pointer.get_by_role("link", name="Label the Test set queue").click()
    annotator.wait_for_url(f"**/p/{project}/annotate/test/")
    assert annotator.locator("#annotate-panel").get_attribute("data-item")  # a test item to label


def user_state(*, username: str) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return {}
    return {"active": user.is_active, "roles": sorted(g.name for g in user.groups.all()), "users": user.pk}


def _log_in_form(page: Any, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_problem_3_first_account_on_an_empty_install_password_change_and_deactivation(
    browser: Any, artifacts_dir: Path
) -> None:
    with LiveServer(kind="runserver", purpose="firstrun") as live:
        context = browser.new_context(base_url=live.url, viewport={"width": 1200, "height": 900})
        context.set_default_timeout(30_000)
        page = context.new_page()
        try:
            # An empty install: the first visit lands on the first-account page, not a login with no account.
            page.goto("/")
            page.wait_for_url("**/accounts/first-user/")
            page.screenshot(path=str(artifacts_dir / "firstday-first-user.png"), full_page=True)
            page.fill("input[name=username]", "founder")
            page.fill("input[name=password1]", "short")
            page.fill("input[name=password2]", "short")
            page.get_by_role("button", name="Create the first account").click()
            page.locator(".errorlist").first.wait_for()  # a weak password: a clear error, nothing created
            assert live.call("tests.e2e.test_first_day:user_state", username="founder") == {}
            page.fill("input[name=password1]", "founder-secret-42")
            page.fill("input[name=password2]", "founder-secret-42")
            page.get_by_role("button", name="Create the first account").click()
            page.get_by_text("you are ML staff").wait_for()
            assert page.get_by_role("link", name="Create a project").count() == 1
            assert live.call("tests.e2e.test_first_day:user_state", username="founder")["roles"] == ["ml"]
            # Gone once a user exists, for everyone.
            assert page.goto("/accounts/first-user/").status == 404
            anonymous = browser.new_context(base_url=live.url).new_page()
            assert anonymous.goto("/accounts/first-user/").status == 404
            anonymous.goto("/")
            assert "/accounts/login/" in anonymous.url
            anonymous.context.close()

            # The team: a lead and an annotator, added on the Team page.
            page.goto("/team/")
            team_add(page, [("lea", "lead"), ("ann", "annotator"), ("ml2", "ml")])

            # Every user changes their own password (here the annotator), then logs in with the new one.
            other = browser.new_context(base_url=live.url).new_page()
            _log_in_form(other, "ann", "pw-ann-secret")
            other.get_by_role("button", name="ann").click()  # the account menu, under the user's name
            other.get_by_role("link", name="Password").click()
            other.fill("input[name=old_password]", "pw-ann-secret")
            other.fill("input[name=new_password1]", "ann-new-password-7")
            other.fill("input[name=new_password2]", "ann-new-password-7")
            other.get_by_role("button", name="Change password").click()
            other.get_by_text("Password changed").first.wait_for()
            other.get_by_role("button", name="ann").click()
            other.get_by_role("button", name="Log out").click()
            _log_in_form(other, "ann", "pw-ann-secret")
            other.get_by_text("Wrong username or password.").wait_for()
            _log_in_form(other, "ann", "ann-new-password-7")
            other.wait_for_url(lambda url: "/accounts/login/" not in url)

            # A lead deactivates the annotator (whose open session ends) but not ML staff.
            lead = browser.new_context(base_url=live.url).new_page()
            _log_in_form(lead, "lea", "pw-lea-secret")
            lead.wait_for_url(lambda url: "/accounts/login/" not in url)
            lead.goto("/team/")
            lead.locator("#user-ml2").get_by_role("button", name="Deactivate").click()
            lead.get_by_text("ml2 is ml; only ML staff change that account").wait_for()
            assert live.call("tests.e2e.test_first_day:user_state", username="ml2")["active"] is True
            lead.locator("#user-ann").get_by_role("button", name="Deactivate").click()
            lead.get_by_text("ann deactivated").wait_for()
            assert lead.locator("#user-ann").get_by_role("button", name="Reactivate").count() == 1
            other.goto("/")
            assert "/accounts/login/" in other.url  # the deactivated user's session is over
            _log_in_form(other, "ann", "ann-new-password-7")
            other.get_by_text("Wrong username or password.").wait_for()
            lead.screenshot(path=str(artifacts_dir / "firstday-team-deactivated.png"), full_page=True)
            # ML staff deactivate and reactivate anyone but themselves.
            page.goto("/team/")
            assert page.locator("#user-founder").get_by_role("button", name="Deactivate").count() == 0
            page.locator("#user-ann").get_by_role("button", name="Reactivate").click()
            page.get_by_text("ann reactivated").wait_for()
            other.context.clear_cookies()
            _log_in_form(other, "ann", "ann-new-password-7")
            other.wait_for_url(lambda url: "/accounts/login/" not in url)
        except BaseException:
            page.screenshot(path=str(artifacts_dir / "firstday-problem3-failed.png"), full_page=True)
            print(live.log_tail())
            raise
        finally:
            context.close()


def test_problem_9_reupload_skips_texts_already_in_the_project_unless_kept(
    app: tuple[LiveServer, Path], open_as: Any, tmp_path: Path, artifacts_dir: Path
) -> None:
    live, _ = app
    project = live.call("tests.e2e.test_first_day:new_project", name="First day dupes", test_set_size=10)
    ml = open_as("fd-ml9", ["ml"])
    first = _upload(ml, project, _csv(tmp_path / "texts.csv", 100, "dupe"))
    assert "100 items imported" in first and "skipped" not in first, first

    # The same 100 texts again (some with other spacing) and 20 new ones: only the new ones come in.
    again = tmp_path / "again.csv"
    with again.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text"])
        writer.writerows([f"  dupe text  number {i}\n" if i % 2 else f"dupe text number {i}"] for i in range(100))
        writer.writerows([f"fresh text number {i}"] for i in range(20))
    status = _upload(ml, project, again)
    assert re.search(r"\b20 items imported", status), status
    assert "100 rows skipped" in ml.locator("#rows-skipped").inner_text()
    ml.screenshot(path=str(artifacts_dir / "firstday-import-skipped.png"), full_page=True)
    assert live.call("tests.e2e.test_first_day:project_counts", project=project)["items"] == 120
    ml.goto(f"/p/{project}/import/")
    assert "100" in ml.locator("tbody tr").first.locator("td[data-label=Skipped]").inner_text()

    # Kept on request: the repeats come in and are reported as repeats.
    status = _upload(ml, project, _csv(tmp_path / "keep.csv", 5, "dupe"), keep_duplicates=True)
    assert re.search(r"\b5 items imported", status) and "5 rows repeat an earlier text" in status, status
    assert live.call("tests.e2e.test_first_day:project_counts", project=project)["items"] == 125


TRICKY_TEXTS = ["-2+3 is one", "=SUM(A1) looks like a formula", "@home tonight", "plain words"]


def labelled_with_tricky_texts(*, name: str) -> dict[str, Any]:
    """Four labelled pool items whose texts a spreadsheet would run, and one labelled test item."""
    from annotate.models import Item
    from tests.live_server import seed_labeling_project

    seeded = seed_labeling_project(name=name, n_items=4, n_test=1)
    label = next(iter(seeded["labels"].values()))
    for item_id, text in zip(seeded["items"], TRICKY_TEXTS, strict=True):
        Item.objects.filter(pk=item_id).update(text=text, final_label_id=label)
    Item.objects.filter(pk__in=seeded["test_items"]).update(text="a test text", final_label_id=label)
    return seeded


def _download(page: Any, fmt_label: str, tmp_path: Path) -> Path:
    page.select_option("#export-form select[name=fmt]", label=fmt_label)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download").click()
    target = tmp_path / download.value.suggested_filename
    download.value.save_as(target)
    return target


def _read_csv(path: Path) -> dict[str, list[str]]:
    """Columns of a CSV as a script reads them (csv module, like pandas.read_csv: no cell altered)."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {name: [row[name] for row in rows] for name in rows[0]}


def test_problem_13_export_spreadsheet_safe_or_exact_csv_jsonl_parquet_without_test_rows(
    app: tuple[LiveServer, Path], open_as: Any, tmp_path: Path, artifacts_dir: Path
) -> None:
    import pyarrow.parquet as pq

    live, _ = app
    project = live.call("tests.e2e.test_first_day:labelled_with_tricky_texts", name="First day export")["project"]
    lead = open_as("fd-lead13", ["lead"])
    lead.goto(f"/p/{project}/export/")
    assert not lead.get_by_label("Include the test set (split = test)").is_checked()
    lead.screenshot(path=str(artifacts_dir / "firstday-export.png"), full_page=True)

    safe = _read_csv(_download(lead, "CSV for spreadsheets", tmp_path))
    assert sorted(safe["text"]) == sorted("'" + t if t[0] in "-=@" else t for t in TRICKY_TEXTS)
    exact_name = "CSV, exact texts (pandas, scripts)"
    exact = _read_csv(_download(lead, exact_name, tmp_path))
    assert sorted(exact["text"]) == sorted(TRICKY_TEXTS) and set(exact["split"]) == {"train"}
    lines = _download(lead, "JSON Lines (exact)", tmp_path).read_text(encoding="utf-8")
    assert sorted(json.loads(line)["text"] for line in lines.splitlines()) == sorted(TRICKY_TEXTS)
    table = pq.read_table(_download(lead, "Parquet (typed columns, exact)", tmp_path)).to_pylist()
    assert sorted(row["text"] for row in table) == sorted(TRICKY_TEXTS)

    lead.get_by_label("Include the test set (split = test)").check()
    with_test = _read_csv(_download(lead, exact_name, tmp_path))
    assert sorted(with_test["split"]) == ["test", "train", "train", "train", "train"]
