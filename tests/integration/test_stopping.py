"""The stopping evidence on the ML page: each round's evaluation predicts the fixed stop set (stored
per round), κ between consecutive rounds and the active-vs-random gain with its interval are shown
from what was stored, the recommendation says what is missing, and it never stops the loop. Also:
which selection strategy is in charge, read defensively from the round's selection record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse

from annotate.loopconfig import loop_config
from annotate.models import AdapterVersion, Item, Label, Project, Round, StopSetItem
from annotate.selectors import loop as loop_sel
from annotate.selectors.stopping import pair_kappa, points
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create, stop_set_draw
from annotate.services.rounds import round_request_start, round_run_sync
from scoring import pipeline
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options
from training import ensemble

pytestmark = pytest.mark.django_db
STOP_SET_SIZE = 12


def _ml_client() -> Client:
    from django.contrib.auth import get_user_model

    client = Client()
    user = get_user_model().objects.filter(username="mia").first()
    client.force_login(user or user_create(username="mia", password="pw-12345678", roles=["ml"]))
    return client


def _ml_page(project: Project) -> str:
    return _ml_client().get(reverse("ml_home", args=[project.pk])).content.decode()


def _row(page: str, number: int) -> str:
    start = page.index(f'id="stop-round-{number}"')
    return page[start : page.index("</tr>", start)]


@pytest.mark.slow
@pytest.mark.data
def test_each_round_predicts_the_same_stop_set_and_the_page_shows_kappa_and_gain(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    options = {**json.loads(TEST_OPTIONS), "stop_set_size": STOP_SET_SIZE}
    use_loop_options(monkeypatch, settings, json.dumps(options))
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    for _ in range(2):  # a cold-start round, then a scored one with the active and random arms
        row = round_request_start(project=project, user=None, run_here=True)
        round_run_sync(round_id=row.id)
        label_batch(project, annotator())
        row = round_run_sync(round_id=row.id)
        assert row.status == "done", row.failure_reason
    first, second = Round.objects.filter(project=project).order_by("number")

    stop_ids = sorted(StopSetItem.objects.filter(project=project).values_list("item_id", flat=True))
    assert len(stop_ids) == STOP_SET_SIZE and not Item.objects.filter(id__in=stop_ids, is_test=True).exists()
    label_ids = set(Label.objects.filter(project=project).values_list("id", flat=True))
    for row in (first, second):  # the same fixed set both rounds, although round 1's labels changed the pool
        assert row.metrics["stop_set"]["item_ids"] == stop_ids
        assert len(row.metrics["stop_set"]["labels"]) == STOP_SET_SIZE
        assert set(row.metrics["stop_set"]["labels"]) <= label_ids
    assert stop_set_draw(project=project, size=40) == stop_ids  # never redrawn, whatever the size says now
    StopSetItem.objects.filter(project=project).delete()
    assert stop_set_draw(project=project, size=STOP_SET_SIZE) == stop_ids  # seeded by the project

    # What round 2 stored is its prod ensemble's argmax on those items, in that order.
    config = loop_config(project)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    prod = list(AdapterVersion.objects.filter(round=second, arm="prod").order_by("k"))
    texts = loop_sel.stop_set_items(project=project)[1]
    p = ensemble.ensemble_mean(ensemble.make_engine(config), renderer, texts, loop_sel.adapter_refs(prod))
    index = loop_sel.label_index(project=project)
    stored = np.array([index[label] for label in second.metrics["stop_set"]["labels"]])
    assert np.allclose(p[np.arange(len(texts)), stored], p.max(axis=1), atol=1e-4)

    gain = second.metrics["gain"]
    assert gain["n"] == second.metrics["test_n"] > 0
    # The paired gain is the discordant items' balance: only they tell the two arms apart.
    assert gain["gain"] == pytest.approx((gain["active_only_correct"] - gain["random_only_correct"]) / gain["n"])

    page = _ml_page(project)
    pair = pair_kappa(
        2,
        1,
        dict(zip(stop_ids, second.metrics["stop_set"]["labels"], strict=True)),
        dict(zip(stop_ids, first.metrics["stop_set"]["labels"], strict=True)),
    )
    assert f"{pair.kappa:.3f}" in _row(page, 2) and pair.agreement_text in _row(page, 2)
    assert points(gain["gain"]) in _row(page, 2)
    assert f"{points(gain['ci_low'])}\u2026{points(gain['ci_high'])}" in _row(page, 2)
    assert "—" in _row(page, 1)  # round 1 has nothing to compare with and no arms
    assert 'data-can-stop="false"' in page  # one round pair can never satisfy a window of three
    assert "Not yet:" in page and "not yet stable" in page
    assert f'data-stop-set-size="{STOP_SET_SIZE}"' in page


# -- the panel's states, from stored round metrics (no model needed) -----------------------------------


def _project() -> Project:
    return project_create(name="stop", labels=[LabelInput("a", "A"), LabelInput("b", "B"), LabelInput("c", "C")])


def _done(project: Project, number: int, *, strategy: str = "active", **metrics: Any) -> Round:
    return Round.objects.create(
        project=project,
        number=number,
        status="done",
        strategy=strategy,
        metrics={"accuracy": 0.8, "labels": 10 * number, "test_n": 200, **metrics},
    )


def _stop(project: Project, flips: int, seed: int) -> dict[str, Any]:
    """Predictions on 100 stop items: a fixed base with ``flips`` items changed."""
    ids = [label.id for label in Label.objects.filter(project=project)]
    base = np.random.default_rng(0).choice(ids, size=100)
    changed = base.copy()
    changed[np.random.default_rng(seed).choice(100, size=flips, replace=False)] = ids[0]
    return {"item_ids": list(range(1, 101)), "labels": [int(x) for x in changed]}


def _gain(gain: float, low: float, high: float) -> dict[str, Any]:
    return {
        "arms": {"active": {"accuracy": 0.8, "labels": 40}, "random": {"accuracy": 0.8 - gain, "labels": 40}},
        "gain": {"gain": gain, "ci_low": low, "ci_high": high, "n": 200, "active_only_correct": 9},
    }


def test_the_page_recommends_stopping_only_with_both_criteria_and_the_loop_goes_on() -> None:
    project = _project()
    _done(project, 1, stop_set=_stop(project, 40, 1))
    for number in (2, 3, 4):
        _done(project, number, stop_set=_stop(project, 0, 0), **_gain(0.02, -0.01, 0.05))
    last = _done(project, 5, stop_set=_stop(project, 0, 0), **_gain(0.034, 0.012, 0.056))

    page = _ml_page(project)
    assert (
        "You can stop here: predictions have been stable (κ ≥ 0.99) for 3 rounds, and active is +3.4 points "
        "(95 % CI +1.2…+5.6) over random." in page
    )
    assert 'data-can-stop="true"' in page and "1.000" in _row(page, 5) and "+1.2…+5.6" in _row(page, 5)
    assert "1.000" not in _row(page, 2)  # round 2 against round 1's changed predictions

    _ml_client().post(reverse("ml_round_start", args=[project.pk]), {"strategy": "active"})
    assert Round.objects.filter(project=project, number=6).exists()  # a recommendation, never a stop

    Round.objects.filter(pk=last.pk).update(metrics={**last.metrics, **_gain(0.01, -0.02, 0.04)})
    page = _ml_page(project)
    assert 'data-can-stop="false"' in page and "gain CI includes 0 (active +1.0 points" in page


def test_the_page_says_what_is_missing() -> None:
    project = _project()
    _done(project, 1, stop_set=_stop(project, 0, 0))
    _done(project, 2, stop_set=_stop(project, 10, 2))
    page = _ml_page(project)
    kappa = float(_row(page, 2).split('class="kappa">')[1].split("<")[0])
    assert kappa < 0.99
    assert f"κ {kappa:.3f} last round: not yet stable" in page
    assert "no random arm yet" in page


def test_without_a_stop_set_the_page_says_it_is_off(settings: Any) -> None:
    settings.LOOP_OPTIONS = {"stop_set_size": 0}
    project = _project()
    _done(project, 1)
    page = _ml_page(project)
    assert "the stop set is off (loop option stop_set_size = 0)" in page and "no random arm yet" in page


def test_the_strategy_in_charge_and_why() -> None:
    project = _project()
    page = _ml_page(project)
    assert 'id="selection-in-charge"' in page and "No round yet." in page

    _done(project, 1, strategy="cold-start", cold_mode="typical")
    page = _ml_page(project)
    assert '<strong class="in-charge">cold-start</strong> is in charge' in page and "no portfolio record" in page
    assert "the most typical item of each region of the pool" in page  # why: the recorded cold mode
    from acquisition.batch import COLD_MODES
    from annotate.selectors.rounds import COLD_REASONS

    assert set(COLD_REASONS) == set(COLD_MODES)  # every mode a project can choose has its reason

    selection = {
        "in_charge": "bald",
        "shares": {"bald": 0.6, "margin": 0.3, "random": 0.1},
        "gains": {"bald": {"mean": 0.012, "n": 3}, "margin": {"mean": None, "n": 0}},
        "reason": "bald gained the most test accuracy per label over the last 3 rounds.",
    }
    _done(project, 2, strategy="portfolio", selection=selection)
    page = _ml_page(project)
    assert '<strong class="in-charge">bald</strong> is in charge' in page
    assert "bald gained the most test accuracy per label over the last 3 rounds." in page
    table = page[page.index('id="selection-arms"') : page.index("</table>", page.index('id="selection-arms"'))]
    assert "bald <strong>(in charge)</strong>" in table and "60 %" in table and "+0.012" in table
    margin = table[table.index(">margin<") :]
    assert margin.split("</tr>")[0].count("—") == 1  # no mean gain yet; its share and n are known
    random_row = table[table.index(">random<") :].split("</tr>")[0]
    assert "10 %" in random_row and random_row.count("—") == 2  # no gain entry at all

    _done(project, 3, strategy="portfolio", selection={"shares": "bad", "gains": {"x": 3}})
    page = _ml_page(project)
    assert '<strong class="in-charge">portfolio</strong> is in charge' in page  # falls back to the field
    assert 'data-label="Strategy">x</td>' in page and '<span class="reason">—</span>' in page
