"""The calibration split and the gold set by true class, against the real database (and, for the
fit, the real hf engine on the tiny llama, inline): thresholds rest on the calibration split only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotate.models import BatchItem, GoldItem, Item, Label, Prediction
from annotate.selectors import autolabel as auto_sel
from annotate.selectors import loop as loop_sel
from annotate.services import autolabel as auto
from annotate.services.labeling import label_submit, next_item_for
from tests.integration.round_helpers import TEST_OPTIONS, annotator, trec_project
from tests.integration.test_autolabel import calibrated

pytestmark = [pytest.mark.django_db, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)


def label_everything_served(project, name: str = "a1") -> int:  # type: ignore[no-untyped-def]
    user, n = annotator(name), 0
    while (item := next_item_for(project=project, annotator=user)) is not None:
        label_submit(item=item, annotator=user, label=Label.objects.get(pk=item.gold_label_id or 0))
        n += 1
    return n


def test_calibration_split_is_held_out_at_random(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    pool_before = set(loop_sel.eligible_ids(project=project).tolist())
    assert auto.calibration_split_draw(project=project, n=20, seed=1) == 20
    split = set(GoldItem.objects.filter(purpose="calibration").values_list("item_id", flat=True))
    assert len(split) == 20 and split <= pool_before  # from the pool: never a test item
    assert not Item.objects.filter(id__in=split, is_test=True).exists()
    assert set(BatchItem.objects.filter(source="calib").values_list("item_id", flat=True)) == split
    assert label_everything_served(project) == 20  # labelled once: required_labels stays 1
    assert set(auto_sel.calibration_inputs(project=project).item_ids) == split
    assert not split & set(auto_sel.eval_items(project=project).item_ids)  # the calibrator never sees it
    assert not split & set(loop_sel.labeled_items(project=project).item_ids)  # never trained on
    assert not split & set(auto_sel.unlabelled_pool(project=project).values_list("id", flat=True))
    assert auto_sel.calibration_split_counts(project=project) == {"drawn": 20, "labelled": 20}
    assert auto.calibration_split_draw(project=project, n=5, seed=1) == 5  # more draws add new items


def test_gold_is_topped_up_by_true_class(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    eligible = Item.objects.filter(id__in=loop_sel.eligible_ids(project=project).tolist())
    index = {lab.pk: c for c, lab in enumerate(labels)}
    for item in eligible:  # the model never predicts the last class: its items look like the first
        true = index[item.gold_label_id or 0]
        shown = 0 if true == len(labels) - 1 else true
        probs = [0.05] * len(labels)
        probs[shown], probs[true] = 0.6, (0.3 if true != shown else 0.6)
        Prediction.objects.create(
            item=item, prompt_hash="p", adapter_set_hash="a", label=labels[shown], probs=probs, mass=1.0
        )
    available = {lab.pk: eligible.filter(gold_label=lab).count() for lab in labels}
    for _ in range(3):  # draw, label, top up the classes whose true count is still short
        auto.gold_draw(project=project, per_class=2, seed=0)
        label_everything_served(project, "g1")
        label_everything_served(project, "g2")
    gold = GoldItem.objects.filter(project=project, purpose="gold", item__final_label__isnull=False)
    for lab in labels:  # every true class reaches the minimum or has all its eligible items in
        have = gold.filter(item__final_label=lab).count()
        assert have >= min(2, available[lab.pk]), lab.name
    assert auto.gold_draw(project=project, per_class=2, seed=0) == 0  # nothing short: nothing drawn


@pytest.mark.slow
def test_thresholds_are_fitted_on_the_calibration_split_only(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    auto.calibration_split_draw(project=project, n=20, seed=2)
    label_everything_served(project)
    row = calibrated(project, cascade="agreement", target=0.9, delta=0.1)
    assert row.n_items == 16 and row.n_calibration == 20  # the calibrator: the test set; the thresholds: the split
    for rules in row.thresholds.values():
        assert sum(r["n_predicted"] for r in rules) == 20
        assert all(r["threshold"] is None and r["delta"] == 0.1 for r in rules)  # 20 items: under 22 for 0.9 at δ 0.1
        assert all(r["needed"] == 25 - r["n_predicted"] for r in rules)  # never under MIN_ITEMS_PER_CLASS


@pytest.mark.slow
def test_realised_precision_against_oracle_labels_raises_the_alarm_on_the_page(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any
) -> None:
    """Every item auto-accepted (test state) by the untrained tiny model: measured against the
    oracle labels, the classes it accepted sit far under 95 % and the page says so, interval and all."""
    from django.test import Client
    from django.urls import reverse

    from annotate.services.accounts import user_create
    from tests.integration.test_autolabel import accept_everything, run

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    calibration = calibrated(project, cascade="none")
    accept_everything(calibration)
    run(project, audit_share=0.0)
    found = [s for s in auto_sel.oracle_precision(calibration=calibration) if s.audited]
    assert sum(s.audited for s in found) == 44  # every accepted item has an oracle label here
    for s in found:
        assert s.precision is not None and s.ci_low <= s.precision <= s.ci_high and s.target == 0.95
        assert s.alarm == (s.ci_high < 0.95)
    assert any(s.alarm for s in found)
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    page = client.get(reverse("autolabel_home", args=[project.pk])).content.decode()
    assert "Realised precision against oracle labels" in page and "ALARM: under target" in page
    assert page.count('class="realised-row"') == len(found)
