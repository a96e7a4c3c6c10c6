"""Issue 32, notifications: a finished round and a batch whose rest waits for a lead are announced to
the project's webhook (a JSON POST, here to a real local HTTP server) and email addresses (Django's
locmem backend); each (round, event, channel) once; a failing receiver fails its delivery row, never
the round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail

from annotate.models import Annotation, BatchItem, Item, Label, NotificationDelivery, Project, Round
from annotate.services.labeling import label_submit, next_item_for, skip_submit
from annotate.services.notify import DeliveryFailed, notification_attempt, round_finished_run
from annotate.services.projects import LabelInput, project_create
from annotate.services.round_state import S
from tests.integration.webhook_server import webhook_receiver

pytestmark = [pytest.mark.django_db]


def _project(name: str, *, webhook: str, emails: str = "lead@example.org, ml@example.org") -> Project:
    return project_create(
        name=name,
        labels=[LabelInput("pos", "A"), LabelInput("neg", "B")],
        notify_webhook_url=webhook,
        notify_emails=emails,
    )


def _send_all(*, last: bool = False) -> list[NotificationDelivery]:
    return [notification_attempt(delivery_id=d.pk, last=last) for d in NotificationDelivery.objects.order_by("id")]


def test_a_finished_round_posts_json_and_emails_once(settings: Any, tmp_path: Path) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.EXPORT_DIR = tmp_path / "exports"
    with webhook_receiver() as hook:
        project = _project("notify", webhook=hook.url)
        row = Round.objects.create(project=project, number=1, status=S.DONE)

        assert {d.channel for d in round_finished_run(round_id=row.id)} == {"webhook", "email"}
        assert round_finished_run(round_id=row.id) == []  # a redelivered message notifies nobody again
        sent = _send_all()

    assert [d.status for d in sent] == ["sent", "sent"] and all(d.attempts == 1 for d in sent)
    (body,) = hook.bodies
    assert (body["event"], body["round"]["number"], body["project"]["name"]) == ("round_done", 1, "notify")
    assert body["snapshot"]["status"] == "done" and len(body["snapshot"]["sha256"]) == 64
    (email,) = mail.outbox
    assert email.to == ["lead@example.org", "ml@example.org"]
    assert "Round 1 of notify finished" in email.subject and '"round_done"' in email.body


def test_a_failing_webhook_fails_its_delivery_not_the_round(settings: Any, tmp_path: Path) -> None:
    settings.EXPORT_DIR = tmp_path / "exports"
    with webhook_receiver(status=500) as hook:
        project = _project("broken hook", webhook=hook.url, emails="")
        row = Round.objects.create(project=project, number=1, status=S.FAILED, failure_reason="out of memory")
        (delivery,) = round_finished_run(round_id=row.id)
        assert delivery.payload["event"] == "round_failed"

        with pytest.raises(DeliveryFailed, match="500"):
            notification_attempt(delivery_id=delivery.pk, last=False)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts) == ("pending", 1)
        gave_up = notification_attempt(delivery_id=delivery.pk, last=True)

    assert (gave_up.status, gave_up.attempts, hook.posts) == ("failed", 2, 2)
    assert "HTTP Error 500" in gave_up.last_error
    assert Round.objects.get(id=row.id).status == "failed"  # as it was: nothing about the round changed


def test_an_unreachable_webhook_is_a_failed_delivery(tmp_path: Path, settings: Any) -> None:
    settings.NOTIFY_TIMEOUT_S = 2
    with webhook_receiver() as hook:
        url = hook.url  # the server is gone once the block ends: the port refuses connections
    project = _project("gone", webhook=url, emails="")
    row = Round.objects.create(project=project, number=1, status=S.FAILED)
    (delivery,) = round_finished_run(round_id=row.id)
    failed = notification_attempt(delivery_id=delivery.pk, last=True)
    assert failed.status == "failed" and "refused" in failed.last_error.lower()


def test_reviews_waiting_is_announced_once_the_annotators_are_done(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    project = _project("reviews", webhook="", emails="lead@example.org")
    pos, neg = Label.objects.filter(project=project).order_by("order")
    row = Round.objects.create(project=project, number=1, status=S.LABELING)
    items = [
        Item.objects.create(project=project, external_id=f"i{n}", text=f"t{n}", text_hash=f"h{n}", required_labels=2)
        for n in range(2)
    ]
    BatchItem.objects.bulk_create(
        BatchItem(round=row, item=item, source="random", rank=n) for n, item in enumerate(items)
    )
    ann, bob = User.objects.create_user("ann"), User.objects.create_user("bob")

    plan = [(ann, pos), (ann, pos), (bob, pos), (bob, neg)]  # item 0 agreed; item 1: a disagreement
    for user, label in plan:
        with django_capture_on_commit_callbacks(execute=True):
            item = next_item_for(project=project, annotator=user)
            assert item is not None
            label_submit(item=item, annotator=user, label=label)
        waiting = NotificationDelivery.objects.filter(event="reviews_waiting")
        assert waiting.exists() == (Annotation.objects.count() == 4)  # only after the last label

    (delivery,) = NotificationDelivery.objects.filter(event="reviews_waiting")
    assert delivery.payload["waiting"] == {"skipped": 0, "disagreements": 1, "in_review": 0}
    assert notification_attempt(delivery_id=delivery.pk, last=True).status == "sent"
    assert "1 item(s) wait for a lead" in mail.outbox[0].subject


def test_a_skip_that_leaves_only_lead_work_is_announced(settings: Any, django_capture_on_commit_callbacks: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    project = _project("skips", webhook="", emails="lead@example.org")
    row = Round.objects.create(project=project, number=1, status=S.LABELING)
    item = Item.objects.create(project=project, external_id="i0", text="t0", text_hash="h0")
    BatchItem.objects.create(round=row, item=item, source="random", rank=0)
    ann = User.objects.create_user("ann")
    with django_capture_on_commit_callbacks(execute=True):
        taken = next_item_for(project=project, annotator=ann)
        assert taken is not None
        skip_submit(item=taken, annotator=ann, reason="not English")
    (delivery,) = NotificationDelivery.objects.filter(event="reviews_waiting", round=row)
    assert delivery.payload["waiting"] == {"skipped": 1, "disagreements": 0, "in_review": 0}
