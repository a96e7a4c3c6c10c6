"""Possible label errors (issue 31): a scan judges every human label out of sample and queues the ones it
contradicts with confidence for a lead, with the evidence; only the lead's decision changes a label.

The judge is the embedding proxy fitted k times on the other folds (predictor/label_errors.py): the K
LoRA adapters train on every label, so no adapter of a round is out of sample for a labelled item. Its
quality follows the proxy's accuracy (bench/label_errors.py measures precision and recall per set with
5 % of the labels flipped at random).

The scan loads the encoder, so it runs in a worker (``annotate.label_error_scan``, default queue): a
LabelErrorScan row records who asked, its step, its counts and how it ended, and the page polls it. One
scan at a time per project (a unique constraint on the active rows: a second request gets the one that
runs); claimed like a shard (annotate/services/jobs.py): a worker killed mid-scan leaves it running on
a dead process, the redelivered message or the next worker start takes it over, and a scan that killed
MAX_ATTEMPTS workers fails with the reason instead of running for ever."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.utils import timezone

from annotate import steppoints
from annotate.models import Item, Label, LabelErrorScan, LabelSuspect, Project
from annotate.selectors import loop as loop_sel
from annotate.services import jobs, proxy
from annotate.services.review import adjudicate
from annotate.services.workers import worker_id
from predictor.label_errors import DEFAULT_FOLDS, DEFAULT_MIN_RATIO, find_label_errors, out_of_fold_proba

# Below this many labelled items a fold's proxy trains on too few labels per class to contradict anyone.
MIN_LABELS = 50
METHOD = f"embedding proxy, out of fold ({DEFAULT_FOLDS} folds); confident learning"
SCAN_TASK = "annotate.label_error_scan"
Scan = LabelErrorScan
Step = LabelErrorScan.Step


class LabelErrorError(ValueError):
    pass


# -- the scan as a job -------------------------------------------------------------------------------


def label_error_scan_request(*, project: Project, user: Any = None) -> tuple[LabelErrorScan, bool]:
    """Ask for a scan; a worker runs it once this commits. While one is pending or running, that one is
    returned instead (second element False): two clicks never run two scans."""
    active = Scan.objects.filter(project=project, status__in=[Scan.Status.PENDING, Scan.Status.RUNNING])
    if (running := active.first()) is not None:
        return running, False
    try:
        with transaction.atomic():
            scan = Scan.objects.create(project=project, requested_by=user, sent_at=timezone.now())
    except IntegrityError:  # a request in another process won the race: show that one
        return active.get(), False
    from annotate.services.queue import send_on_commit

    send_on_commit(SCAN_TASK, scan.id)
    return scan, True


def label_error_scan_run(*, scan_id: int) -> LabelErrorScan:
    """Task body: claim the scan (a done or failed one, or one a live worker holds, is left alone), run
    it, record its counts; any error ends it failed with the message."""
    me = worker_id()
    rows = Scan.objects.filter(id=scan_id, status__in=[Scan.Status.PENDING, Scan.Status.RUNNING])
    if not jobs.claim(rows, me=me):
        return Scan.objects.get(id=scan_id)
    scan = Scan.objects.select_related("project").get(id=scan_id)
    if scan.attempts > jobs.MAX_ATTEMPTS:  # it keeps killing its workers: stop, say so
        label_error_scan_fail(scan_id=scan.id, reason=f"{scan.attempts - 1} workers died during this scan")
        return Scan.objects.get(id=scan.id)
    Scan.objects.filter(id=scan.id, started_at__isnull=True).update(started_at=timezone.now())
    try:
        added = label_error_scan(project=scan.project, scan=scan)
    except (OperationalError, InterfaceError, ConnectionError):
        raise  # transient: the task retries (this process takes its own claim over); its last try fails it
    except LabelErrorError as exc:  # refused (too few labels): the page says why
        label_error_scan_fail(scan_id=scan.id, reason=str(exc))
        return Scan.objects.get(id=scan.id)
    except Exception as exc:
        label_error_scan_fail(scan_id=scan.id, reason=f"{type(exc).__name__}: {exc}")
        raise
    Scan.objects.filter(id=scan.id, worker=me, status=Scan.Status.RUNNING).update(
        status=Scan.Status.DONE, suspects_added=len(added), finished_at=timezone.now(), error=""
    )
    return Scan.objects.get(id=scan.id)


def label_error_scan_fail(*, scan_id: int, reason: str) -> None:
    jobs.end(
        Scan.objects.filter(id=scan_id),
        status=Scan.Status.FAILED,
        open_statuses=(Scan.Status.PENDING, Scan.Status.RUNNING),
        error=reason[: jobs.MAX_ERROR],
        finished_at=timezone.now(),
    )


def label_error_scans_resume_all(*, since: datetime | None = None) -> int:
    """Worker start (the job engine's resume, annotate/services/jobs.py): send again every scan running
    on a dead process, and every pending one whose message may be lost; each once, however many
    workers start at once (the claim lets one worker in, so a duplicate message is harmless anyway)."""
    from annotate.services.queue import send_on_commit

    rows = Scan.objects.filter(status__in=[Scan.Status.PENDING, Scan.Status.RUNNING])
    ids = [
        scan_id
        for scan_id in rows.values_list("id", flat=True)
        if jobs.requeue_dead(rows.filter(id=scan_id), to=Scan.Status.PENDING)
        or jobs.resend_due(rows.filter(id=scan_id), waiting=(Scan.Status.PENDING,), since=since)
    ]
    for scan_id in ids:
        send_on_commit(SCAN_TASK, scan_id)
    return len(ids)


def _step(scan: LabelErrorScan | None, step: int, **counts: int) -> None:
    if scan is not None:
        Scan.objects.filter(id=scan.id).update(step=step, **counts)
        if step == Step.JUDGING:  # embedded, nothing written: a kill here must resume
            steppoints.reached("label_error_scan", scan.id)


# -- the scan itself ---------------------------------------------------------------------------------


def label_error_scan(
    *, project: Project, min_ratio: float = DEFAULT_MIN_RATIO, seed: int = 0, scan: LabelErrorScan | None = None
) -> list[LabelSuspect]:
    """Judge every labelled pool item's final label; queue the new suspects (open). A label already
    judged (open, kept or relabelled) is not queued again. Returns the suspects this scan added; ``scan``
    (the worker's row) gets its step and counts as it goes."""
    if min_ratio < 1.0:
        raise LabelErrorError(f"the ratio must be at least 1, got {min_ratio}")
    _step(scan, Step.READING)
    labeled = loop_sel.labeled_items(project=project)
    if len(labeled.item_ids) < MIN_LABELS:
        raise LabelErrorError(
            f"a scan needs at least {MIN_LABELS} labelled items, this project has {len(labeled.item_ids)}"
        )
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    y = np.asarray(labeled.label_indices, dtype=np.int64)
    _step(scan, Step.EMBEDDING, labels_seen=len(y))
    emb = proxy.embeddings(labeled.texts, labeled.hashes)
    _step(scan, Step.JUDGING)
    probs = out_of_fold_proba(emb, y, len(labels), rng=np.random.default_rng(seed))
    found = find_label_errors(probs, y, min_ratio=min_ratio)
    _step(scan, Step.QUEUEING, suspects_found=len(found.index))
    added = []
    with transaction.atomic():
        for row, given, suggested, p_given, p_suggested in zip(
            found.index, found.given, found.suggested, found.p_given, found.p_suggested, strict=True
        ):
            suspect, created = LabelSuspect.objects.get_or_create(
                item_id=labeled.item_ids[int(row)],
                given=labels[int(given)],
                defaults={
                    "project": project,
                    "suggested": labels[int(suggested)],
                    "p_given": float(p_given),
                    "p_suggested": float(p_suggested),
                    "method": METHOD,
                    "labels_seen": len(y),
                },
            )
            if created:
                added.append(suspect)
    return added


@transaction.atomic
def label_suspect_decide(*, suspect: LabelSuspect, lead: Any, label: Label | None, note: str = "") -> LabelSuspect:
    """The lead's word on a suspect: ``label`` None or the human label keeps it; another label is the
    lead's decision on the item (annotate.services.review.adjudicate: history kept, undoable)."""
    suspect = LabelSuspect.objects.select_for_update().select_related("item", "given").get(pk=suspect.pk)
    if suspect.decision != LabelSuspect.Decision.OPEN:
        raise LabelErrorError(f"this suspect was already decided ({suspect.decision})")
    item = Item.objects.get(pk=suspect.item_id)
    if item.final_label_id != suspect.given_id:
        raise LabelErrorError(
            f"the item's label changed since the scan (it was {suspect.given.name!r}): nothing to decide here"
        )
    if label is not None and label.project_id != suspect.project_id:
        raise LabelErrorError(f"label {label.name!r} belongs to another project")
    if label is None or label.pk == suspect.given_id:
        suspect.decision = LabelSuspect.Decision.KEPT
    else:
        reason = note or f"possible label error: {suspect.given.name} → {label.name}"
        adjudicate(item=item, label=label, lead=lead, note=reason)
        suspect.decision = LabelSuspect.Decision.RELABELLED
    suspect.decided_by = lead
    suspect.decided_at = timezone.now()
    suspect.save(update_fields=["decision", "decided_by", "decided_at"])
    return suspect
