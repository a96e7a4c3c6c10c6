"""The comparison arms off the round's critical path (loop option ``arms_timing`` "deferred", the CPU
profile's default): a round is done with its prod adapters alone; its scratch / active / random adapters
are trained and evaluated afterwards, once the next round's batch is out, on the same plan and seeds —
the same adapters and metrics as in-round — and their points join the curve. They are claimed like any
unit (once; a killed worker's is resumed by the next worker start), and one failing every attempt gives
the comparison up with its reason on the ML page, never failing a round."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import AdapterVersion, Project, Round, WorkClaim
from annotate.services import rounds
from annotate.services.accounts import user_create
from annotate.services.rounds import round_compare_sync, round_request_start, round_run_sync
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    annotator,
    label_batch,
    live_loop,
    round_status,
    trec_project,
    use_loop_options,
    wait_for,
    wait_workers,
)

pytestmark = [pytest.mark.slow, pytest.mark.data]

COMPARISON = {"scratch:0", "active:0", "random:0"}  # round 2 of the test project: a scratch round, arms every round
IN_ROUND = json.dumps({**json.loads(TEST_OPTIONS), "arms_timing": "in_round"})


def _round_two_done(shared_data: Path, work: Path, model_dir: Path, **run: Any) -> Round:
    """Rounds 1 (cold start) and 2 (scored) of a fresh project, labelled and run here to done."""
    work.mkdir()
    project = trec_project(shared_data, work, model_dir=model_dir)
    for _ in range(2):
        row = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
        assert row.status == "labeling", row.failure_reason
        label_batch(project, annotator(work.name))
        row = round_run_sync(round_id=row.id, **run)
        assert row.status == "done", row.failure_reason
    return row


def _comparison_adapters(row: Round) -> dict[str, str]:
    return {
        f"{a}:{k}": h
        for a, k, h in AdapterVersion.objects.filter(round=row)
        .exclude(arm="prod")
        .values_list("arm", "k", "content_hash")
    }


def _ml_page(project: Project) -> str:
    from django.contrib.auth import get_user_model

    client = Client()
    user = get_user_model().objects.filter(username="mia").first()
    client.force_login(user or user_create(username="mia", password="pw-12345678", roles=["ml"]))
    return client.get(reverse("ml_home", args=[project.pk])).content.decode()


@pytest.mark.django_db
def test_the_round_is_done_before_its_comparison_arms_and_they_match_the_in_round_ones(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    use_loop_options(monkeypatch, settings, IN_ROUND)
    reference = _round_two_done(shared_data, tmp_path / "inround", tiny_llama_dir)
    assert set(_comparison_adapters(reference)) == COMPARISON

    use_loop_options(monkeypatch, settings, TEST_OPTIONS)  # the CPU profile: deferred
    second = _round_two_done(shared_data, tmp_path / "deferred", tiny_llama_dir, comparison=False)
    # Done with the prod members only: nothing of the comparison trained, the page says they come later.
    assert _comparison_adapters(second) == {}
    assert "arms" not in second.metrics and "gain" not in second.metrics
    assert second.metrics["comparison"] == {"state": "waiting"}
    assert {p["arm"] for p in second.metrics["points"]} == {"prod"}
    assert second.train_steps_done == second.train_steps_total  # the round's bar counts its own adapters
    assert WorkClaim.objects.get(round=second, kind="arms_eval").status == "pending"
    assert "comparison arms: training after the round" in _ml_page(second.project)
    # Not while the project's path is busy or no later round has chosen its batch ...
    assert not rounds.comparison_due(second)
    third = round_request_start(project=second.project, user=None, run_here=True)
    assert not rounds.comparison_due(second)  # round 3 is pending: its scoring must not wait for them
    third = round_run_sync(round_id=third.id)
    assert third.status == "labeling"
    assert rounds.comparison_due(second)  # ... but while people label round 3's batch
    assert [str(w) for w, _ in rounds.comparison_units(second)] == [
        f"annotate.gpu.train_adapter({second.id}, '{arm}', 0)" for arm in ("scratch", "random", "active")
    ]

    second = round_compare_sync(round_id=second.id)
    # The same plan and seeds: the same adapters and the same comparison as in the round.
    assert _comparison_adapters(second) == _comparison_adapters(reference)
    for key in ("arms", "gain", "gain_text", "scratch_vs_warm", "points"):
        assert second.metrics[key] == reference.metrics[key], key
    assert second.metrics["comparison"] == {"state": "done"}
    assert second.metrics["accuracy"] == reference.metrics["accuracy"]
    claims = WorkClaim.objects.filter(round=second)
    assert {c.key: c.attempts for c in claims.filter(kind="train").exclude(key__startswith="prod")} == {
        key: 1 for key in COMPARISON
    }
    assert claims.get(kind="arms_eval").status == "done" and claims.get(kind="arms_eval").attempts == 1
    steps = second.cost["steps"]
    assert steps["comparison_training"]["steps"] == 3 * 3 and steps["comparison_evaluating"]["seconds"] > 0
    assert round_compare_sync(round_id=second.id).metrics == second.metrics  # a replay changes nothing
    assert "comparison arms: training" not in _ml_page(second.project)


def fail_the_active_arm(point: str, key: object) -> None:
    """Step hook (annotate/steppoints.py): the active comparison arm fails halfway, every time."""
    if point == "train" and str(key).endswith("-active:0"):
        raise RuntimeError("the active arm ran out of memory")


@pytest.mark.django_db
def test_a_comparison_arm_failing_every_attempt_is_given_up_and_fails_no_round(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    second = _round_two_done(shared_data, tmp_path / "failing", tiny_llama_dir, comparison=False)
    settings.STEP_HOOK = f"{__name__}.fail_the_active_arm"
    second = round_compare_sync(round_id=second.id)

    assert second.status == "done" and second.failure_reason == ""
    assert second.metrics["comparison"]["state"] == "failed"
    assert "the active arm ran out of memory" in second.metrics["comparison"]["reason"]
    assert "arms" not in second.metrics and {p["arm"] for p in second.metrics["points"]} == {"prod"}
    active = WorkClaim.objects.get(round=second, kind="train", key="active:0")
    assert active.status == "failed" and active.attempts == 4  # three tries, then the claim that gave up
    owed = WorkClaim.objects.get(round=second, kind="arms_eval")
    assert owed.status == "done" and "ran out of memory" in owed.error  # nothing owed, nothing left running
    assert rounds.comparison_units(second) == []
    assert round_compare_sync(round_id=second.id).metrics == second.metrics  # given up stays given up
    page = _ml_page(second.project)
    assert "comparison arms: not measured: comparison adapter active:0 failed 3 times" in page

    settings.STEP_HOOK = None
    third = round_run_sync(round_id=round_request_start(project=second.project, user=None, run_here=True).id)
    assert third.status == "labeling", third.failure_reason  # the project's next rounds go on


def test_the_workers_train_the_arms_while_the_next_batch_is_labelled_once_and_resume_a_killed_one(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    # The worker that trains the active arm stalls halfway through it, so the kill lands mid-adapter.
    for name, value in stall_env("train=trec-work-active:0", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        second = _round_two_done(shared_data, tmp_path / "work", tiny_llama_dir, comparison=False)
        workers.start("a")
        wait_workers(["a"])
        time.sleep(2)  # the worker's start-up resume: round 2's comparison is not due (no later round)
        assert _comparison_adapters(second) == {}
        third = round_request_start(project=second.project, user=None)  # through the workers
        wait_for(lambda: (stall_dir / "train-trec-work-active:0").exists(), 240, "the active arm halfway", poll=0.1)
        assert round_status(third.id) == "labeling"  # round 3's batch was out before the arms trained
        victim = WorkClaim.objects.get(round=second, kind="train", key="active:0")
        assert victim.status == "running"
        workers.kill("a")
        workers.start("b")  # its start-up resume sends the dead worker's unit again
        owed = WorkClaim.objects.filter(round=second, kind="arms_eval", status="done")
        wait_for(owed.exists, 240, "the comparison after the kill", poll=0.3)

        second.refresh_from_db()
        assert second.status == "done" and second.metrics["comparison"] == {"state": "done"}, workers.logs()
        assert set(_comparison_adapters(second)) == COMPARISON
        train = {c.key: c for c in WorkClaim.objects.filter(round=second, kind="train").exclude(key__startswith="prod")}
        assert {c.status for c in train.values()} == {"done"}
        assert train["active:0"].attempts == 2 and train["active:0"].worker != victim.worker  # resumed once
        assert {k: c.attempts for k, c in train.items() if k != "active:0"} == {"scratch:0": 1, "random:0": 1}
        assert WorkClaim.objects.get(round=second, kind="arms_eval").attempts == 1
        # The curve gets the arms' points: in the round's metrics and on the page's curve.
        assert {p["arm"] for p in second.metrics["points"] if p["round"] == 2} == {"prod", "active", "random"}
        assert round_status(third.id) == "labeling"


@pytest.mark.django_db
def test_a_failed_round_owes_no_comparison_and_the_resume_stops_looking_at_it(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from annotate.services import jobs
    from annotate.services.round_state import round_fail

    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    (tmp_path / "work").mkdir()
    project = trec_project(shared_data, tmp_path / "work", model_dir=tiny_llama_dir)
    row = round_request_start(project=project, user=None, run_here=True)
    owed = jobs.work_rows(row.id, WorkClaim.Kind.ARMS_EVAL)  # as a deferred-arms training plan leaves it
    assert owed.get().status != "done"

    assert round_fail(round_id=row.id, reason="the pool file vanished")
    claim = owed.get()
    assert claim.status == "done" and claim.error == "the round failed"
    assert not round_fail(round_id=row.id, reason="again")  # idempotent: nothing moves twice
    sent: list[Any] = []
    monkeypatch.setattr(rounds, "enqueue", sent.append)
    rounds.rounds_resume_all()
    assert sent == []  # a failed round whose finish is done and that owes no comparison: nothing to resume
