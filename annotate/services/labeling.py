"""Annotator writes: hand out items (leases), take labels and skips, revise the last label.

Concurrency. Handing out an item is a read-then-write (find an item with room, then lease it), so it
must be serialised per item:
- PostgreSQL: the first open item with room is locked in the query that finds it (``FOR UPDATE OF i
  SKIP LOCKED``: other annotators walk past it instead of waiting), then the room on it is re-counted
  in the statement that writes the lease (a new statement: READ COMMITTED sees leases committed since
  the first one began). The annotator's user row is locked first, so two requests of one annotator
  (double click, two tabs) cannot take two items. Submitting locks the item row (then the user row),
  so the submissions of one item are counted one at a time.
- SQLite: ``transaction_mode = IMMEDIATE`` (config/settings.py) takes the database write lock at
  BEGIN, so these transactions run one at a time; the locking clauses are left out there.
The unique constraints (one Lease and one Annotation per (item, annotator)) back both up.

The annotate page's hot request — store a label, answer the next item — is one transaction
(`label_submit_and_next`): one commit, about a dozen short statements, the hot ones in plain SQL
(the ORM versions cost more to build than to run).

Submitting is idempotent: the same label twice stores one row and returns it; a different label on an
already-labelled item is refused (`AlreadyLabelled`) unless ``revise=True`` — the undo path (`u`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.db import connection, transaction
from django.utils import timezone

from annotate.models import (
    Adjudication,
    Annotation,
    BatchItem,
    Item,
    ItemEvent,
    Label,
    Lease,
    Project,
    Round,
    Skip,
)
from annotate.services.batch_rows import batch_rows_done
from annotate.services.history import event_record
from annotate.services.notify import reviews_may_wait

Queue = Literal["batch", "test"]
QUEUES: tuple[Queue, ...] = ("batch", "test")
MAX_SECONDS_SPENT = 24 * 3600.0  # longer is a forgotten tab, not labelling time
_LOCK_ATTEMPTS = 16  # items tried per request: under load another annotator may fill the one locked meanwhile


class LabelingError(ValueError):
    """A submission that was refused; the message is shown to the annotator as is."""


class UnknownItem(LabelingError):
    pass


class UnknownLabel(LabelingError):
    pass


class AlreadyLabelled(LabelingError):
    pass


class NotLeased(LabelingError):
    pass


def _now(now: datetime | None) -> datetime:
    return now if now is not None else timezone.now()


_TABLES = {
    m.__name__.lower(): m._meta.db_table for m in (Item, BatchItem, Round, Annotation, Skip, Lease, Adjudication)
}
# Places used on an item, as others see it: its annotations plus the live leases of others.
_TAKEN_SQL = """(SELECT COUNT(*) FROM {annotation} a WHERE a.item_id = i.id)
  + (SELECT COUNT(*) FROM {lease} l WHERE l.item_id = i.id AND l.expires_at > %(now)s
     AND l.annotator_id <> %(user)s)""".format(**_TABLES)
# In the queue's pool, not finalised, not labelled or skipped by this annotator.
_OPEN_TO_ME_SQL = """i.final_label_id IS NULL AND i.state = %(pool)s AND i.is_test = %(is_test)s
  AND NOT EXISTS (SELECT 1 FROM {annotation} a WHERE a.item_id = i.id AND a.annotator_id = %(user)s)
  AND NOT EXISTS (SELECT 1 FROM {skip} s WHERE s.item_id = i.id AND s.annotator_id = %(user)s)""".format(**_TABLES)
# The n-th round in "labeling", oldest first: the batch queue is one round at a time.
_NTH_ROUND_SQL = """(SELECT r.id FROM {round} r WHERE r.project_id = %(project)s AND r.status = %(labeling)s
  ORDER BY r.number LIMIT 1 OFFSET %(nth)s)""".format(**_TABLES)
# Rows to walk in order (item_id, sort1, sort2), until the first whose item passes a check.
_QUEUE_ROWS = {
    "batch": f"SELECT b.item_id, b.rank AS sort1, b.item_id AS sort2 FROM {_TABLES['batchitem']} b "
    f"WHERE b.round_id = {_NTH_ROUND_SQL} AND NOT b.done",
    "test": f"SELECT i.id AS item_id, i.id AS sort1, 0 AS sort2 FROM {_TABLES['item']} i "
    "WHERE i.project_id = %(project)s AND i.is_test",
}
_QUEUE_ORDER = "sort1, sort2"
_MY_LEASES = f"SELECT l.item_id, l.created_at AS sort1, 0 AS sort2 FROM {_TABLES['lease']} l "
_MY_LEASES += "WHERE l.annotator_id = %(user)s AND l.expires_at > %(now)s AND NOT l.assigned"  # assigned: _ASSIGNED_SQL
_NEWEST_FIRST = "sort1 DESC"
# The walk runs in the rows' order and stops at the first item that passes, whatever the planner
# knows of the tables (a fresh import has no statistics yet): on PostgreSQL the item check is a
# LATERAL subquery, so it runs per row (and there locks the row: SKIP LOCKED walks past items that
# other requests hold); SQLite follows the ORDER BY's index by itself.
_WALK_SQL = {
    "postgresql": """SELECT o.* FROM ({rows} ORDER BY {order} OFFSET 0) q
CROSS JOIN LATERAL (SELECT {columns} FROM {item} i WHERE i.id = q.item_id AND {check} {lock}) o
ORDER BY {order} LIMIT 1""",
    "sqlite": """SELECT {columns} FROM ({rows}) q JOIN {item} i ON i.id = q.item_id WHERE {check}
ORDER BY {order} LIMIT 1""",
}
_IN_LABELING_BATCH = """AND EXISTS (SELECT 1 FROM {batchitem} b JOIN {round} r ON r.id = b.round_id
  WHERE b.item_id = i.id AND r.status = %(labeling)s)""".format(**_TABLES)


def _walk(*, rows: str, order: str, columns: str, check: str, lock: bool = False) -> str:
    template = _WALK_SQL["postgresql" if _postgres() else "sqlite"]
    locking = "FOR UPDATE SKIP LOCKED" if lock and _postgres() else ""
    return template.format(rows=rows, order=order, columns=columns, check=check, lock=locking, item=_TABLES["item"])


# PostgreSQL: re-count the room and write the lease in one new statement; let go of the annotator's
# other leases in the project only when this one is written. Answers the item row.
_TAKE_SQL = """WITH room AS (SELECT 1 FROM {item} i WHERE i.id = %(item)s AND {taken} < i.required_labels),
taken AS (
  INSERT INTO {lease} (item_id, annotator_id, created_at, expires_at, assigned)
  SELECT %(item)s, %(user)s, %(now)s, %(expires)s, FALSE FROM room
  ON CONFLICT (item_id, annotator_id) DO UPDATE SET created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
  RETURNING item_id),
released AS (
  DELETE FROM {lease} l USING {item} o
  WHERE l.item_id = o.id AND o.project_id = %(project)s AND l.annotator_id = %(user)s
    AND l.item_id <> %(item)s AND NOT l.assigned AND EXISTS (SELECT 1 FROM taken))
SELECT i.* FROM {item} i JOIN taken ON taken.item_id = i.id""".format(**_TABLES, taken=_TAKEN_SQL)


def _params(*, project: Project, annotator: Any, queue: Queue, now: datetime, **more: Any) -> dict[str, Any]:
    return {
        "project": project.pk,
        "user": annotator.pk,
        "pool": Item.State.POOL.value,
        "is_test": queue == "test",
        "labeling": Round.Status.LABELING.value,
        "now": connection.ops.adapt_datetimefield_value(now),
        **more,
    }


def _scalar(sql: str, params: dict[str, Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None


def _one_item(sql: str, params: dict[str, Any]) -> Item | None:
    return next(iter(Item.objects.raw(sql, params)), None)


def _postgres() -> bool:
    return connection.features.has_select_for_update_skip_locked


def _first_open(*, params: dict[str, Any], queue: Queue, tried: list[int]) -> int | None:
    """The first item of the queue open to the annotator with room for them; on PostgreSQL locked
    (items other transactions hold are walked past), and none of `tried`."""
    check = f"{_OPEN_TO_ME_SQL} AND {_TAKEN_SQL} < i.required_labels"
    if tried:
        params = {**params, **{f"tried{n}": item_id for n, item_id in enumerate(tried)}}
        check += f" AND i.id NOT IN ({', '.join(f'%(tried{n})s' for n in range(len(tried)))})"
    sql = _walk(rows=_QUEUE_ROWS[queue], order=_QUEUE_ORDER, columns="i.id", check=check, lock=True)
    return _scalar(sql, params)


def _more_labeling_rounds(*, project: Project, after: int) -> bool:
    return Round.objects.filter(project=project, status=Round.Status.LABELING).count() > after + 1


def _take(*, item_id: int, project: Project, annotator: Any, params: dict[str, Any], now: datetime) -> Item | None:
    """Lease the item to the annotator if it still has room, letting go of their other leases in the
    project (one live lease per annotator per project). None when someone filled it meanwhile."""
    expires = now + timedelta(seconds=project.lease_seconds)
    if _postgres():
        return _one_item(
            _TAKE_SQL, {**params, "item": item_id, "expires": connection.ops.adapt_datetimefield_value(expires)}
        )
    if not _room_left(item_id=item_id, annotator=annotator, now=now):
        return None
    Lease.objects.filter(annotator=annotator, item__project=project, assigned=False).delete()
    Lease.objects.create(item_id=item_id, annotator=annotator, created_at=now, expires_at=expires)
    return Item.objects.get(pk=item_id)


def _room_left(*, item_id: int, annotator: Any, now: datetime) -> bool:
    sql = f"SELECT {_TAKEN_SQL} < i.required_labels FROM {_TABLES['item']} i WHERE i.id = %(id)s"
    params = {"id": item_id, "user": annotator.pk, "now": connection.ops.adapt_datetimefield_value(now)}
    return bool(_scalar(sql, params))


def _lock_user(annotator: Any) -> None:
    if connection.features.has_select_for_update:
        _scalar(f"SELECT id FROM {annotator._meta.db_table} WHERE id = %(user)s FOR UPDATE", {"user": annotator.pk})


def _require_test_overlap(project: Project) -> None:
    """Test items are double-labelled where overlap is on (agreement on the test set is reported)."""
    if project.overlap_share > 0 and project.overlap_annotators > 1:
        Item.objects.filter(
            project=project, is_test=True, final_label__isnull=True, required_labels__lt=project.overlap_annotators
        ).update(required_labels=project.overlap_annotators)


def _held_item(*, params: dict[str, Any], queue: Queue) -> Item | None:
    """The item of the annotator's live lease in the project, if it is still open to them in `queue`."""
    check = f"i.project_id = %(project)s AND {_OPEN_TO_ME_SQL} {_IN_LABELING_BATCH if queue == 'batch' else ''}"
    return _one_item(_walk(rows=_MY_LEASES, order=_NEWEST_FIRST, columns="i.*", check=check), params)


# Items a lead assigned to the annotator (annotate/services/bulk.py), still open to them in the
# queue (test items in the test queue), oldest assignment first; in or out of a labelling batch.
_ASSIGNED_SQL = """SELECT i.* FROM {lease} l JOIN {item} i ON i.id = l.item_id
WHERE l.annotator_id = %(user)s AND l.assigned AND i.project_id = %(project)s AND {open_to_me}
ORDER BY l.created_at, l.item_id LIMIT 1""".format(**_TABLES, open_to_me=_OPEN_TO_ME_SQL)


def _claim(*, project: Project, annotator: Any, queue: Queue, now: datetime, may_hold: bool = True) -> Item | None:
    """The item the annotator holds (unless `may_hold` is False: they hold no lease in the project),
    else the first item a lead assigned to them, else the first open one with room, leased to them.
    The caller holds the annotator's row lock."""
    params = _params(project=project, annotator=annotator, queue=queue, now=now, nth=0)
    held = _held_item(params=params, queue=queue) if may_hold else None
    if held is None:
        held = _one_item(_ASSIGNED_SQL, params)
    if held is not None:
        return held
    tried: list[int] = []
    while len(tried) < _LOCK_ATTEMPTS:
        item_id = _first_open(params=params, queue=queue, tried=tried)
        if item_id is None:
            if queue == "batch" and _more_labeling_rounds(project=project, after=params["nth"]):
                params["nth"] += 1  # this round has nothing left for them: the next labeling round
                continue
            return None
        # Re-counted in a new statement: the lock may be newer than the first query's snapshot.
        item = _take(item_id=item_id, project=project, annotator=annotator, params=params, now=now)
        if item is not None:
            return item
        tried.append(item_id)
    return None


def next_item_for(
    *, project: Project, annotator: Any, queue: Queue = "batch", now: datetime | None = None
) -> Item | None:
    """Lease the next item of `queue` to `annotator` and return it; None when nothing is left.

    Reload-safe: an annotator who holds a live lease in this queue gets the same item back. Batch
    queue: items of rounds in "labeling", oldest round and best rank first. Test queue: test-set
    items without a final label. Both skip items this annotator labelled or skipped, finalised items,
    items out of the pool (review, unlabelable) and items whose annotations + live leases already
    reach ``required_labels`` (1, or k distinct annotators for overlap items)."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")
    now = _now(now)
    with transaction.atomic():
        if queue == "test":
            _require_test_overlap(project)  # before the user lock: item locks come first everywhere
        _lock_user(annotator)
        return _claim(project=project, annotator=annotator, queue=queue, now=now)


def _check_label(*, project_id: int, label: Label) -> None:
    if label.project_id != project_id:
        raise UnknownLabel(f"unknown label {label.name!r}: it is not a label of this project")


def _lock_item(*, item_id: int, project_id: int, annotator: Any = None) -> Item:
    """The item, its row locked (with `annotator`: their user row too, for the next item's lease). A
    locked row is read in its newest committed version, so the item's own columns are current."""
    user = f"JOIN {annotator._meta.db_table} u ON u.id = %(user)s" if annotator is not None else ""
    lock = "FOR UPDATE" if connection.features.has_select_for_update else ""
    sql = f"SELECT i.* FROM {_TABLES['item']} i {user} WHERE i.id = %(item)s AND i.project_id = %(project)s {lock}"
    params = {"item": item_id, "project": project_id, "user": getattr(annotator, "pk", None)}
    item = _one_item(sql, params)
    if item is None:
        raise UnknownItem("unknown item: it is not in this project")
    return item


# What a submission checks, read in one statement after the item lock (so it sees every submission
# committed before ours): my annotation and lease, the labels so far, the room, the labelling round.
_SUBMIT_STATE_SQL = """SELECT
  (SELECT a.id FROM {annotation} a WHERE a.item_id = i.id AND a.annotator_id = %(user)s),
  (SELECT l.created_at FROM {lease} l WHERE l.item_id = i.id AND l.annotator_id = %(user)s),
  (SELECT COUNT(*) FROM {lease} l WHERE l.item_id = i.id AND l.annotator_id = %(user)s AND l.expires_at > %(now)s),
  (SELECT COUNT(*) FROM {annotation} a WHERE a.item_id = i.id),
  (SELECT MIN(a.label_id) FROM {annotation} a WHERE a.item_id = i.id),
  (SELECT MAX(a.label_id) FROM {annotation} a WHERE a.item_id = i.id),
  (SELECT COUNT(*) FROM {adjudication} d WHERE d.item_id = i.id),
  {taken} < i.required_labels,
  (SELECT b.round_id FROM {batchitem} b JOIN {round} r ON r.id = b.round_id
    WHERE b.item_id = i.id AND r.status = %(labeling)s ORDER BY r.number DESC LIMIT 1)
FROM {item} i WHERE i.id = %(item)s""".format(**_TABLES, taken=_TAKEN_SQL)


@dataclass(frozen=True)
class _SubmitState:
    mine: int | None  # my annotation's id
    lease_created: datetime | None  # my lease on the item, live or not
    lease_live: bool
    labels: int  # annotations on the item, mine included
    lowest_label: int | None  # the smallest and largest label id among them: equal when they agree
    highest_label: int | None
    adjudicated: bool
    room: bool  # annotations + others' live leases < required_labels
    labeling_round: int | None  # the newest round in "labeling" whose batch holds the item


def _submit_state(*, item: Item, annotator: Any, now: datetime) -> _SubmitState:
    params = {
        "item": item.pk,
        "user": annotator.pk,
        "now": connection.ops.adapt_datetimefield_value(now),
        "labeling": Round.Status.LABELING.value,
    }
    with connection.cursor() as cursor:
        cursor.execute(_SUBMIT_STATE_SQL, params)
        mine, created, live, n, lowest, highest, adjudicated, room, labeling_round = cursor.fetchone()
    return _SubmitState(
        mine, _aware(created), bool(live), n, lowest, highest, bool(adjudicated), bool(room), labeling_round
    )


def _aware(value: datetime | str | None) -> datetime | None:
    """A timestamp read by plain SQL: PostgreSQL answers aware datetimes, SQLite naive UTC ones (or text)."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _check_may_label(state: _SubmitState, item: Item) -> None:
    """The annotator holds a live lease; or holds an expired one while the item still has room (nobody
    else took the place meanwhile). Test items too: the test queue leases them like the batch, so
    nobody labels (and so decides) a test item by posting its id."""
    if state.lease_live:
        return
    if state.lease_created is None:
        raise NotLeased("this item is not assigned to you; take the next item")
    if item.final_label_id is not None or not state.room:
        raise NotLeased("your time on this item ran out and it went to someone else; take the next item")


def _seconds(seconds_spent: float | None, lease_created: datetime | None, now: datetime) -> float | None:
    if seconds_spent is None and lease_created is not None:
        seconds_spent = (now - lease_created).total_seconds()
    if seconds_spent is None:
        return None
    return min(max(float(seconds_spent), 0.0), MAX_SECONDS_SPENT)


def _finalise(
    *, item: Item, labels: int, lowest: int | None, highest: int | None, adjudicated: bool, now: datetime
) -> None:
    """All `required_labels` annotations agree: that is the final label. They disagree: no final label
    (a disagreement for leads). A lead's adjudication is never overwritten."""
    final = lowest if labels >= item.required_labels and lowest == highest else None
    if adjudicated or final == item.final_label_id:
        return
    item.final_label_id = final
    item.finalized_at = now if final is not None else None
    Item.objects.filter(pk=item.pk).update(final_label_id=final, finalized_at=item.finalized_at)
    batch_rows_done(item_id=item.pk, done=final is not None)


def _submit(
    *,
    item: Item,
    annotator: Any,
    label: Label,
    round_id: int | None,
    seconds_spent: float | None,
    revise: bool,
    auto_retrain: bool,
    now: datetime,
) -> tuple[Annotation, bool]:
    """label_submit's work, on an item the caller has locked. Also answers whether it released the
    annotator's lease on the item."""
    state = _submit_state(item=item, annotator=annotator, now=now)
    if state.mine is not None:
        existing = Annotation.objects.select_related("label").get(pk=state.mine)
        return _resubmit(existing=existing, item=item, annotator=annotator, label=label, revise=revise, now=now), False
    if revise:
        raise LabelingError("there is no label of yours on this item to revise")
    _check_may_label(state, item)
    annotation = Annotation.objects.create(
        item=item,
        annotator=annotator,
        label=label,
        round_id=round_id if round_id is not None else state.labeling_round,
        seconds_spent=_seconds(seconds_spent, state.lease_created, now),
    )
    event_record(item_id=item.pk, kind=ItemEvent.Kind.LABEL, actor=annotator, label=label, now=now)
    if state.lease_created is not None:
        Lease.objects.filter(item=item, annotator=annotator).delete()
    lowest = min(state.lowest_label or label.pk, label.pk)
    highest = max(state.highest_label or label.pk, label.pk)
    _finalise(
        item=item, labels=state.labels + 1, lowest=lowest, highest=highest, adjudicated=state.adjudicated, now=now
    )
    if annotation.round_id is not None and auto_retrain:
        _after_label(annotation.round_id)
    return annotation, state.lease_created is not None


def label_submit(
    *,
    item: Item,
    annotator: Any,
    label: Label,
    round: Round | None = None,
    seconds_spent: float | None = None,
    revise: bool = False,
    now: datetime | None = None,
) -> Annotation:
    """Store `annotator`'s label for `item` and release the lease. Idempotent: a repeat with the same
    label returns the stored row. A different label on a labelled item needs ``revise=True`` (undo),
    which updates the same row and counts a revision; otherwise `AlreadyLabelled`. Raises
    `UnknownLabel` (label of another project) and `NotLeased` (item not handed to this annotator);
    nothing is written when it raises."""
    now = _now(now)
    _check_label(project_id=item.project_id, label=label)
    with transaction.atomic():
        locked = _lock_item(item_id=item.pk, project_id=item.project_id)  # serialises the item's submissions
        annotation, _ = _submit(
            item=locked,
            annotator=annotator,
            label=label,
            round_id=round.pk if round is not None else None,
            seconds_spent=seconds_spent,
            revise=revise,
            auto_retrain=True,
            now=now,
        )
        reviews_may_wait(item.project)
        return annotation


def label_submit_and_next(
    *,
    project: Project,
    annotator: Any,
    item_id: int,
    label: Label,
    queue: Queue = "batch",
    seconds_spent: float | None = None,
    revise: bool = False,
    now: datetime | None = None,
) -> tuple[Annotation, Item | None]:
    """`label_submit` then `next_item_for`, in one transaction: the annotate page's hot request.
    Raises `UnknownItem` for an item of another project, and what label_submit raises."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")
    _check_label(project_id=project.pk, label=label)
    now = _now(now)
    with transaction.atomic():
        if queue == "test":
            _require_test_overlap(project)
        item = _lock_item(item_id=item_id, project_id=project.pk, annotator=annotator)
        annotation, released = _submit(
            item=item,
            annotator=annotator,
            label=label,
            round_id=None,
            seconds_spent=seconds_spent,
            revise=revise,
            auto_retrain=project.auto_retrain_share > 0,  # the hook reads the round only to find it off
            now=now,
        )
        reviews_may_wait(project)
        # A label that used up the annotator's lease leaves them holding none (one lease per annotator
        # per project): no held item to look for. A repeat or a revision may leave them one.
        return annotation, _claim(project=project, annotator=annotator, queue=queue, now=now, may_hold=not released)


def _after_label(round_id: int) -> None:
    """Once the label commits, let the round start training when the project's auto-retrain share of
    its batch is labelled (a no-op when that setting is off)."""
    from annotate.services.rounds import maybe_auto_retrain

    transaction.on_commit(lambda: maybe_auto_retrain(round_id))


def _resubmit(
    *, existing: Annotation, item: Item, annotator: Any, label: Label, revise: bool, now: datetime
) -> Annotation:
    Lease.objects.filter(item=item, annotator=annotator).delete()
    if existing.label_id == label.pk:
        return existing
    if not revise:
        raise AlreadyLabelled(f"you already labelled this item {existing.label.name!r}; press u to revise")
    event_record(
        item_id=item.pk,
        kind=ItemEvent.Kind.REVISION,
        actor=annotator,
        label=label,
        previous_label=existing.label_id,
        now=now,
    )
    existing.label = label
    existing.revisions += 1
    existing.save(update_fields=["label", "revisions", "updated_at"])
    state = _submit_state(item=item, annotator=annotator, now=now)
    _finalise(
        item=item,
        labels=state.labels,
        lowest=state.lowest_label,
        highest=state.highest_label,
        adjudicated=state.adjudicated,
        now=now,
    )
    return existing


def skip_submit(*, item: Item, annotator: Any, reason: str = "") -> Skip:
    """Pass on an item: a Skip row (not a label; leads review skips), the lease is released and the
    item goes to other annotators. Like a label it needs the item's lease (live or expired: the
    annotator was shown it), so nobody can push arbitrary items into the leads' queue by id; raises
    `NotLeased` otherwise. Idempotent: one Skip per (item, annotator); a repeat keeps the first
    reason unless it was empty."""
    reason = reason.strip()[: Skip._meta.get_field("reason").max_length]
    with transaction.atomic():
        if Annotation.objects.filter(item=item, annotator=annotator).exists():
            raise AlreadyLabelled("you already labelled this item; press u to revise instead of skipping")
        leased = Lease.objects.filter(item=item, annotator=annotator).exists()
        if not leased and not Skip.objects.filter(item=item, annotator=annotator).exists():
            raise NotLeased("this item is not assigned to you; take the next item")
        skip, created = Skip.objects.get_or_create(item=item, annotator=annotator, defaults={"reason": reason})
        if created:
            event_record(item_id=item.pk, kind=ItemEvent.Kind.SKIP, actor=annotator, note=reason)
        if not created and reason and not skip.reason:
            skip.reason = reason
            skip.save(update_fields=["reason"])
        Lease.objects.filter(item=item, annotator=annotator).delete()
        reviews_may_wait(item.project)
        return skip


def label_undo(*, annotator: Any, project: Project, queue: Queue | None = None) -> Annotation | None:
    """The annotator's last submitted label in `project` (optionally only in `queue`), to be shown
    again and revised with ``label_submit(..., revise=True)``. Writes nothing."""
    annotations = Annotation.objects.filter(annotator=annotator, item__project=project)
    if queue is not None:
        annotations = annotations.filter(item__is_test=(queue == "test"))
    return annotations.select_related("item", "label").order_by("-created_at", "-id").first()


__all__ = [
    "QUEUES",
    "AlreadyLabelled",
    "LabelingError",
    "NotLeased",
    "UnknownItem",
    "Queue",
    "UnknownLabel",
    "label_submit",
    "label_submit_and_next",
    "batch_rows_done",
    "label_undo",
    "next_item_for",
    "skip_submit",
]
