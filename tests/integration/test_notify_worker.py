"""Issue 32, notifications through a real Celery worker on the ``io`` queue: once a round is done the
round flow sends ``annotate.round_finished``; the worker writes the export snapshot, then POSTs to a real local HTTP
server and emails (Django's file backend, so this process can read what the worker sent). A webhook
that answers 500 is retried, then its delivery is marked failed; its round stays done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from annotate.models import ExportSnapshot, NotificationDelivery, Round
from annotate.services.projects import LabelInput, project_create
from annotate.services.round_state import S, round_transition
from annotate.services.rounds import round_advance
from tests.integration.round_helpers import live_loop, wait_for, wait_workers
from tests.integration.webhook_server import webhook_receiver

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.timeout(240)]


def _finish_round(name: str, webhook: str, emails: str = "") -> Round:
    project = project_create(
        name=name,
        labels=[LabelInput("pos", "A"), LabelInput("neg", "B")],
        notify_webhook_url=webhook,
        notify_emails=emails,
    )
    row = Round.objects.create(project=project, number=1, status=S.EVALUATING)
    with transaction.atomic():  # as the evaluation task ends a round: its last move, then the round flow
        assert round_transition(row.id, S.EVALUATING, S.DONE)
        round_advance(row.id)  # sends annotate.round_finished once this commits
    return row


def test_the_io_worker_posts_emails_and_gives_up_on_a_failing_hook(
    tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    emails = tmp_path / "emails"
    monkeypatch.setenv("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
    monkeypatch.setenv("EMAIL_FILE_PATH", str(emails))
    monkeypatch.setenv("ALANN_NOTIFY_RETRIES", "2")
    monkeypatch.setenv("ALANN_NOTIFY_BACKOFF_S", "0.2")
    with (
        webhook_receiver() as hook,
        webhook_receiver(status=500) as broken,
        live_loop(tmp_path, settings, django_db_blocker) as workers,
    ):
        workers.start("io", queues="io")
        wait_workers(["io"])
        good = _finish_round("hooked", hook.url, emails="lead@example.org")
        bad = _finish_round("broken hook", broken.url)

        settled = lambda: not NotificationDelivery.objects.filter(status="pending").exists()  # noqa: E731
        try:
            wait_for(lambda: NotificationDelivery.objects.count() == 3 and settled(), 60, "the deliveries", poll=0.2)
        except AssertionError:
            raise AssertionError(workers.logs()) from None

        by_channel = {(d.round_id, d.channel): d for d in NotificationDelivery.objects.all()}
        assert by_channel[(good.id, "webhook")].status == "sent"
        assert by_channel[(good.id, "email")].status == "sent"
        failed = by_channel[(bad.id, "webhook")]
        assert (failed.status, failed.attempts, broken.posts) == ("failed", 3, 3)  # the first try and 2 retries
        assert "500" in failed.last_error
        assert Round.objects.get(id=bad.id).status == "done"
        (body,) = hook.bodies
        snapshot = ExportSnapshot.objects.get(round=good)
        assert (body["event"], body["snapshot"]["sha256"]) == ("round_done", snapshot.sha256)
        assert Path(snapshot.path).is_file()
        (sent,) = emails.iterdir()
        assert "To: lead@example.org" in sent.read_text() and "Round 1 of hooked finished" in sent.read_text()
