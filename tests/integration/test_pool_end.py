"""The end of the pool is a success (issue 33): the round that finds nothing left to select trains the
final model from scratch and completes as "pool fully labelled"; the ML page says so and links what
comes next; no further round starts (a clear refusal instead) until more items are imported; and the
simulation stops there with its records and exit status 0. On CPU, with a tiny random llama."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotate.models import AdapterVersion, BatchItem, Item, Round
from annotate.services.accounts import user_create
from annotate.services.imports import import_items
from annotate.services.rounds import RoundError, round_request_final, round_request_start, round_run_sync
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options
from tests.integration.test_simulate import write_data

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def small_pool(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> Any:
    """A TREC project of 16 pool items (and 6 test items, under the 30 % cap on the test set): two batches
    of 8 label it all."""
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    return trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, pool=22, test=6, batch_size=8)


def _full_round(project: Any) -> Round:
    """Request a round, label its batch with the gold labels, train and evaluate it (synchronously)."""
    row = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    label_batch(project, annotator())
    return round_run_sync(round_id=row.id)


@pytest.mark.data
def test_the_round_that_finds_the_pool_labelled_trains_the_final_model_and_is_the_last(
    small_pool: Any, tmp_path: Path
) -> None:
    project = small_pool
    first, second = _full_round(project), _full_round(project)  # 8 + 8: the 16 pool items
    assert (first.status, second.status) == ("done", "done"), (first.failure_reason, second.failure_reason)
    assert (first.training_mode, second.training_mode) == ("scratch", "warm")  # nothing to start from, then warm
    assert not Item.objects.filter(project=project, is_test=False, final_label__isnull=True).exists()

    last = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert last.status == "done" and last.pool_exhausted, last.failure_reason
    assert not BatchItem.objects.filter(round=last).exists() and last.items_to_score == 0  # nothing scored
    assert last.training_mode == "scratch" and last.metrics["labels"] == 16
    prod = AdapterVersion.objects.filter(round=last, arm="prod")
    assert prod.count() == 2 and not prod.filter(warm_from__isnull=False).exists()  # from scratch, every member
    assert not AdapterVersion.objects.filter(round=last, arm="scratch").exists()  # no comparison with itself

    for request in (round_request_start, round_request_final):
        with pytest.raises(RoundError, match=f"pool is fully labelled: round {last.number} found nothing"):
            request(project=project, user=None, run_here=True)
    assert Round.objects.filter(project=project).count() == 3  # refused before anything was written

    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    page = client.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert "Pool fully labelled." in page and f"Round {last.number} found nothing left to select" in page
    for name in ("export_page", "autolabel_home", "import_upload"):
        assert f'href="{reverse(name, args=[project.pk])}"' in page, name
    assert "trained from scratch on every label: the final model, the pool being fully labelled" in page
    assert "warm start: each adapter went on from the previous round" in page
    refusal = client.post(reverse("ml_round_start", args=[project.pk]), {"strategy": "active"}, follow=True)
    assert "the pool is fully labelled" in refusal.content.decode()

    more = tmp_path / "more.csv"  # new items: the loop goes on
    with more.open("w", newline="") as f:
        csv.writer(f).writerows([("id", "text", "label"), ("new-1", "Who wrote Hamlet ?", "human")])
    import_items(project=project, path=more)
    again = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert again.status == "labeling" and BatchItem.objects.filter(round=again).count() == 1
    assert "Pool fully labelled." not in client.get(reverse("ml_home", args=[project.pk])).content.decode()


@pytest.mark.data
def test_nothing_eligible_while_items_are_with_annotators_is_not_the_pool_end(small_pool: Any) -> None:
    from annotate.services.labeling import next_item_for

    project = small_pool
    _full_round(project)
    second = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert second.status == "labeling"
    label_batch(project, annotator(), limit=7)
    assert next_item_for(project=project, annotator=annotator()) is not None  # the 8th: leased, unlabelled
    second = round_run_sync(round_id=second.id)  # retrain on the 15 labels
    assert second.status == "done", second.failure_reason
    third = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert third.status == "failed" and not third.pool_exhausted
    assert "the unlabelled pool items left (1) are still with annotators" in third.failure_reason


@pytest.mark.data
def test_a_requested_final_model_selects_nothing_and_retrains_from_scratch(small_pool: Any) -> None:
    project = small_pool
    with pytest.raises(RoundError, match="no labels yet"):
        round_request_final(project=project, user=None, run_here=True)
    first = _full_round(project)
    final = round_run_sync(round_id=round_request_final(project=project, user=None, run_here=True).id)
    assert final.status == "done" and final.final_requested and not final.pool_exhausted, final.failure_reason
    assert final.strategy == "final-model" and not BatchItem.objects.filter(round=final).exists()
    assert final.training_mode == "scratch" and final.metrics["labels"] == first.metrics["labels"] == 8
    assert not AdapterVersion.objects.filter(round=final, arm="prod", warm_from__isnull=False).exists()
    # Not the pool's end: the loop goes on, warm-starting from the final model's adapters.
    after = _full_round(project)
    assert after.status == "done" and after.training_mode == "warm" and after.metrics["labels"] == 16
    assert AdapterVersion.objects.get(round=after, arm="prod", k=0).warm_from.round_id == final.id  # type: ignore[union-attr]


def test_the_simulation_stops_cleanly_when_the_pool_is_labelled(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """60 pool items, a seed set of 20 and batches of 20: rounds 1-3 label the pool, round 4 finds it
    labelled and trains the final model; the command returns (exit 0) with every round recorded. The
    loop option consolidate_every 3 retrains from scratch at round 3 (round 2 warm-starts)."""
    write_data(tmp_path / "tiny")
    out = tmp_path / "out"
    options = {"max_context": 128, "consolidate_every": 3, "train": {"max_steps": 2, "batch_size": 4}}
    call_command(
        "simulate",
        "--data", str(tmp_path / "tiny"),
        "--strategy", "active,random-coldstart",
        "--seeds", "1",
        "--rounds", "8",
        "--batch", "20",
        "--seed-labels", "20",
        "--k", "1",
        "--model", str(tiny_llama_dir),
        "--mass-threshold", "0",
        "--loop-options", json.dumps(options),
        "--out", str(out),
        "--plots-dir", str(tmp_path / "plots"),
        "--baselines", str(tmp_path / "none.md"),
    )  # fmt: skip
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: r["round"]):
        by_arm.setdefault(r["strategy"], []).append(r)
    assert set(by_arm) == {"active", "random-coldstart"}
    for arm, rounds in by_arm.items():
        shape = [(r["round"], r["labels"], r["batch"], r["pool_exhausted"], r["training_mode"]) for r in rounds]
        assert shape == [
            (1, 20, 20, False, "scratch"),
            (2, 40, 20, False, "warm"),
            (3, 60, 20, False, "scratch"),  # consolidate_every 3
            (4, 60, 0, True, "scratch"),  # the pool's end: the final model
        ], arm
        assert all(r["config"]["consolidate_every"] == 3 for r in rounds)
    # random-coldstart: active's seed set (same seed), then uniform random batches that are not scored.
    active, cold_random = by_arm["active"], by_arm["random-coldstart"]
    assert cold_random[0]["batch_ids"] == active[0]["batch_ids"] and cold_random[0]["cold_mode"] == "typical"
    assert all(r["sources"] == {"random": 20} and r["items_scored"] == 0 for r in cold_random[1:3])
    report = (out / "report.md").read_text()
    assert "| tiny | active+typical | 1 |" in report and "| tiny | random-coldstart+typical | 1 |" in report
