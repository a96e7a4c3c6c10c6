"""Issue 32, problems 11 and 12, in headless Chromium against a live server:

11. the ML page agrees with the Agreement page (one κ), lists every evaluated round, draws the curve
    with whole-number label ticks and a % axis, names its lines and the predictor in words, and its
    cold-start help says what the code does;
12. setup errors are summarised at the top of the form, each linked to its field, focus moves to
    the summary on a failed submit (htmx and a plain post), and any batch size below 1 gets one
    message."""

from __future__ import annotations

import base64
from typing import Any
from xml.etree import ElementTree

import pytest

from tests.live_server import LiveServer

pytestmark = pytest.mark.e2e


def new_project(*, name: str) -> int:
    """Runs in the live server's database: a project with the defaults a new one gets."""
    from annotate.services.projects import LabelInput, project_create

    return project_create(name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")]).pk


def _submit_batch_size(page: Any, value: str) -> Any:
    page.fill("input[name=batch_size]", value)
    page.get_by_role("button", name="Save setup").click()
    summary = page.locator("#error-summary", has_text=f"got {value}")  # this answer's, not the one before
    summary.wait_for()
    return summary


def test_problem_12_setup_errors_summarised_at_the_top_linked_and_focused(live_app: LiveServer, user_page: Any) -> None:
    project = live_app.call("tests.e2e.test_setup_and_ml_pages:new_project", name="Setup errors")
    ml = user_page("setup-err-ml", roles=["ml"])
    ml.goto(f"/p/{project}/setup/")

    # −5 (htmx submit): a summary in the first screen, focused, linking to the field.
    summary = _submit_batch_size(ml, "-5")
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'error-summary'")
    box = summary.bounding_box()
    assert box is not None and box["y"] + box["height"] < 900, box  # within the first screen, not 1,600 px down
    link = summary.get_by_role("link", name="Batch size")
    assert link.get_attribute("href") == "#id_batch_size"
    minus_five = link.inner_text()
    assert "batch size B must be at least 1" in minus_five, minus_five
    link.click()
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'id_batch_size'")

    # 0: the same reason as −5 (it used to be Django's "greater than or equal to 0" for −5).
    zero = _submit_batch_size(ml, "0").get_by_role("link", name="Batch size").inner_text()
    assert zero.replace("got 0", "got -5") == minus_five, (zero, minus_five)

    # A plain post (a reload of the page with the errors): focus still lands on the summary.
    ml.evaluate("document.querySelector('#setup-card form').removeAttribute('hx-post')")
    ml.fill("input[name=batch_size]", "-1")
    with ml.expect_navigation():
        ml.evaluate("document.querySelector('#setup-card form').submit()")
    ml.wait_for_function("document.activeElement && document.activeElement.id === 'error-summary'")
    assert "batch size B must be at least 1; got -1" in ml.locator("#error-summary").inner_text()

    # A valid value saves (htmx: a whole-page redirect with the message).
    ml.fill("input[name=batch_size]", "30")
    ml.get_by_role("button", name="Save setup").click()
    ml.get_by_text("Setup saved.").wait_for()
    assert ml.locator("#error-summary").count() == 0


SVG = "{http://www.w3.org/2000/svg}"


def _svg_of(src: str | None) -> Any:
    assert src and src.startswith("data:image/svg+xml;base64,"), (src or "")[:60]
    return ElementTree.fromstring(base64.b64decode(src.split(",", 1)[1]))


BLEND_REASON = "w = 1.0 on the adapters predicted 40 held-out labels best (70.0 % vs adapters 70.0 %, proxy 5.0 %)"


def evaluated_with_overlap(*, name: str) -> int:
    """Two evaluated rounds, and two annotators who labelled the same four pool items (3 of 4 alike)."""
    from django.contrib.auth import get_user_model

    from annotate.models import Annotation, Item, Label, Round
    from devtools.live_server import create_users

    project = new_project(name=name)
    create_users(usernames=["kappa-a", "kappa-b"], roles=["annotator"])
    a, b = (get_user_model().objects.get(username=u) for u in ("kappa-a", "kappa-b"))
    labels = {lab.name: lab for lab in Label.objects.filter(project_id=project)}
    for i, (va, vb) in enumerate([("pos", "pos"), ("neg", "neg"), ("pos", "pos"), ("pos", "neg")]):
        it = Item.objects.create(project_id=project, external_id=f"k{i}", text=f"text {i}", text_hash=f"k{i}")
        Annotation.objects.create(item=it, annotator=a, label=labels[va])
        Annotation.objects.create(item=it, annotator=b, label=labels[vb])
    blend = {
        "weight": 1.0,
        "heldout_n": 40,
        "heldout_accuracy": {"llm": 0.7, "proxy": 0.05, "blend": 0.7},
        "reason": BLEND_REASON,
    }
    points: list[dict[str, Any]] = [
        {"round": 1, "arm": "prod", "labels": 20, "accuracy": 0.55},
        {"round": 2, "arm": "prod", "labels": 45, "accuracy": 0.7},
        {"round": 2, "arm": "active", "labels": 25, "accuracy": 0.62},
        {"round": 2, "arm": "random", "labels": 25, "accuracy": 0.58},
    ]
    for number, accuracy, used in ((1, 0.55, 20), (2, 0.7, 45)):
        metrics: dict[str, Any] = {
            "accuracy": accuracy,
            "macro_f1": 0.5,
            "ece": 0.1,
            "labels": used,
            "test_n": 40,
            "blend": blend,
        }
        metrics["points"] = [p for p in points if p["round"] <= number]
        Round.objects.create(project_id=project, number=number, status=Round.Status.DONE, metrics=metrics)
    return project


def test_problem_11_ml_page_agrees_with_the_agreement_page_and_shows_every_round(
    live_app: LiveServer, user_page: Any
) -> None:
    project = live_app.call("tests.e2e.test_setup_and_ml_pages:evaluated_with_overlap", name="ML page")
    ml = user_page("ml-page-ml", roles=["ml", "lead"])

    ml.goto(f"/p/{project}/lead/agreement/")
    kappa = ml.locator("#fleiss strong").inner_text()

    ml.goto(f"/p/{project}/ml/")
    # One κ for the same items: the ML page's is the Agreement page's, not "—".
    human = ml.locator("#human-agreement").inner_text()
    assert f"κ = {kappa}" in human, (kappa, human)
    # The learning-curve table has a row per evaluated round, not only the latest.
    assert ml.locator("#curve-rounds tbody tr").count() == 2
    assert "70.0 %" in ml.locator("#curve-round-2").inner_text()
    assert "55.0 %" in ml.locator("#curve-round-1").inner_text()
    # The predictor is said in words, not "w = 1.0 … proxy 5.0 %".
    text = ml.locator("main").inner_text()
    assert "w = 1.0" not in text
    assert "the adapters alone, because that mix got the most of 40 held-out labels right" in text
    # The chart: whole-number label ticks, a % axis as in the tables, lines named in words (no "prod"),
    # everything inside the picture (no clipped subtitle).
    svg = _svg_of(ml.locator("#learning-curve img").get_attribute("src"))
    x_ticks = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "x-tick"]
    y_ticks = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "y-tick"]
    legend = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert x_ticks and all(str(t).isdigit() for t in x_ticks), x_ticks
    assert y_ticks and all(str(t).endswith(" %") for t in y_ticks), y_ticks
    assert legend and not any(str(name).strip() == "prod" for name in legend), legend
    assert "model in use (every label so far)" in legend and "random selection" in legend, legend
    width = float(svg.get("viewBox", "0 0 0 0").split()[2])
    assert all(0 <= float(t.get("x", 0)) <= width for t in svg.iter(f"{SVG}text")), "text outside the picture"
    # The cold-start help agrees with the code's default (typical items), not "a random batch".
    assert "is a random batch" not in text
    assert "by default the most typical text of each group of similar texts" in text
