"""Annotator reads: progress counts, label buttons with their keys, the model's suggestion, guidelines."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import markdown
import nh3
from django.conf import settings
from django.core.cache import cache
from django.db import connection, connections
from django.db.models import Count

from annotate.models import Annotation, BatchItem, Item, Label, Prediction, Project, Round
from annotate.selectors.progress import BatchStatus, batch_status, labeling_round

# Label keys: 1–9. A project with more labels shows its nine most used as keyed buttons and finds the
# others by typing (the label search, `/`): a wall of 200 buttons is neither scannable nor phone-sized.
SHORTCUT_KEYS = tuple("123456789")
_USAGE_TTL = 30  # seconds: the most-used buttons may lag this much; they should not reshuffle per item
_PROJECT_COUNTS_TTL = 10  # seconds: team bars may lag this much; recounting a large batch costs ~40 ms
_REFRESHING: set[str] = set()  # cache keys a background recount is running for (this process)
_REFRESHING_LOCK = threading.Lock()


@dataclass(frozen=True)
class Bar:
    done: int
    total: int

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


@dataclass(frozen=True)
class Progress:
    batch: Bar  # finished items of the labelling batch / batch size (annotate.selectors.progress)
    round: Bar  # labels given in the labelling batch / labels it needs (overlap items need k)
    overall: Bar  # pool items with a final label / pool size (test set excluded)
    test: Bar  # test-set items with a final label / test-set size
    mine: int  # this annotator's labels in the project
    mine_round: int  # ... in the round annotators are served from
    # Where that round's batch stands (None: no round labels): the lead and ML pages' numbers.
    batch_status: BatchStatus | None = None


@dataclass(frozen=True)
class LabelButton:
    label: Label
    key: str | None  # 1–9


@dataclass(frozen=True)
class LabelChoice:
    """The annotate page's labels: keyed buttons, and (more than nine labels) the rest for the search."""

    buttons: list[LabelButton]
    more: list[Label]


@lru_cache(maxsize=256)
def _labels(project_id: int, version: datetime) -> tuple[Label, ...]:
    return tuple(Label.objects.filter(project_id=project_id))


def project_labels(*, project: Project) -> tuple[Label, ...]:
    """The project's labels in button order, read once per process and project version (a label
    saved or deleted bumps ``project.updated_at``, see annotate/signals.py)."""
    return _labels(project.pk, project.updated_at)


def label_usage(*, project: Project) -> dict[int, int]:
    """label id → this project's labels (annotations) with it so far; cached a few seconds."""
    key = f"label-usage:{project.pk}"
    usage: dict[int, int] | None = cache.get(key)
    if usage is None:
        rows = Annotation.objects.filter(item__project=project).values("label_id").annotate(n=Count("id"))
        usage = {row["label_id"]: row["n"] for row in rows}
        cache.set(key, usage, _USAGE_TTL)
    return usage


def label_choice(*, project: Project) -> LabelChoice:
    """Up to nine labels: all of them as buttons with keys 1–9, in label order. More: the nine most
    used in this project (ties by label order) as keyed buttons, in label order so that a label's
    button does not jump around as counts change; the others, in label order, for the label search."""
    labels = project_labels(project=project)
    if len(labels) > len(SHORTCUT_KEYS):
        usage = label_usage(project=project)
        ranked = sorted(range(len(labels)), key=lambda i: (-usage.get(labels[i].pk, 0), i))
        top = set(ranked[: len(SHORTCUT_KEYS)])
        shown = [label for i, label in enumerate(labels) if i in top]
        more = [label for i, label in enumerate(labels) if i not in top]
    else:
        shown, more = list(labels), []
    return LabelChoice([LabelButton(label, key) for label, key in zip(shown, SHORTCUT_KEYS, strict=False)], more)


_TABLES = {m.__name__.lower(): m._meta.db_table for m in (Annotation, BatchItem, Item, Round)}
# The team's label counts of the current batch (labels given / needed) and the pool and test set
# (items with a final label), in one statement. The batch's item counts come from
# annotate.selectors.progress.batch_status, the selector the lead and ML pages read too.
_TEAM_COUNTS_SQL = """SELECT batch.*, pool.* FROM
(SELECT COALESCE(SUM(required_labels), 0) AS needed, COALESCE(SUM(n), 0) AS given
 FROM (SELECT i.required_labels, (SELECT COUNT(*) FROM {annotation} a WHERE a.item_id = i.id) AS n
   FROM {item} i WHERE i.id IN (SELECT b.item_id FROM {batchitem} b WHERE b.round_id = %(round)s)) batch_items) batch,
(SELECT COALESCE(SUM(CASE WHEN is_test THEN 0 ELSE 1 END), 0) AS pool,
   COALESCE(SUM(CASE WHEN NOT is_test AND final_label_id IS NOT NULL THEN 1 ELSE 0 END), 0) AS pool_final,
   COALESCE(SUM(CASE WHEN is_test THEN 1 ELSE 0 END), 0) AS test,
   COALESCE(SUM(CASE WHEN is_test AND final_label_id IS NOT NULL THEN 1 ELSE 0 END), 0) AS test_final
 FROM {item} WHERE project_id = %(project)s) pool""".format(**_TABLES)
# The round annotators are served from (the oldest in "labeling"), and the annotator's labels in the
# project, in that round, and of those the ones whose item is finished: each is a floor for a team
# count (a team count may lag, it may never read less than what this annotator alone has done).
_MINE_SQL = """WITH cur AS (SELECT r.id FROM {round} r WHERE r.project_id = %(project)s AND r.status = %(labeling)s
  ORDER BY r.number LIMIT 1)
SELECT (SELECT id FROM cur), COUNT(*),
  COALESCE(SUM(CASE WHEN a.round_id = (SELECT id FROM cur) THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN a.round_id = (SELECT id FROM cur) AND i.final_label_id IS NOT NULL THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN NOT i.is_test AND i.final_label_id IS NOT NULL THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN i.is_test AND i.final_label_id IS NOT NULL THEN 1 ELSE 0 END), 0)
FROM {annotation} a JOIN {item} i ON i.id = a.item_id
WHERE a.annotator_id = %(user)s AND i.project_id = %(project)s""".format(**_TABLES)
_TEAM_COUNTS = ("needed", "given", "pool", "pool_final", "test", "test_final")


@dataclass(frozen=True)
class TeamCounts:
    """What every annotator of the project shares: the current batch (None when no round labels) as
    ``batch_status`` counts it, its labels given / needed, and the pool's and test set's final labels."""

    round_id: int | None
    batch: BatchStatus | None
    counts: dict[str, int]


def _count_team(project_id: int, round_id: int | None) -> TeamCounts:
    current = Round.objects.filter(pk=round_id).first() if round_id is not None else None
    with connection.cursor() as cursor:
        cursor.execute(_TEAM_COUNTS_SQL, {"project": project_id, "round": round_id or 0})
        counts = {name: int(value) for name, value in zip(_TEAM_COUNTS, cursor.fetchone(), strict=True)}
    return TeamCounts(round_id, batch_status(round=current) if current is not None else None, counts)


def _counts_key(project: Project) -> str:
    return f"alann:progress:{project.pk}:{project.created_at.timestamp()}"


def _refresh_team_counts(key: str, project_id: int, round_id: int | None) -> None:
    """Recount in this thread and store; runs in a background thread with its own connection."""
    try:
        cache.set(key, (_count_team(project_id, round_id), time.time()), None)
    finally:
        with _REFRESHING_LOCK:
            _REFRESHING.discard(key)
        connections.close_all()  # this thread's connections only (they are per thread)


def _team_counts(project: Project, round_id: int | None) -> TeamCounts:
    """Shared by every annotator of the project and recounted at most every few seconds: a bar that
    lags by seconds is fine, recounting on every label is not. Stale-while-revalidate: once counted,
    a request never waits for the recount (~40 ms on a 10,000-item batch, which was the tail of the
    hot request's latency); a stale value is served while one background thread per process
    recounts. The first count of a batch is synchronous: counts of another round (or of no round)
    are never served, so a new round's first item never shows the last batch's counts
    (settings.PROGRESS_RECOUNT_IN_BACKGROUND False: always synchronous)."""
    key = _counts_key(project)
    entry: tuple[TeamCounts, float] | None = cache.get(key)
    if entry is not None and (not isinstance(entry[0], TeamCounts) or entry[0].round_id != round_id):
        entry = None  # another batch's counts (or an older format)
    if entry is not None and time.time() - entry[1] < _PROJECT_COUNTS_TTL:
        return entry[0]
    if entry is not None and getattr(settings, "PROGRESS_RECOUNT_IN_BACKGROUND", True):
        with _REFRESHING_LOCK:
            start = key not in _REFRESHING
            _REFRESHING.add(key)
        if start:
            threading.Thread(target=_refresh_team_counts, args=(key, project.pk, round_id), daemon=True).start()
        return entry[0]
    return _count_team_now(project, round_id)


def _floor(team_done: int, mine: int, total: int) -> Bar:
    """A team bar never below what the annotator alone has done (the team count may be seconds old)."""
    return Bar(min(max(team_done, mine), max(total, mine)), max(total, mine))


def progress_for(*, project: Project, annotator: Any, fresh: bool = False) -> Progress:
    """The team's counts (cached a few seconds; ``fresh``: recounted now) and the annotator's own
    (live). Each team bar is floored by the annotator's own finished work, so a label shows at once.
    The batch bar counts what ``batch_status`` counts for the round annotators are served from."""
    params = {"project": project.pk, "user": annotator.pk, "labeling": Round.Status.LABELING.value}
    with connection.cursor() as cursor:
        cursor.execute(_MINE_SQL, params)
        round_id, *mine_counts = cursor.fetchone()
    mine, mine_round, mine_complete, mine_pool_final, mine_test_final = (int(v) for v in mine_counts)
    team = _count_team_now(project, round_id) if fresh else _team_counts(project, round_id)
    counts, batch = team.counts, team.batch
    return Progress(
        batch=_floor(batch.finished if batch else 0, mine_complete, batch.size if batch else 0),
        round=_floor(counts["given"], mine_round, counts["needed"]),
        overall=_floor(counts["pool_final"], mine_pool_final, counts["pool"]),
        test=_floor(counts["test_final"], mine_test_final, counts["test"]),
        mine=mine,
        mine_round=mine_round,
        batch_status=batch,
    )


def _count_team_now(project: Project, round_id: int | None) -> TeamCounts:
    """Recount in the request and store (the annotate page's empty state: it must not contradict)."""
    team = _count_team(project.pk, round_id)
    cache.set(_counts_key(project), (team, time.time()), None)
    return team


def suggestion_for(*, item: Item, project: Project) -> Prediction | None:
    """The model's latest prediction, only where the project shows it (off by default: it biases
    annotators) and never on test-set items."""
    if item.is_test or not project.show_suggestion:
        return None
    return Prediction.objects.filter(item=item).select_related("label").order_by("-created_at", "-id").first()


def guidelines_html(*, project: Project) -> str:
    """The project's markdown guidelines as sanitised HTML (nh3 drops scripts, handlers, js: links)."""
    if not project.guidelines.strip():
        return ""
    return nh3.clean(markdown.markdown(project.guidelines, extensions=["tables", "fenced_code", "sane_lists"]))


def empty_queue_reason(*, project: Project, annotator: Any, queue: str) -> str:
    """Why the annotator's queue is empty, in one or two sentences that agree with the bars: which
    items are left, who they wait for, and what happens next."""
    if queue == "test":
        return _empty_test_reason(project=project, annotator=annotator)
    current = labeling_round(project_id=project.pk)
    if current is None:
        latest = Round.objects.filter(project=project).order_by("-number").first()
        if latest is None:
            return "No batch is open yet: ML staff start the first round, then its batch appears here."
        return (
            f"No batch is open: round {latest.number} is {latest.get_status_display().lower()}. "
            "The next batch appears here when ML staff start the next round."
        )
    batch = batch_status(round=current)
    if batch.complete:
        return f"Round {current.number}'s batch is done ({batch.finished} of {batch.size} items). Thank you!"
    parts = []
    if batch.need_labels:
        verb = "is" if batch.need_labels == 1 else "are"
        parts.append(f"{batch.need_labels} {verb} with other annotators or need a second annotator's label")
    if batch.waiting_for_lead:
        verb = "waits" if batch.waiting_for_lead == 1 else "wait"
        parts.append(f"{batch.waiting_for_lead} {verb} for a lead (skipped or disagreeing)")
    return (
        f"You have done everything open to you in round {current.number}: {batch.finished} of {batch.size} "
        f"batch items are done; {'; '.join(parts)}. Check again in a while."
    )


def test_labels_wanted(*, project: Project, annotator: Any) -> int:
    """How many more labelled test items the ML page needs before it shows a round's accuracy, when
    this annotator can give some (an open test item they have not labelled); 0 otherwise."""
    from annotate.selectors.rounds import test_set_status

    missing = test_set_status(project=project).missing
    if not missing:
        return 0
    open_items = Item.objects.filter(project=project, is_test=True, final_label__isnull=True)
    return missing if open_items.exclude(annotations__annotator=annotator).exists() else 0


def _empty_test_reason(*, project: Project, annotator: Any) -> str:
    open_items = Item.objects.filter(project=project, is_test=True, final_label__isnull=True)
    if not open_items.exists():
        return "Every test-set item has its labels."
    waiting = open_items.filter(annotations__annotator=annotator).count()
    if waiting:
        return (
            f"You have labelled every test-set item open to you; {waiting} of them wait for another "
            "annotator's label (test items are labelled twice where overlap is on)."
        )
    return "Every open test-set item is being labelled by someone else right now. Check again in a while."
