"""Issue 32, People: each annotator's accuracy against the leads' decisions and gold labels (with the
counts they rest on), how often a lead overruled them, their median seconds per label and their labels
per day, on the Agreement page's one People table."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate.models import Adjudication, Annotation, Item, Label
from annotate.selectors.people import people_stats
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_accuracy_overrule_rate_and_speed_per_annotator() -> None:
    project = project_create(name="people", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos, neg = Label.objects.filter(project=project).order_by("order")
    ann, bob, lead = (User.objects.create_user(n) for n in ("ann", "bob", "lead"))
    items = [
        Item.objects.create(project=project, external_id=f"i{n}", text=f"t{n}", text_hash=f"h{n}") for n in range(5)
    ]
    Item.objects.filter(id__in=[items[2].id, items[3].id]).update(gold_label=pos)
    start = timezone.now() - timedelta(hours=1)
    # ann: 2 s, 4 s, 6 s measured on the page; her 4th label has no measure: 3 s after her 3rd.
    for item, label, spent, at in [
        (items[0], pos, 2.0, 0),
        (items[1], pos, 4.0, 10),
        (items[2], pos, 6.0, 20),
        (items[3], neg, None, 23),
    ]:
        row = Annotation.objects.create(item=item, annotator=ann, label=label, seconds_spent=spent)
        Annotation.objects.filter(id=row.id).update(created_at=start + timedelta(seconds=at))
    Annotation.objects.create(item=items[0], annotator=bob, label=neg, seconds_spent=5.0)
    Annotation.objects.create(item=items[1], annotator=bob, label=pos, seconds_spent=7.0)
    Annotation.objects.create(item=items[4], annotator=lead, label=pos)
    Adjudication.objects.create(item=items[0], label=neg, decided_by=lead)  # ann wrong, bob right
    Adjudication.objects.create(item=items[1], label=None, decided_by=lead)  # unlabelable: both overruled
    Adjudication.objects.create(item=items[4], label=pos, decided_by=lead)  # the lead's own item: no evidence

    people = {p.rater.username: p for p in people_stats(project=project)}

    assert list(people) == ["ann", "bob", "lead"]
    a, b, lead_row = people["ann"], people["bob"], people["lead"]
    assert (a.n_labels, a.vs_adjudicated.n, a.vs_adjudicated.correct) == (4, 1, 0)
    assert (a.vs_gold.n, a.vs_gold.correct, a.vs_gold.rate) == (2, 1, 0.5)
    assert (a.overruled, a.overrule_rate) == (2, 0.5)
    assert (a.median_seconds, a.n_timed) == (3.5, 4)  # 2, 3, 4, 6
    assert (b.vs_adjudicated.n, b.vs_adjudicated.rate, b.overruled, b.vs_gold.rate) == (1, 1.0, 1, None)
    assert b.median_seconds == 6.0
    assert (lead_row.vs_adjudicated.n, lead_row.overruled, lead_row.overrule_rate) == (0, 0, 0.0)


def test_a_long_pause_is_not_labelling_time() -> None:
    project = project_create(name="pause", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos = Label.objects.filter(project=project).order_by("order")[0]
    ann = User.objects.create_user("ann")
    start = timezone.now() - timedelta(hours=2)
    for n, at in enumerate([0, 8, 3600]):  # the third label came after an hour's break
        item = Item.objects.create(project=project, external_id=f"i{n}", text=f"t{n}", text_hash=f"h{n}")
        row = Annotation.objects.create(item=item, annotator=ann, label=pos)
        Annotation.objects.filter(id=row.id).update(created_at=start + timedelta(seconds=at))
    (person,) = people_stats(project=project)
    assert (person.n_labels, person.n_timed, person.median_seconds) == (3, 1, 8.0)


def test_issue32_agreement_page_has_one_people_table_with_one_speed_and_labels_per_day() -> None:
    """The Throughput table repeated the People table (labels, a second median s / label): gone. The
    People table keeps its speed column and counts each annotator's labels per day."""
    project = project_create(name="per-day", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos = Label.objects.filter(project=project).order_by("order")[0]
    ann = User.objects.create_user("ann")
    lead = user_create(username="lead", password="pw-12345678", roles=["lead"])
    days = [datetime(2026, 12, 1, 9, tzinfo=UTC), datetime(2026, 12, 3, 9, tzinfo=UTC)]
    for n, at in enumerate([days[0], days[0] + timedelta(seconds=5), days[1]]):
        item = Item.objects.create(project=project, external_id=f"i{n}", text=f"t{n}", text_hash=f"h{n}")
        row = Annotation.objects.create(item=item, annotator=ann, label=pos, seconds_spent=4.0)
        Annotation.objects.filter(id=row.id).update(created_at=at)

    (person,) = people_stats(project=project)
    assert person.per_day == [(date(2026, 12, 1), 2), (date(2026, 12, 3), 1)]

    client = Client()
    client.force_login(lead)
    page = client.get(reverse("lead_agreement", args=[project.pk])).content.decode()
    assert 'id="throughput"' not in page and "Throughput" not in page and "Labels / hour" not in page
    people = page.split('id="people"')[1].split("</table>")[0]
    assert people.count("s / label</th>") == 1  # one speed column
    assert '<td class="per-day" data-label="Labels per day">2026-12-01: 2 · 2026-12-03: 1</td>' in people
