"""How each annotator does, for the lead's Agreement page: accuracy against the leads' decisions and
against gold labels (each with the number of labels it rests on), how often a lead overruled them,
and their speed.

- *Adjudicated*: their labels on items a lead decided (a label, not "unlabelable"), compared with the
  decision. A lead's decision on an item they labelled themselves is left out: it is no evidence.
- *Gold*: their labels on items with a gold label (an import's ``gold_label``).
- *Overruled*: their labels on items a lead decided otherwise (another label, or unlabelable), as a
  share of all their labels.
- *Speed*: the median seconds per label: the time from item shown to submit where the annotate page
  measured it, else the time since their previous label when under ``BREAK_S`` (longer is a break).
- *Per day*: how many labels they gave each calendar day (the site's time zone).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime

from django.utils import timezone

from annotate.models import Adjudication, Annotation, Item, Project
from annotate.selectors.agreement import Rater

BREAK_S = 600.0  # a gap this long between two labels is a pause, not time spent on the second one


@dataclass
class Accuracy:
    n: int = 0  # labels compared
    correct: int = 0

    @property
    def rate(self) -> float | None:
        return self.correct / self.n if self.n else None

    def add(self, same: bool) -> None:
        self.n += 1
        self.correct += int(same)


@dataclass
class PersonStats:
    rater: Rater
    n_labels: int = 0
    vs_adjudicated: Accuracy = field(default_factory=Accuracy)
    vs_gold: Accuracy = field(default_factory=Accuracy)
    overruled: int = 0
    seconds: list[float] = field(default_factory=list)
    days: Counter[date] = field(default_factory=Counter)

    @property
    def overrule_rate(self) -> float | None:
        return self.overruled / self.n_labels if self.n_labels else None

    @property
    def median_seconds(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def n_timed(self) -> int:
        return len(self.seconds)

    @property
    def per_day(self) -> list[tuple[date, int]]:
        return sorted(self.days.items())


def _label_seconds(spent: float | None, created: datetime, previous: datetime | None) -> float | None:
    if spent is not None and spent >= 0:
        return float(spent)
    if previous is None:
        return None
    gap = (created - previous).total_seconds()
    return gap if 0 <= gap < BREAK_S else None


def people_stats(*, project: Project) -> list[PersonStats]:
    """One row per annotator who labelled anything in the project, by username."""
    decisions = {
        item_id: (label_id, lead_id)
        for item_id, label_id, lead_id in Adjudication.objects.filter(item__project=project).values_list(
            "item_id", "label_id", "decided_by_id"
        )
    }
    gold = dict(Item.objects.filter(project=project, gold_label__isnull=False).values_list("id", "gold_label_id"))
    people: dict[int, PersonStats] = {}
    previous: dict[int, datetime] = {}
    rows = (
        Annotation.objects.filter(item__project=project)
        .order_by("annotator_id", "created_at", "id")
        .values_list("annotator_id", "annotator__username", "item_id", "label_id", "seconds_spent", "created_at")
    )
    for annotator_id, username, item_id, label_id, spent, created in rows.iterator(chunk_size=5000):
        person = people.setdefault(annotator_id, PersonStats(Rater(annotator_id, username)))
        person.n_labels += 1
        person.days[timezone.localdate(created)] += 1
        if (seconds := _label_seconds(spent, created, previous.get(annotator_id))) is not None:
            person.seconds.append(seconds)
        previous[annotator_id] = created
        decided, lead_id = decisions.get(item_id, (None, None))
        if lead_id is not None and lead_id != annotator_id:
            person.overruled += int(decided != label_id)
            if decided is not None:
                person.vs_adjudicated.add(decided == label_id)
        if item_id in gold:
            person.vs_gold.add(gold[item_id] == label_id)
    return sorted(people.values(), key=lambda p: p.rater.username)
