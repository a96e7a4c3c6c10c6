"""Items people must label outside the loop's selection — auto-labelling's cascade (the model was
unsure), its audit (a random share of what it accepted), the gold set and the calibration split — and
the round they are labelled in.

A project has at most one active round, and people label the batch of the round in labelling. So an
item for people joins the batch of the active round when that round is labelling; when no round is
active, a round is opened for it (``annotate.services.rounds.round_open_for_people``: pending →
selecting → labelling through the round transitions, strategy "autolabel", its configuration frozen
like any round's); while the active round is busy (planning, scoring, selecting, training,
evaluating) it waits as a WaitingItem and joins the next round that reaches labelling (``absorb``,
called by selection as it moves a round to labelling) or, once that round ends without labelling (a
final-model round), the round the flow opens for what waits. Nothing is ever put in a second active
round, and no item for people is dropped.

This module writes rows only; it imports no other service, so the selection step and the round flow
may both call it.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import Max

from annotate.models import BatchItem, Project, Round, WaitingItem


def add_to_batch(*, round: Round, item_ids: Sequence[int], source: str) -> int:
    """Append items to a round's batch after its last rank. Idempotent per (round, item): an item
    already in the batch keeps its row. Returns the rows asked for."""
    if not item_ids:
        return 0
    with transaction.atomic():
        start = (BatchItem.objects.filter(round=round).aggregate(r=Max("rank"))["r"] or 0) + 1
        rows = [BatchItem(round=round, item_id=int(i), source=source, rank=start + n) for n, i in enumerate(item_ids)]
        BatchItem.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
    return len(rows)


def hold(*, project: Project, item_ids: Sequence[int], source: str) -> int:
    """Keep items for the next round in labelling (the active round is busy). Idempotent per item."""
    WaitingItem.objects.bulk_create(
        [WaitingItem(project=project, item_id=int(i), source=source) for i in item_ids],
        ignore_conflicts=True,
        batch_size=2000,
    )
    return len(item_ids)


def waiting(*, project_id: int) -> bool:
    return WaitingItem.objects.filter(project_id=project_id).exists()


def absorb(*, round: Round) -> int:
    """Move every item waiting for people in the round's project into its batch (the round is about to
    be, or is, in labelling). Safe to repeat: rows already moved are gone, a batch row is unique."""
    with transaction.atomic():
        held = list(
            WaitingItem.objects.select_for_update()
            .filter(project_id=round.project_id)
            .order_by("id")
            .values_list("id", "item_id", "source")
        )
        for source in dict.fromkeys(s for _, _, s in held):
            add_to_batch(round=round, item_ids=[i for _, i, s in held if s == source], source=source)
        WaitingItem.objects.filter(id__in=[pk for pk, _, _ in held]).delete()
    return len(held)
