"""Lead side: the three queues hold exactly the right items, adjudication is an idempotent upsert,
and the agreement dashboard's numbers match kappas computed by hand."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import Adjudication, Annotation, Item, Label, Project, Skip
from annotate.selectors import agreement
from annotate.selectors.review import disagreements, review_bucket, skipped_items
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create
from annotate.services.review import ReviewError, adjudicate, item_return_to_pool

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def project() -> Project:
    labels = [LabelInput("sports", "S"), LabelInput("politics", "P"), LabelInput("science", "X")]
    return project_create(name="topics", labels=labels)


@pytest.fixture
def people() -> dict[str, Any]:
    names = {"alice": "annotator", "bob": "annotator", "carol": "annotator", "lena": "lead", "leo": "lead"}
    return {name: user_create(username=name, password="pw-12345678", roles=[role]) for name, role in names.items()}


def label(project: Project, name: str) -> Label:
    return project.labels.get(name=name)


def item(project: Project, ext: str, **fields: Any) -> Item:
    return Item.objects.create(project=project, external_id=ext, text=f"text {ext}", text_hash=ext, **fields)


def annotate_(it: Item, user: Any, name: str, seconds: float | None = None) -> Annotation:
    return Annotation.objects.create(item=it, annotator=user, label=label(it.project, name), seconds_spent=seconds)


def ids(qs: Any) -> set[str]:
    return {i.external_id for i in qs}


def test_queues_contain_exactly_the_right_items(project: Project, people: dict[str, Any]) -> None:
    alice, bob = people["alice"], people["bob"]
    agreed = item(project, "agreed", required_labels=2, final_label=label(project, "sports"))
    annotate_(agreed, alice, "sports"), annotate_(agreed, bob, "sports")
    split = item(project, "split", required_labels=2)
    annotate_(split, alice, "sports"), annotate_(split, bob, "politics")
    waiting = item(project, "waiting", required_labels=2)
    annotate_(waiting, alice, "sports")
    same_open = item(project, "same-open", required_labels=2)  # agree but not finalised: not a disagreement
    annotate_(same_open, alice, "science"), annotate_(same_open, bob, "science")
    out = item(project, "out", required_labels=2, state=Item.State.UNLABELABLE)
    annotate_(out, alice, "sports"), annotate_(out, bob, "politics")
    item(project, "low-mass", state=Item.State.REVIEW, review_reason="label mass 0.01 < 0.05")
    skipped = item(project, "skipped")
    Skip.objects.create(item=skipped, annotator=alice, reason="two topics")
    Skip.objects.create(item=skipped, annotator=bob)
    resolved = item(project, "resolved")
    Skip.objects.create(item=resolved, annotator=alice, resolved=True)
    other = project_create(name="other", labels=[LabelInput("sports", "S")])
    Item.objects.create(project=other, external_id="elsewhere", text="x", text_hash="e", state=Item.State.REVIEW)

    assert ids(disagreements(project=project)) == {"split"}
    assert ids(review_bucket(project=project)) == {"low-mass"}
    assert ids(skipped_items(project=project)) == {"skipped"}
    assert skipped_items(project=project).get().open_skips == 2  # type: ignore[attr-defined]  # annotated count


def test_adjudication_sets_final_label_records_the_lead_and_is_idempotent(
    project: Project, people: dict[str, Any]
) -> None:
    split = item(project, "split", required_labels=2)
    annotate_(split, people["alice"], "sports"), annotate_(split, people["bob"], "politics")
    Skip.objects.create(item=split, annotator=people["carol"])
    for _ in range(2):
        adjudicate(item=split, label=label(project, "politics"), lead=people["lena"], note="about elections")
    split.refresh_from_db()
    assert split.final_label == label(project, "politics") and split.finalized_at is not None
    decision = Adjudication.objects.get(item=split)
    assert (decision.decided_by, decision.note) == (people["lena"], "about elections")
    assert Adjudication.objects.count() == 1
    assert not Skip.objects.filter(item=split, resolved=False).exists()
    assert ids(disagreements(project=project)) == set()
    # A second lead changes the decision: the row is updated, not duplicated.
    adjudicate(item=split, label=label(project, "sports"), lead=people["leo"])
    assert Adjudication.objects.count() == 1
    assert Adjudication.objects.get(item=split).decided_by == people["leo"]


def test_unlabelable_takes_the_item_out_of_the_loop(project: Project, people: dict[str, Any]) -> None:
    skipped = item(project, "gibberish")
    Skip.objects.create(item=skipped, annotator=people["alice"], reason="not English")
    adjudicate(item=skipped, label=None, lead=people["lena"])
    skipped.refresh_from_db()
    assert skipped.state == Item.State.UNLABELABLE and skipped.final_label is None
    assert Adjudication.objects.get(item=skipped).label is None
    assert ids(skipped_items(project=project)) == set()


def test_adjudication_refuses_a_label_of_another_project(project: Project, people: dict[str, Any]) -> None:
    other = project_create(name="other", labels=[LabelInput("spam", "S")])
    with pytest.raises(ReviewError, match="another project"):
        adjudicate(item=item(project, "1"), label=other.labels.get(), lead=people["lena"])
    assert not Adjudication.objects.exists()


def test_return_to_pool_empties_the_review_bucket(project: Project, people: dict[str, Any]) -> None:
    low = item(project, "low", state=Item.State.REVIEW, review_reason="label mass 0.01")
    item_return_to_pool(item=low, lead=people["lena"])
    low.refresh_from_db()
    assert (low.state, low.review_reason) == (Item.State.POOL, "")
    assert ids(review_bucket(project=project)) == set()
    decided = item(project, "decided", final_label=label(project, "sports"))
    with pytest.raises(ReviewError, match="already has a final label"):
        item_return_to_pool(item=decided, lead=people["lena"])


def test_lead_adjudicates_through_the_page_with_htmx_and_without(project: Project, people: dict[str, Any]) -> None:
    split = item(project, "split", required_labels=2)
    annotate_(split, people["alice"], "sports"), annotate_(split, people["bob"], "politics")
    client = Client()
    client.force_login(people["lena"])
    page = client.get(reverse("lead_queue", args=[project.pk, "disagreements"])).content.decode()
    assert "split" in page and "alice" in page and "politics" in page
    url = reverse("lead_adjudicate", args=[project.pk, split.pk])
    science = label(project, "science")
    row = client.post(url, {"decision": science.pk, "queue": "disagreements"}, headers={"HX-Request": "true"})
    assert row.status_code == 200
    assert f'id="item-{split.pk}"' in row.content.decode() and "Decided: science by lena" in row.content.decode()
    assert "<html" not in row.content.decode()  # the row partial only
    response = client.post(url, {"decision": "unlabelable", "queue": "disagreements"})
    assert response.status_code == 302
    split.refresh_from_db()
    assert split.state == Item.State.UNLABELABLE
    bad = client.post(url, {"decision": "", "queue": "disagreements"}, headers={"HX-Request": "true"})
    assert "This field is required" in bad.content.decode()


# ---- agreement -----------------------------------------------------------------------------------

# Three annotators on five items (label 0 = sports, 1 = politics):
#            i1  i2  i3  i4  i5
#   alice     0   1   0   1   0
#   bob       0   1   0   0   1
#   carol     0   1   1   1   -
VOTES = {"i1": (0, 0, 0), "i2": (1, 1, 1), "i3": (0, 0, 1), "i4": (1, 0, 1), "i5": (0, 1, None)}
SECONDS = {"alice": [10, 20, 30, 40, None]}


@pytest.fixture
def rated(project: Project, people: dict[str, Any]) -> Project:
    names = ["sports", "politics"]
    for n, (ext, votes) in enumerate(VOTES.items()):
        it = item(project, ext, required_labels=3)
        for who, vote in zip(("alice", "bob", "carol"), votes, strict=True):
            if vote is not None:
                annotate_(it, people[who], names[vote], SECONDS.get(who, [5.0] * 5)[n])
    return project


def test_cohen_kappa_per_pair_matches_hand_computation(rated: Project, people: dict[str, Any]) -> None:
    pairs = {(p.a.username, p.b.username): p for p in agreement.agreement_summary(project=rated).pairs}
    # alice/bob on i1..i5: agree on 3 of 5, po = 0.6; marginals (0.6, 0.4) for both, pe = 0.52.
    ab = pairs[("alice", "bob")]
    assert ab.n_items == 5 and ab.observed == pytest.approx(0.6)
    assert ab.kappa == pytest.approx((0.6 - 0.52) / (1 - 0.52))  # = 1/6
    # alice/carol on i1..i4: agree on 3 of 4, po = 0.75; alice (0.5, 0.5), carol (0.25, 0.75), pe = 0.5.
    ac = pairs[("alice", "carol")]
    assert ac.n_items == 4 and ac.kappa == pytest.approx(0.5)


def test_fleiss_kappa_uses_the_items_with_the_common_rater_count(rated: Project) -> None:
    summary = agreement.agreement_summary(project=rated)
    # i1..i4 have 3 raters: counts [3,0], [0,3], [2,1], [1,2]. P_i = 1, 1, 1/3, 1/3 -> P = 2/3;
    # class shares 6/12 each -> Pe = 1/2; kappa = (2/3 - 1/2) / (1/2) = 1/3.
    assert (summary.fleiss_items, summary.fleiss_raters, summary.multi_rated_items) == (4, 3, 5)
    assert summary.fleiss == pytest.approx(1 / 3)
    # Specific agreement for sports: sum n(n-1) = 6+2+0+0 = 8 over sum n(r-1) = 6+4+2+1 = 13.
    per_class = {c.label: c for c in summary.per_class}
    assert per_class["sports"].specific == pytest.approx(8 / 13)
    assert per_class["science"].specific is None and per_class["science"].n_ratings == 0


def test_pair_confusion(rated: Project, people: dict[str, Any]) -> None:
    pair = agreement.pair_confusion(project=rated, a_id=people["alice"].pk, b_id=people["bob"].pk)
    assert pair is not None and pair.n_items == 5
    # rows alice, columns bob: (0,0) x2, (1,1), (1,0), (0,1)
    assert pair.matrix == [[2, 1, 0], [1, 1, 0], [0, 0, 0]]


def test_agreement_page_shows_the_numbers_and_the_chosen_pair(rated: Project, people: dict[str, Any]) -> None:
    client = Client()
    client.force_login(people["lena"])
    url = reverse("lead_agreement", args=[rated.pk])
    page = client.get(url).content.decode()
    assert "0.333" in page and "0.167" in page
    partial = client.get(
        url, {"a": people["bob"].pk, "b": people["carol"].pk, "partial": "confusion"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert partial.lstrip().startswith('<div id="confusion">') and "bob (rows) vs carol (columns)" in partial


def test_low_mass_items_go_to_the_review_bucket_in_chunks_each_with_its_own_mass(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from annotate.services import selection

    monkeypatch.setattr(selection, "REVIEW_CHUNK", 2)  # five items: three UPDATEs
    items = [item(project, f"m{i}") for i in range(5)]
    items[3].final_label = label(project, "sports")  # labelled meanwhile: stays where it is
    items[3].save(update_fields=["final_label"])
    mass = {it.id: 0.01 * (i + 1) for i, it in enumerate(items)}
    moved = selection.review_bucket_move(item_ids=list(mass), mass=mass, threshold=0.05)
    assert moved == 4
    rows = {it.external_id: it for it in Item.objects.filter(project=project)}
    assert rows["m3"].state == Item.State.POOL and rows["m3"].review_reason == ""
    for i in (0, 1, 2, 4):
        assert rows[f"m{i}"].state == Item.State.REVIEW
        assert rows[f"m{i}"].review_reason == (
            f"label mass {0.01 * (i + 1):.3f} under 0.05: the model answers off the label set"
        )
    assert selection.review_bucket_move(item_ids=list(mass), mass=mass, threshold=0.05) == 0  # a replay moves none
