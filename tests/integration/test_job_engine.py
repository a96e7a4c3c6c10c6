"""The one job engine (annotate/services/jobs.py) against the real database: a storm of worker
starts sends each waiting unit once, a unit whose holder died is sent once, one job kind's failing
resume never stops the others; and the round items for people are labelled in (cascade, audit, gold,
calibration split) goes through the round transitions and the one-active-round rule."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from annotate.models import (
    AutolabelRun,
    AutolabelShard,
    BatchItem,
    Calibration,
    Item,
    LabelErrorScan,
    Project,
    Round,
    WaitingItem,
)
from annotate.services import autolabel, jobs, rounds
from annotate.services.round_state import round_transition
from annotate.services.rounds import round_advance

pytestmark = pytest.mark.django_db
DEAD = "nohost-of-this-test:4242"  # a worker id whose process cannot be alive (another host, no heartbeat)


def _project(n: int = 6) -> tuple[Project, list[Item]]:
    project = Project.objects.create(name="jobs")
    items = [
        Item.objects.create(project=project, external_id=f"i{k}", text=f"text {k}", text_hash=f"h{k}") for k in range(n)
    ]
    return project, items


def _run(project: Project) -> AutolabelRun:
    calibration = Calibration.objects.create(project=project, status="done")
    return AutolabelRun.objects.create(project=project, calibration=calibration, status="running")


# -- resume: no storm ---------------------------------------------------------------------------------


def test_a_storm_of_worker_starts_sends_each_waiting_unit_once() -> None:
    project, _ = _project()
    run = _run(project)
    for k in range(3):
        AutolabelShard.objects.create(run=run, shard=k, status="queued")
    row = Round.objects.create(project=project, number=1, status="pending")
    round_advance(row.id)  # the round's plan: reserved and sent once
    # five workers start at once, after those messages went out: between them, each goes out again
    # exactly once (a worker killed holding one unclaimed would have left it unacknowledged)
    started = timezone.now()
    reports = [jobs.resume_all(started=started) for _ in range(5)]
    assert sum(int(r["auto-labelling"]) for r in reports) == 3
    assert sum(int(r["rounds"]) for r in reports) == 1, reports
    assert [r["auto-labelling"] for r in reports[1:]] == [0, 0, 0, 0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_resends_of_one_unit_send_it_once() -> None:
    """Five threads (five connections: five workers that started at once) race on one unit's resend:
    the conditional UPDATE lets one win."""
    project, _ = _project(1)
    run = _run(project)
    shard = AutolabelShard.objects.create(run=run, shard=0, status="queued", sent_at=timezone.now())
    started = timezone.now()
    barrier, wins = threading.Barrier(5), []

    def resend() -> None:
        try:
            barrier.wait()
            wins.append(jobs.resend_due(AutolabelShard.objects.filter(id=shard.id), since=started))
        finally:
            connection.close()

    threads = [threading.Thread(target=resend) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, False, False, False, True]


def test_a_unit_whose_holder_died_is_sent_once() -> None:
    project, _ = _project()
    run = _run(project)
    AutolabelShard.objects.create(run=run, shard=0, status="running", worker=DEAD, attempts=1)
    scan = LabelErrorScan.objects.create(project=project, status="running", worker=DEAD, attempts=1)
    started = timezone.now()  # two workers start at once
    first, second = jobs.resume_all(started=started), jobs.resume_all(started=started)
    assert first["auto-labelling"] == 1 and second["auto-labelling"] == 0
    assert first["label-error scans"] == 1 and second["label-error scans"] == 0
    scan.refresh_from_db()
    assert scan.status == "pending" and scan.sent_at is not None


def test_a_killed_calibration_is_sent_again() -> None:
    project, _ = _project()
    cal = Calibration.objects.create(project=project, status="running", worker=DEAD, attempts=1)
    started = timezone.now()
    assert jobs.resume_all(started=started)["auto-labelling"] == 1
    assert jobs.resume_all(started=started)["auto-labelling"] == 0
    cal.refresh_from_db()
    assert cal.status == "pending" and cal.sent_at is not None  # its message is out; a worker claims it


def test_one_kind_failing_to_resume_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    project, _ = _project()
    run = _run(project)
    AutolabelShard.objects.create(run=run, shard=0, status="queued")  # never sent: sent_at is empty
    monkeypatch.setattr(jobs, "JOBS", (jobs.Job("broken", "annotate.services.nowhere:resume"), *jobs.JOBS))
    report = jobs.resume_all()
    assert str(report["broken"]).startswith("failed: ModuleNotFoundError")
    assert report["auto-labelling"] == 1 and report["rounds"] == 0


# -- the round items for people are labelled in --------------------------------------------------------


def _batch(row: Round) -> list[tuple[int, str]]:
    return list(BatchItem.objects.filter(round=row).order_by("rank").values_list("item_id", "source"))


def test_with_no_active_round_one_is_opened_through_the_transitions() -> None:
    project, items = _project()
    autolabel.queue_for_people(project=project, item_ids=[items[0].id, items[1].id], source="cascade")
    autolabel.queue_for_people(project=project, item_ids=[items[1].id, items[2].id], source="audit")
    (row,) = Round.objects.filter(project=project)
    assert (row.status, row.strategy, row.number) == ("labeling", rounds.PEOPLE_STRATEGY, 1)
    assert row.config and row.config_fingerprint  # frozen like any round's
    assert _batch(row) == [(items[0].id, "cascade"), (items[1].id, "cascade"), (items[2].id, "audit")]
    # it is the active round: no other round starts while people label it
    with pytest.raises(rounds.RoundError, match="still labeling"):
        rounds.round_request_start(project=project, user=None)


def test_while_the_active_round_is_busy_items_wait_and_join_the_next_labelling_round() -> None:
    project, items = _project()
    busy = Round.objects.create(project=project, number=1, status="training")
    autolabel.queue_for_people(project=project, item_ids=[items[0].id, items[3].id], source="gold")
    assert Round.objects.filter(project=project).count() == 1  # never a second active round
    assert sorted(WaitingItem.objects.values_list("item_id", flat=True)) == [items[0].id, items[3].id]
    assert _batch(busy) == []
    # the round ends without a labelling phase (a final-model round): the flow opens a round for them
    round_transition(busy.id, "training", "evaluating")
    round_transition(busy.id, "evaluating", "done")
    round_advance(busy.id)
    opened = Round.objects.get(project=project, number=2)
    assert (opened.status, opened.strategy) == ("labeling", rounds.PEOPLE_STRATEGY)
    assert _batch(opened) == [(items[0].id, "gold"), (items[3].id, "gold")]
    assert not WaitingItem.objects.exists()
    round_advance(busy.id)  # again: nothing more is opened
    assert Round.objects.filter(project=project).count() == 2


def test_a_selecting_round_takes_the_waiting_items_into_its_batch() -> None:
    from annotate.services import people_queue

    project, items = _project()
    selecting = Round.objects.create(project=project, number=1, status="selecting")
    autolabel.queue_for_people(project=project, item_ids=[items[4].id], source="calib")
    assert people_queue.waiting(project_id=project.id)
    BatchItem.objects.create(round=selecting, item=items[1], source="active", rank=1)
    assert people_queue.absorb(round=selecting) == 1  # what selection does as it moves the round on
    assert _batch(selecting) == [(items[1].id, "active"), (items[4].id, "calib")]
    assert people_queue.absorb(round=selecting) == 0
