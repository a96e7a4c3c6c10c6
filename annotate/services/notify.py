"""Notifications: a project's webhook (a JSON POST) and email addresses (Django's email backend) hear
when a round finishes (done or failed) and when its batch's annotators are done and the rest waits for
a lead (skips, disagreements, the review bucket).

Each (round, event, channel) is one NotificationDelivery row, created once (a unique key), then sent
by ``annotate.notify_deliver`` on the ``io`` queue with retries. A receiver that is down, slow or
answers an error fails its own row (status, attempts, last error: the setup page lists them) and
nothing else: the round has finished before anything is sent.

``round_finished_run`` is the round flow's last unit (``round_advance`` dispatches it once a round is
done or failed; ``annotate.round_finished`` on the io queue, or the synchronous driver, runs it): the
round's export snapshot (annotate/services/snapshots.py), then the notifications, which name it.
"""

from __future__ import annotations

import json
import logging
import smtplib
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from annotate.models import ExportSnapshot, NotificationDelivery, Project, Round, WorkClaim
from annotate.selectors.progress import batch_status, labeling_round
from annotate.services import jobs
from annotate.services.queue import send_on_commit
from annotate.services.snapshots import snapshot_write

log = logging.getLogger(__name__)
Event = NotificationDelivery.Event
Channel = NotificationDelivery.Channel
Status = NotificationDelivery.Status
# What a failed send raises: a refused connection, a timeout, an HTTP error status, an SMTP refusal.
SEND_ERRORS = (urllib.error.URLError, OSError, smtplib.SMTPException, ValueError)


class DeliveryFailed(Exception):
    """This attempt failed and another will follow (the task retries it)."""


def email_addresses(raw: str) -> list[str]:
    return [part.strip() for part in raw.replace(";", ",").split(",") if part.strip()]


def notify_targets(project: Project) -> list[tuple[str, str]]:
    """The project's channels: (channel, target) for the webhook and the email addresses, if set."""
    targets: list[tuple[str, str]] = []
    if project.notify_webhook_url:
        targets.append((Channel.WEBHOOK, project.notify_webhook_url))
    if email_addresses(project.notify_emails):
        targets.append((Channel.EMAIL, ", ".join(email_addresses(project.notify_emails))))
    return targets


def notifications_queue(*, round: Round, event: str, payload: dict[str, Any]) -> list[NotificationDelivery]:
    """One delivery per channel of the project, sent after commit; an event already queued for the
    round and channel is not queued again. Returns the new rows."""
    created = []
    for channel, target in notify_targets(round.project):
        try:
            with transaction.atomic():
                row, new = NotificationDelivery.objects.get_or_create(
                    round=round,
                    event=event,
                    channel=channel,
                    defaults={"project_id": round.project_id, "target": target, "payload": payload},
                )
        except IntegrityError:  # a racing caller created it between the read and the write
            continue
        if new:
            send_on_commit("annotate.notify_deliver", row.pk, best_effort=True)  # no broker: the row stays pending
            created.append(row)
    return created


def _round_payload(row: Round, snapshot: ExportSnapshot | None) -> dict[str, Any]:
    project = row.project
    done = row.status == Round.Status.DONE
    summary = f"Round {row.number} of {project.name} " + ("finished." if done else f"failed: {row.failure_reason}")
    payload: dict[str, Any] = {
        "event": Event.ROUND_DONE if done else Event.ROUND_FAILED,
        "summary": summary,
        "project": {"id": project.pk, "name": project.name},
        "round": {
            "number": row.number,
            "status": row.status,
            "strategy": row.strategy,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None,
            "failure_reason": row.failure_reason,
        },
        "page": f"/p/{project.pk}/ml/",
    }
    if snapshot is not None:
        payload["snapshot"] = {
            "status": snapshot.status,
            "rows": snapshot.rows,
            "sha256": snapshot.sha256,
            "model_version": snapshot.model_version,
            "error": snapshot.error,
        }
    return payload


def round_finished_run(*, round_id: int) -> list[NotificationDelivery]:
    """After a round is done or failed (the round flow's ``finish`` unit, claimed like any other): its
    export snapshot (done rounds; a failed write is recorded on the snapshot, never raised), then its
    notifications. Idempotent: a second run finds both."""
    row = Round.objects.select_related("project").get(id=round_id)
    if row.status not in (Round.Status.DONE, Round.Status.FAILED):
        return []

    def finish() -> list[NotificationDelivery]:
        snapshot = snapshot_write(round_id=row.pk) if row.status == Round.Status.DONE else None
        payload = _round_payload(row, snapshot)
        return notifications_queue(round=row, event=payload["event"], payload=payload)

    rows = jobs.work_rows(row.pk, WorkClaim.Kind.FINISH)
    return jobs.run_claimed(rows, round_id=row.pk, what="the round's finish", step=finish) or []


def reviews_waiting_check(*, project_id: int) -> list[NotificationDelivery]:
    """Notify once per round when no batch item needs an annotator any more and some wait for a lead."""
    row = labeling_round(project_id=project_id)
    if row is None or NotificationDelivery.objects.filter(round=row, event=Event.REVIEWS_WAITING).exists():
        return []  # no batch, or this round's notice went out already (the cheap check before the counts)
    batch = batch_status(round=row)
    if batch.need_labels or not batch.waiting_for_lead:
        return []
    project = Project.objects.get(pk=project_id)
    payload = {
        "event": Event.REVIEWS_WAITING,
        "summary": f"Round {row.number} of {project.name}: annotators are done; "
        f"{batch.waiting_for_lead} item(s) wait for a lead.",
        "project": {"id": project.pk, "name": project.name},
        "round": {"number": row.number, "status": row.status},
        "waiting": {"skipped": batch.skipped, "disagreements": batch.disagreements, "in_review": batch.in_review},
        "page": f"/p/{project.pk}/lead/",
    }
    return notifications_queue(round=row, event=Event.REVIEWS_WAITING, payload=payload)


def reviews_may_wait(project: Project) -> None:
    """Called by the labeling services after a label or a skip: once it commits, check whether the batch
    now waits for a lead (nothing at all for a project without notifications)."""
    if notify_targets(project):
        # robust: the label is committed whatever this check does; its failure is logged, never the
        # annotator's error page
        transaction.on_commit(lambda: reviews_waiting_check(project_id=project.pk), robust=True)


# -- sending --------------------------------------------------------------------------------------


def _post(url: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode("utf-8"),
        headers={"Content-Type": "application/json", "User-Agent": "alann-notify/1"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=settings.NOTIFY_TIMEOUT_S) as response:  # noqa: S310 (http/https only: the form checks)
        response.read()


def _email(addresses: str, payload: dict[str, Any]) -> None:
    body = payload.get("summary", "") + "\n\n" + json.dumps(payload, indent=2)
    send_mail(
        subject=f"[alann] {payload.get('summary', payload.get('event', ''))}"[:200],
        message=body,
        from_email=None,  # DEFAULT_FROM_EMAIL
        recipient_list=email_addresses(addresses),
    )


def notification_attempt(*, delivery_id: int, last: bool) -> NotificationDelivery:
    """Send one delivery now. Sent or given up already: nothing (a redelivered message). A failure is
    recorded on the row; raises DeliveryFailed unless this was the ``last`` attempt (then: failed)."""
    rows = NotificationDelivery.objects.filter(pk=delivery_id)
    row = rows.get()
    if row.status != Status.PENDING:
        return row
    rows.update(attempts=F("attempts") + 1)
    try:
        if row.channel == Channel.WEBHOOK:
            _post(row.target, row.payload)
        else:
            _email(row.target, row.payload)
    except SEND_ERRORS as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        log.warning("notification %s (%s to %s) failed: %s", row.pk, row.channel, row.target, error)
        rows.update(last_error=error, status=Status.FAILED if last else Status.PENDING)
        if not last:
            raise DeliveryFailed(error) from exc
    else:
        rows.update(status=Status.SENT, sent_at=timezone.now(), last_error="")
    return rows.get()
