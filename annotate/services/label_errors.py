"""Possible label errors (issue 31): a scan judges every human label out of sample and queues the ones it
contradicts with confidence for a lead, with the evidence; only the lead's decision changes a label.

The judge is the embedding proxy fitted k times on the other folds (training/label_errors.py): the K
LoRA adapters train on every label, so no adapter of a round is out of sample for a labelled item. Its
quality follows the proxy's accuracy (bench/label_errors.py measures precision and recall per set with
5 % of the labels flipped at random)."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.db import transaction
from django.utils import timezone

from annotate.models import Item, Label, LabelSuspect, Project
from annotate.selectors import loop as loop_sel
from annotate.services import proxy
from annotate.services.review import adjudicate
from training.label_errors import DEFAULT_FOLDS, DEFAULT_MIN_RATIO, find_label_errors, out_of_fold_proba

# Below this many labelled items a fold's proxy trains on too few labels per class to contradict anyone.
MIN_LABELS = 50
METHOD = f"embedding proxy, out of fold ({DEFAULT_FOLDS} folds); confident learning"


class LabelErrorError(ValueError):
    pass


def label_error_scan(*, project: Project, min_ratio: float = DEFAULT_MIN_RATIO, seed: int = 0) -> list[LabelSuspect]:
    """Judge every labelled pool item's final label; queue the new suspects (open). A label already
    judged (open, kept or relabelled) is not queued again. Returns the suspects this scan added."""
    if min_ratio < 1.0:
        raise LabelErrorError(f"the ratio must be at least 1, got {min_ratio}")
    labeled = loop_sel.labeled_items(project=project)
    if len(labeled.item_ids) < MIN_LABELS:
        raise LabelErrorError(
            f"a scan needs at least {MIN_LABELS} labelled items, this project has {len(labeled.item_ids)}"
        )
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    y = np.asarray(labeled.label_indices, dtype=np.int64)
    emb = proxy.embeddings(labeled.texts, labeled.hashes)
    probs = out_of_fold_proba(emb, y, len(labels), rng=np.random.default_rng(seed))
    found = find_label_errors(probs, y, min_ratio=min_ratio)
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
