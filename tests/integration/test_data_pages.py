"""The data pages: the training export (text, final label, source, annotators, agreement, metadata;
labelled items only by default; columns and filters), the item browser (search, filters, history,
relabel, send to review) and team administration (add users, change roles)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate.models import Annotation, BatchItem, Item, ItemEvent, Prediction, Project, Round, Skip
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def data() -> dict[str, Any]:
    project = project_create(name="news", labels=[LabelInput("sports", "S"), LabelInput("politics", "P")])
    sports, politics = project.labels.get(name="sports"), project.labels.get(name="politics")
    alice = user_create(username="alice", password="pw-12345678", roles=["annotator"])
    bob = user_create(username="bob", password="pw-12345678", roles=["annotator"])
    lena = user_create(username="lena", password="pw-12345678", roles=["lead"])
    items = [
        Item.objects.create(
            project=project, external_id=f"n{i}", text=text, text_hash=f"h{i}", metadata={"lang": lang, "src": "=1+2"}
        )
        for i, (text, lang) in enumerate(
            [("The striker scored twice 😀", "en"), ("Parliament passed the budget", "en"), ("Le match nul", "fr")]
        )
    ]
    first = Round.objects.create(project=project, number=1, status="done")
    BatchItem.objects.create(round=first, item=items[0], source="random", rank=0)
    BatchItem.objects.create(round=first, item=items[1], source="active", rank=1)
    Annotation.objects.create(item=items[0], annotator=alice, label=sports, round=first)
    Annotation.objects.create(item=items[0], annotator=bob, label=politics, round=first)
    Item.objects.filter(pk=items[0].pk).update(final_label=sports, required_labels=2)
    Annotation.objects.create(item=items[1], annotator=alice, label=politics, round=first)
    Item.objects.filter(pk=items[1].pk).update(final_label=politics)
    Skip.objects.create(item=items[2], annotator=bob, reason="not English")
    # The history the labelling services record with those writes.
    for it, who, chosen in ((items[0], alice, sports), (items[0], bob, politics), (items[1], alice, politics)):
        ItemEvent.objects.create(item=it, kind="label", actor=who, label=chosen, at=timezone.now())
    ItemEvent.objects.create(item=items[2], kind="skip", actor=bob, note="not English", at=timezone.now())
    Prediction.objects.create(
        item=items[2], round=first, prompt_hash="p", adapter_set_hash="a", label=politics, probs=[0.45, 0.55], mass=0.9
    )
    return {"project": project, "items": items, "alice": alice, "bob": bob, "lena": lena}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _download(client: Client, project: Project, **params: Any) -> str:
    response = client.get(reverse("export_page", args=[project.pk]), {"download": "1", **params})
    assert response.status_code == 200, response.content[:500]
    return b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


def test_lead_opens_the_export_page_and_gets_a_training_csv(data: dict[str, Any]) -> None:
    client, project = _client(data["lena"]), data["project"]
    page = client.get(reverse("export_page", args=[project.pk]))
    assert page.status_code == 200 and "Export labels of news" in page.content.decode()
    rows = list(csv.DictReader(io.StringIO(_download(client, project, fmt="csv", labelled_only="on", metadata="on",
                                                     include_test="on"))))  # fmt: skip
    assert [r["id"] for r in rows] == ["n0", "n1"]  # labelled items only: the skipped one is left out
    first = rows[0]
    assert first["text"] == "The striker scored twice 😀" and first["label"] == "sports"
    assert (first["source"], first["round"], first["annotators"], first["agreement"]) == (
        "random",
        "1",
        "alice;bob",
        "0.5",
    )
    assert first["meta.lang"] == "en" and first["split"] == "train"
    assert first["meta.src"] == "'=1+2"  # the export's CSV rule (exports.render) defuses formula cells here too


def test_export_columns_and_filters(data: dict[str, Any]) -> None:
    client, project = _client(data["lena"]), data["project"]
    politics = project.labels.get(name="politics")
    body = _download(client, project, fmt="jsonl", columns=["id", "label"], labels=[str(politics.pk)])
    assert [json.loads(line) for line in body.splitlines()] == [{"id": "n1", "label": "politics"}]
    body = _download(client, project, fmt="csv", columns=["id"], sources=["random"])
    assert body.splitlines() == ["id", "n0"]
    refused = client.get(reverse("export_page", args=[project.pk]), {"download": "1", "fmt": "csv", "rounds": "one"})
    assert refused.status_code == 400 and "round numbers are whole numbers" in refused.content.decode()


def test_item_browser_searches_filters_and_shows_history(data: dict[str, Any]) -> None:
    client, project, items = _client(data["lena"]), data["project"], data["items"]
    url = reverse("item_browser", args=[project.pk])
    page = client.get(url, {"q": "budget"}).content.decode()
    assert "Parliament passed the budget" in page and "striker" not in page and "1 item" in page
    page = client.get(url, {"annotator": str(data["bob"].pk), "state": "labelled"}).content.decode()
    assert "striker" in page and "Parliament" not in page
    page = client.get(url, {"state": "skipped"}).content.decode()
    assert "Le match nul" in page and "striker" not in page
    page = client.get(url, {"confidence": "mid"}).content.decode()
    assert "Le match nul" in page and "Parliament" not in page
    page = client.get(url, {"source": "active", "round": "1"}).content.decode()
    assert "Parliament" in page and "striker" not in page
    partial = client.get(url, {"q": "match"}, headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="item-results">')

    detail = client.get(reverse("item_detail", args=[project.pk, items[0].pk])).content.decode()
    assert "alice labelled it sports in round 1" in detail and "bob labelled it politics" in detail
    assert "selected into round 1" in detail
    skipped = client.get(reverse("item_detail", args=[project.pk, items[2].pk])).content.decode()
    assert "bob skipped it: “not English” (waiting for a lead)" in skipped and "predicted politics at 55 %" in skipped


def test_a_lead_relabels_and_sends_to_review_from_the_item_page(data: dict[str, Any]) -> None:
    client, project, items = _client(data["lena"]), data["project"], data["items"]
    sports = project.labels.get(name="sports")
    client.post(reverse("item_relabel", args=[project.pk, items[1].pk]), {"decision": str(sports.pk), "note": "typo"})
    items[1].refresh_from_db()
    assert items[1].final_label == sports
    detail = client.get(reverse("item_detail", args=[project.pk, items[1].pk])).content.decode()
    assert "lena decided sports — typo" in detail
    client.post(reverse("item_to_review", args=[project.pk, items[2].pk]), {"reason": "two languages"})
    items[2].refresh_from_db()
    assert (items[2].state, items[2].review_reason) == ("review", "two languages")
    refused = client.post(reverse("item_to_review", args=[project.pk, items[1].pk]), follow=True).content.decode()
    assert "already has a final label" in refused
    annotator = _client(data["alice"])
    assert annotator.post(reverse("item_relabel", args=[project.pk, items[1].pk]), {"decision": "x"}).status_code == 403


def test_team_page_adds_users_and_changes_roles(data: dict[str, Any]) -> None:
    lead = _client(data["lena"])
    url = reverse("team")
    assert data["alice"].username in lead.get(url).content.decode()
    added = lead.post(url, {"username": "carol", "password": "pw-carol-123", "roles": ["annotator"]})
    assert added.status_code == 302
    carol = User.objects.get(username="carol")
    assert list(carol.groups.values_list("name", flat=True)) == ["annotator"] and carol.check_password("pw-carol-123")
    refused = lead.post(url, {"username": "dave", "password": "pw-dave-1234", "roles": ["ml"]})
    assert refused.status_code == 400 and not User.objects.filter(username="dave").exists()  # leads cannot grant ml
    lead.post(reverse("team_roles", args=[carol.pk]), {"roles": ["annotator", "lead"]})
    assert sorted(carol.groups.values_list("name", flat=True)) == ["annotator", "lead"]
    mia = user_create(username="mia", password="pw-12345678", roles=["ml"])
    lead.post(reverse("team_roles", args=[mia.pk]), {"roles": ["lead"]})
    assert sorted(mia.groups.values_list("name", flat=True)) == ["lead", "ml"]  # a lead cannot take ml away
    assert _client(data["alice"]).get(url).status_code == 403


def test_export_command_writes_the_training_dataset(data: dict[str, Any], tmp_path: Any) -> None:
    from django.core.management import call_command

    out = tmp_path / "train.csv"
    call_command("export", "news", "dataset", "--format", "csv", "-o", str(out))
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["id"], r["text"], r["label"]) for r in rows] == [
        ("n0", "The striker scored twice 😀", "sports"),
        ("n1", "Parliament passed the budget", "politics"),
    ]


def _model_cell(page: str, item: Item) -> str:
    row = page.split(f'data-item="{item.pk}"')[1].split("</tr>")[0]
    return " ".join(re.sub(r"<[^>]+>", "", row.split('class="model">')[1].split("</td>")[0]).split())


def test_issue32_item_browser_model_column_shows_the_newest_round_prediction(data: dict[str, Any]) -> None:
    """An item scored by round 1 and by round 2 shows round 2's prediction, even where round 2's row is
    the older one (a rerun updates a prediction in place: its created_at stays); an item no round
    scored says so. The confidence filter reads the same prediction."""
    client, project, items = _client(data["lena"]), data["project"], data["items"]
    sports = project.labels.get(name="sports")
    second = Round.objects.create(project=project, number=2, status="done")
    newer = Prediction.objects.create(
        item=items[2], round=second, prompt_hash="p2", adapter_set_hash="b", label=sports, probs=[0.9, 0.1], mass=0.9
    )
    Prediction.objects.filter(pk=newer.pk).update(created_at=timezone.now() - timedelta(days=1))
    url = reverse("item_browser", args=[project.pk])

    page = client.get(url).content.decode()
    assert _model_cell(page, items[2]).startswith("sports 90 % (round 2)")
    assert _model_cell(page, items[0]) == "not scored yet"
    assert "Le match nul" in client.get(url, {"confidence": "high"}).content.decode()
    assert "Le match nul" not in client.get(url, {"confidence": "mid"}).content.decode()  # round 1's 55 %
