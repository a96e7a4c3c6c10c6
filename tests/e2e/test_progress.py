"""Issue 32, problem 10 in headless Chromium: the annotate page's batch bar, the lead page and the ML
page read one count of the batch (annotate.selectors.progress.batch_status) and agree, from the first
item of round 1 to the first item of round 2. The live server runs the real settings: team counts
are cached for seconds and recounted in the background, as in production."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e

PANEL = "#annotate-panel"


def round_one_not_open_yet(*, name: str) -> dict[str, Any]:
    """Six batch items (the first needs two annotators), round 1 still selecting its batch."""
    from annotate.models import Round
    from tests.live_server import seed_labeling_project

    seeded = seed_labeling_project(name=name, n_items=6, n_overlap=1)
    Round.objects.filter(project_id=seeded["project"]).update(status=Round.Status.SELECTING)
    return seeded


def open_round(*, project: int, number: int) -> None:
    from annotate.models import Round

    Round.objects.filter(project_id=project, number=number).update(status=Round.Status.LABELING)


def round_two_labels(*, project: int) -> None:
    """Round 1 finished (a lead decided its disagreement, it trained); round 2 labels four new items."""
    from annotate.models import BatchItem, Item, Round

    Round.objects.filter(project_id=project, number=1).update(status=Round.Status.DONE)
    second = Round.objects.create(project_id=project, number=2, status=Round.Status.LABELING)
    items = Item.objects.bulk_create(
        Item(project_id=project, external_id=f"r2-{i}", text=f"Round two text {i}.", text_hash=f"r2-{project}-{i}")
        for i in range(4)
    )
    BatchItem.objects.bulk_create(
        BatchItem(round=second, item=it, source="random", rank=r) for r, it in enumerate(items)
    )


def batch_count(page: Any) -> str:
    """The annotate page's batch bar (its first bar, on main as here)."""
    return str(page.locator(f"{PANEL} .progress-grid > div").first.inner_text())


def label_until_empty(page: Any, key: str) -> None:
    while page.locator(PANEL).get_attribute("data-item"):
        before = page.locator(PANEL).get_attribute("data-item")
        page.keyboard.press(key)
        page.wait_for_function("old => document.querySelector('#annotate-panel').dataset.item !== old", arg=before)


def test_problem_10_progress_counts_agree_across_pages_and_rounds(
    live_app: LiveServer, user_page: Any, artifacts_dir: Path
) -> None:
    seeded = live_app.call("tests.e2e.test_progress:round_one_not_open_yet", name="e2e-progress")
    project = seeded["project"]
    alice = user_page("prog-alice")
    alice.goto(f"/p/{project}/annotate/")  # no batch open: the team counts are cached now
    assert "0 / 6 items" not in batch_count(alice)  # the batch is not open yet

    live_app.call("tests.e2e.test_progress:open_round", project=project, number=1)
    alice.goto(f"/p/{project}/annotate/")  # round 1's first item, seconds after the last count
    assert alice.locator(PANEL).get_attribute("data-item")
    assert "0 / 6 items" in batch_count(alice) and "Round 1 batch" in batch_count(alice), batch_count(alice)
    label_until_empty(alice, "1")

    bob = user_page("prog-bob")
    bob.goto(f"/p/{project}/annotate/")
    label_until_empty(bob, "2")  # the two-annotator item: a disagreement
    counts, reason = batch_count(bob), bob.locator("#empty-reason").inner_text()
    bob.screenshot(path=str(artifacts_dir / "progress-batch-waits-for-lead.png"), full_page=True)
    assert "5 / 6 items" in counts and "1 waits for a lead" in counts, counts
    assert "5 of 6 batch items are done" in reason and "1 waits for a lead" in reason, reason

    lead = user_page("prog-lead", roles=["lead"])
    lead.goto(f"/p/{project}/lead/")
    assert "5 / 6" in lead.locator("#lead-batch").inner_text()
    ml = user_page("prog-ml", roles=["ml"])
    ml.goto(f"/p/{project}/ml/")
    assert "Batch 5 / 6 items done" in ml.locator("body").inner_text()

    alice.goto(f"/p/{project}/annotate/")  # round 1's counts are cached again, seconds old
    live_app.call("tests.e2e.test_progress:round_two_labels", project=project)
    alice.goto(f"/p/{project}/annotate/")  # round 2's first item
    assert alice.locator(PANEL).get_attribute("data-item")
    assert "0 / 4 items" in batch_count(alice) and "Round 2 batch" in batch_count(alice), batch_count(alice)
