"""The whole team in the browser, from an empty install to a trained model, with a real Celery worker
(on a Redis database this test owns) and headless Chromium:

ML staff add the team (Team page) → create a project and upload its texts → start round 1 → two
annotators label the test set and the batch (one of them on a 390 px phone screen, never scrolling
sideways) with overlap items served to both → a disagreement → the lead decides it → the round
finishes by itself (nobody presses "Retrain now") → the ML page, open all along, shows the learning
curve without a reload → the export has the texts and round 1's snapshot → the People table shows
who the lead overruled → the item browser, sorted by disagreement, relabels wrong labels in bulk → the
disputed item's history. Screenshots of every step go to test-artifacts/ (scripts/tour_images.py
makes the README tour from them)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import redis_owner
from tests.e2e.login import log_in, team_add
from tests.e2e.phone import PHONE, no_sideways_scroll
from tests.integration.round_helpers import TEST_OPTIONS, Workers
from tests.live_server import PASSWORD, LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.celery, pytest.mark.slow]

# text → its topic: what the lead decides; ann1 says sports to everything (the People table shows it)
TOPICS = {
    "The striker scored twice in the derby": "sports",
    "Parliament votes on the new budget today": "politics",
    "A new telescope finds water on a distant planet": "science",
    "The coach was sacked after five defeats": "sports",
    "The senate blocked the minister's reform": "politics",
    "Researchers sequence the genome of the axolotl": "science",
    "The final went to penalties after a goalless draw": "sports",
    "Elections are called for the spring": "politics",
    "A vaccine trial reports strong results": "science",
    "The marathon record fell in Berlin": "sports",
    "The president signs the climate treaty": "politics",
    "Physicists measure the neutron lifetime again": "science",
    "The tennis champion retires at 35": "sports",
    "Opposition leaders demand a recount": "politics",
    "A comet will be visible next week": "science",
    "The cyclist wins the mountain stage": "sports",
}
TEXTS = list(TOPICS)


@pytest.fixture
def team_app(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An empty install: a fresh database with one ML user, the web server and one real worker, on
    this run's own Redis database (tests/redis_owner.py: claimed empty, flushed only while ours)."""
    owned = redis_owner.current()
    owned.flush()
    monkeypatch.setenv("REDIS_URL", owned.url)
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")  # notifications
    monkeypatch.setenv("EMAIL_FILE_PATH", str(tmp_path / "emails"))
    with LiveServer(kind="runserver", purpose="teamflow", database_url="") as live:
        live.call("tests.live_server:create_users", usernames=["maya"], roles=["ml"])
        workers = Workers(live.tmp / "var", owned.url, tmp_path)
        workers.env.update(live.env, REDIS_URL=owned.url, DJANGO_SETTINGS_MODULE="config.settings")
        workers.start("w1")
        try:
            yield {"live": live, "workers": workers, "model_dir": str(tiny_llama_dir)}
        finally:
            workers.stop_all()
            owned.flush()


class Shots:
    def __init__(self, directory: Path) -> None:
        self.directory, self.n = directory, 0

    def __call__(self, page: Any, name: str, *, full_page: bool = True) -> None:
        page.screenshot(path=str(self._next(name)), full_page=full_page)

    def part(self, locator: Any, name: str) -> None:
        """Only one part of a page (a card far down a long page)."""
        locator.screenshot(path=str(self._next(name)))

    def span(self, page: Any, first: str, last: str, name: str) -> None:
        """The page's full width from the top of ``first`` to the bottom of ``last`` (CSS selectors)."""
        top, bottom = page.evaluate(
            "([a, b]) => [document.querySelector(a).getBoundingClientRect().top + scrollY,"
            " document.querySelector(b).getBoundingClientRect().bottom + scrollY]",
            [first, last],
        )
        clip = {"x": 0, "y": max(top - 16, 0), "width": page.viewport_size["width"], "height": bottom - top + 32}
        page.screenshot(path=str(self._next(name)), full_page=True, clip=clip)

    def _next(self, name: str) -> Path:
        self.n += 1
        return self.directory / f"flow-{self.n:02d}-{name}.png"


def _context(browser: Any, live: LiveServer, viewport: dict[str, int] | None = None) -> Any:
    context = browser.new_context(base_url=live.url, viewport=viewport or {"width": 1200, "height": 900})
    context.set_default_timeout(60_000)  # 2 shared cores: the first tokenizer load alone takes seconds
    return context


def _label_queue(page: Any, keys: str) -> int:
    """Press `keys` one per item while the panel shows an item; returns how many were labelled."""
    done = 0
    for key in keys:
        panel = page.locator("#annotate-panel")
        before = panel.get_attribute("data-item")
        if not before:
            break
        page.keyboard.press(key)
        page.wait_for_function(
            "old => { const p = document.querySelector('#annotate-panel'); return p && p.dataset.item !== old; }",
            arg=before,
        )
        done += 1
    return done


def test_empty_install_to_a_trained_model_in_the_browser(
    team_app: dict[str, Any], browser: Any, artifacts_dir: Path, tmp_path: Path
) -> None:
    live: LiveServer = team_app["live"]
    shot = Shots(artifacts_dir)

    # -- ML staff: the team, then the project with its upload -----------------------------------------
    ml_context = _context(browser, live)
    ml = log_in(ml_context, "maya", PASSWORD)
    shot(ml, "ml-home-empty")
    assert "Create a project" in ml.content()
    ml.get_by_role("link", name="Team").click()
    team_add(ml, [("ann1", "annotator"), ("ann2", "annotator"), ("lena", "lead")])
    assert "lena" in ml.locator("#users").inner_text()
    shot(ml, "team-admin")

    ml.get_by_role("link", name="alann").click()
    ml.get_by_role("link", name="Create a project").click()
    ml.fill("input[name=name]", "News topics")
    ml.fill("textarea[name=labels_text]", "sports | games and athletes\npolitics | government\nscience | research")
    ml.fill("input[name=model_dir]", team_app["model_dir"])
    ml.fill("input[name=batch_size]", "6")
    ml.fill("input[name=ensemble_k]", "1")
    ml.fill("input[name=overlap_share]", "0.34")
    ml.fill("input[name=test_set_size]", "3")
    ml.fill("input[name=cold_start_batches]", "1")
    assert ml.input_value("input[name=auto_retrain_share]") == "1.0"  # a new project's round finishes by itself
    shot(ml, "create-project")
    ml.get_by_role("button", name="Create project").click()
    ml.wait_for_url("**/import/")
    assert "Next: upload the texts to label" in ml.content()
    pool = tmp_path / "news.csv"
    with pool.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "section"])
        writer.writerows([f"n{i}", text, "front" if i % 2 else "back"] for i, text in enumerate(TEXTS))
    ml.set_input_files("input[name=file]", str(pool))
    ml.get_by_role("button", name="Upload and import").click()
    ml.get_by_text(f"{len(TEXTS)} items imported.").wait_for(timeout=60_000)
    shot(ml, "import-done")
    project_id = int(ml.url.split("/p/")[1].split("/")[0])
    ml.goto(f"/p/{project_id}/setup/")
    ml.fill("input[name=notify_emails]", "lena@example.org")  # told when a round finishes or reviews wait
    ml.get_by_role("button", name="Save setup").click()
    ml.get_by_text("Setup saved.").wait_for()

    ml.goto(f"/p/{project_id}/ml/")
    ml.evaluate("window.__no_reload = true")
    ml.get_by_role("button", name="Start next round").click()
    ml.get_by_text("Round 1 requested.").wait_for()
    ml.locator("#round-1 .status[data-status=labeling]").wait_for(timeout=120_000)  # the worker chose the batch
    shot(ml, "ml-round-1-labeling")

    # -- two annotators: the test set, then the batch (overlap items go to both) ----------------------
    ann1 = log_in(_context(browser, live), "ann1", "pw-ann1-secret")
    ann1.get_by_role("link", name="Annotate").first.click()
    assert "News topics" in ann1.locator(".topbar").inner_text()  # the project's name, for annotators too
    ann2 = log_in(_context(browser, live, PHONE), "ann2", "pw-ann2-secret")
    ann2.goto(f"/p/{project_id}/annotate/")
    for page in (ann1, ann2):
        page.goto(f"/p/{project_id}/annotate/test/")
        assert _label_queue(page, "111") == 3  # overlap on: each test item needs both annotators
    ann2.locator("#empty-reason").wait_for()
    assert "Every test-set item has its labels." in ann2.locator("#empty-reason").inner_text()

    ann1.goto(f"/p/{project_id}/annotate/")
    before = int(ann1.locator("#my-count").inner_text())
    assert _label_queue(ann1, "1") == 1
    assert int(ann1.locator("#my-count").inner_text()) == before + 1
    labels_given = ann1.locator(".progress-grid .count").nth(1).inner_text()
    assert labels_given.startswith("1 / "), labels_given  # the team bar shows my own label at once
    shot(ann1, "annotator-labelling")
    assert _label_queue(ann1, "11111") == 5
    assert "Nothing to label right now" in ann1.locator("#annotate-panel").inner_text()
    assert "second annotator" in ann1.locator("#empty-reason").inner_text()
    shot(ann1, "annotator-batch-done")

    ann2.goto(f"/p/{project_id}/annotate/")
    no_sideways_scroll(ann2)
    shot(ann2, "phone-annotate", full_page=False)
    assert _label_queue(ann2, "12") == 2  # ann1 said sports to both: one agreement, one disagreement
    no_sideways_scroll(ann2)
    assert "waits for a lead" in ann2.locator("#empty-reason").inner_text()
    shot(ann2, "phone-annotate-done")

    # The ML page (never reloaded) says what the round waits for.
    ml.locator("#round-1 .batch-left", has_text="disagreement").wait_for(timeout=30_000)
    ml.get_by_role("button", name="Start next round").click()
    ml.locator("#round-message .error", has_text="waits for a lead").wait_for()
    ml.wait_for_timeout(2_500)  # a live refresh later the refusal is still there
    assert "waits for a lead" in ml.locator("#round-message").inner_text()
    shot(ml, "ml-refusal-says-what-is-left")

    # -- the lead decides the disagreement; the round finishes by itself -----------------------------
    lead = log_in(_context(browser, live), "lena", "pw-lena-secret")
    lead.goto(f"/p/{project_id}/lead/disagreements/")
    row = lead.locator(".item-row").first
    assert "ann1: sports" in row.inner_text() and "ann2: politics" in row.inner_text()
    disputed = next(text for text in TEXTS if text in row.inner_text())
    shot(lead, "lead-disagreement")
    row.locator("select[name=decision]").select_option(label=TOPICS[disputed])
    row.get_by_role("button", name="Decide").click()
    lead.locator(".decided").wait_for()
    shot(lead, "lead-decided")

    ml.locator("#round-1 .status[data-status=done]").wait_for(timeout=240_000)
    ml.locator("#learning-curve img").wait_for()
    assert ml.evaluate("window.__no_reload === true")  # the curve came in by the live refresh
    assert "Test accuracy" in ml.locator("#round-1").inner_text()
    assert not ml.locator("#round-message").inner_text().strip()  # the refusal no longer holds: gone
    shot(ml, "ml-curve-updated")
    model_version = ml.locator("#round-1").inner_text().split("Model version:")[1].split()[0]
    retrain_pressed = live.call("tests.e2e.test_team_flow:round_state", project=project_id)
    assert retrain_pressed == {"status": "done", "retrain_requested": False}

    # -- the export has the texts, and round 1's snapshot (written as the round finished) ---------------
    _goto_when_shown(lead, f"/p/{project_id}/export/", "#snapshot-round-1")
    assert int(lead.locator("#snapshot-round-1 td.num").inner_text()) > 0
    assert lead.locator("#snapshot-round-1 code").first.inner_text().startswith(model_version)  # as the ML page
    shot(lead, "export-page")
    with lead.expect_download() as download:
        lead.get_by_role("button", name="Download").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
    assert len(rows) >= 6 and all(r["text"] in TEXTS and r["label"] for r in rows)
    assert {"id", "text", "label", "source", "annotators", "agreement", "meta.section"} <= set(rows[0])
    (decided,) = (r for r in rows if r["text"] == disputed)
    assert decided["annotators"] == "ann1;ann2" and decided["label"] == TOPICS[disputed]
    # agreement: the share of its annotators who gave the final label (ann1 sports, ann2 politics)
    assert float(decided["agreement"]) == {"sports": 0.5, "politics": 0.5}.get(TOPICS[disputed], 0.0)
    _after_round_one(lead, shot, project_id, decided=TOPICS[disputed])

    # -- the notifications the round sent (Setup → Recent notifications) ------------------------------
    _goto_when_shown(ml, f"/p/{project_id}/setup/", "#deliveries tr.delivery.sent")
    assert "email: lena@example.org" in ml.locator("#deliveries").inner_text()
    shot.span(ml, "#notifications", "#deliveries", "setup-notifications")
    for context in {p.context for p in (ml, ann1, ann2, lead)}:
        context.close()


def _goto_when_shown(page: Any, url: str, selector: str, *, tries: int = 30) -> None:
    """Open ``url`` and reload it (a second apart) until ``selector`` is on it: rows a worker writes."""
    for _ in range(tries):
        page.goto(url)
        if page.locator(selector).count():
            return
        page.wait_for_timeout(1_000)
    raise AssertionError(f"{selector} never appeared on {url}")


def _after_round_one(lead: Any, shot: Shots, project_id: int, *, decided: str) -> None:
    """The lead's pages after round 1: who labelled how well (People), the item browser, and the
    disputed item's history."""
    lead.goto(f"/p/{project_id}/lead/agreement/")
    for who, said in (("ann1", "sports"), ("ann2", "politics")):  # overruled on the disputed item or not
        assert f"({int(said != decided)} of " in lead.locator(f"#person-{who} td.overruled").inner_text()
    shot.part(lead.locator("section.card", has=lead.locator("#people")), "agreement-people")

    lead.goto(f"/p/{project_id}/items/")
    lead.select_option("#item-filters select[name=sort]", "disagreement")  # htmx: applies on change
    disputed = lead.locator("#item-results tbody tr:first-child", has_text="ann1: sports, ann2: politics")
    disputed.wait_for()
    item_url = disputed.locator("a").first.get_attribute("href")
    _relabel_wrong_labels_in_bulk(lead, shot)

    lead.goto(item_url)
    history = lead.locator("#history").inner_text()
    assert "ann1 labelled it sports" in history and f"lena decided {decided}" in history
    shot(lead, "item-history")


def _relabel_wrong_labels_in_bulk(lead: Any, shot: Shots) -> None:
    """On the open item browser: tick the rows whose final label is wrong (the largest group with one
    right topic), relabel them to it in one bulk action, confirm."""
    rows = lead.locator("#item-results tbody tr")
    wrong: dict[str, list[Any]] = {}  # true topic → rows whose final label is another
    for n in range(rows.count()):
        text, final = (rows.nth(n).locator("td").nth(i).inner_text() for i in (2, 3))
        if final not in ("—", TOPICS[text]):
            wrong.setdefault(TOPICS[text], []).append(rows.nth(n))
    topic, ticked = max(wrong.items(), key=lambda kv: len(kv[1]))
    for row in ticked:
        row.locator("input[name=items]").check()
    lead.select_option("#bulk-actions select[name=action]", "relabel")
    lead.select_option("#bulk-actions select[name=label]", label=topic)
    lead.fill("#bulk-actions input[name=note]", "ann1 said sports to everything")
    shot(lead, "items-sorted-bulk", full_page=False)
    lead.get_by_role("button", name="Continue…").click()
    n = len(ticked)
    assert f"relabel {n} item{'s' if n > 1 else ''} to {topic}" in lead.locator("#bulk-summary").inner_text()
    lead.get_by_role("button", name=f"Confirm: relabel {n} item").click()
    lead.get_by_text(f"Done: relabelled {n} item").wait_for()


def round_state(*, project: int) -> dict[str, Any]:
    from annotate.models import Round

    row = Round.objects.get(project_id=project, number=1)
    return {"status": row.status, "retrain_requested": row.retrain_requested}
