"""Export: every annotator's label, adjudication, round; predictions keyed unambiguously."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth.models import User

from annotate.models import Adjudication, Annotation, BatchItem, Item, Label, Prediction, Round
from annotate.services.exports import export_labels, export_predictions
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def labelled() -> dict[str, object]:
    project = project_create(name="p", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")])
    pos, neg = Label.objects.filter(project=project).order_by("order")
    ann, bob, lead = (User.objects.create_user(n) for n in ("ann", "bob", "lead"))
    items = [
        Item.objects.create(project=project, external_id=f"i{n}", text=f"t{n}", text_hash=f"h{n}") for n in range(3)
    ]
    rnd = Round.objects.create(project=project, number=1)
    BatchItem.objects.create(round=rnd, item=items[0], source="active")
    Annotation.objects.create(item=items[0], annotator=ann, label=pos)
    Annotation.objects.create(item=items[0], annotator=bob, label=neg)
    Adjudication.objects.create(item=items[0], label=neg, decided_by=lead)
    Item.objects.filter(id=items[0].id).update(final_label=neg)
    for adapter_set in ("set1", "set2"):
        Prediction.objects.create(
            item=items[1],
            round=rnd,
            prompt_hash="ph",
            adapter_set_hash=adapter_set,
            label=pos,
            probs=[0.7, 0.3],
            mass=0.9,
        )
    return {"project": project}


def test_label_export_has_every_annotator_and_the_adjudication(labelled: dict[str, object]) -> None:
    rows = [json.loads(line) for line in export_labels(project=labelled["project"], fmt="jsonl")]  # type: ignore[arg-type]
    assert len(rows) == 1
    row = rows[0]
    assert row["item_id"] == "i0" and row["text_hash"] == "h0"
    assert row["annotations"] == {"ann": "pos", "bob": "neg"}
    assert (row["final_label"], row["adjudicated_label"], row["adjudicated_by"], row["round"]) == (
        "neg",
        "neg",
        "lead",
        1,
    )
    assert row["first_labeled_at"] and row["last_labeled_at"]


def test_label_export_csv_round_trips(labelled: dict[str, object]) -> None:
    text = "".join(export_labels(project=labelled["project"], fmt="csv"))  # type: ignore[arg-type]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 1
    assert json.loads(rows[0]["annotations"]) == {"ann": "pos", "bob": "neg"}


def test_prediction_export_is_keyed_by_item_prompt_and_adapter_set(labelled: dict[str, object]) -> None:
    rows = [json.loads(line) for line in export_predictions(project=labelled["project"], fmt="jsonl")]  # type: ignore[arg-type]
    keys = [(r["item_id"], r["prompt_hash"], r["adapter_set_hash"]) for r in rows]
    assert keys == [("i1", "ph", "set1"), ("i1", "ph", "set2")]
    assert len(set(keys)) == len(keys)
    assert rows[0]["probs"] == [0.7, 0.3]


def test_unknown_format_is_refused(labelled: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="unknown export format 'xml'"):
        list(export_labels(project=labelled["project"], fmt="xml"))  # type: ignore[arg-type]


FORMULAS = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR", "=1"]


def test_csv_export_defuses_formulas_and_jsonl_stays_exact() -> None:
    """OWASP CSV injection: a cell a spreadsheet would evaluate gets a leading quote in CSV only."""
    project = project_create(
        name="formulas", labels=[LabelInput(FORMULAS[0], "A"), LabelInput("-neg", "B"), LabelInput("plain", "C")]
    )
    first, minus, plain = Label.objects.filter(project=project).order_by("order")
    ann = User.objects.create_user("ann")
    for n, external_id in enumerate([*FORMULAS[1:], "safe id", "'already quoted"]):
        item = Item.objects.create(project=project, external_id=external_id, text=f"t{n}", text_hash=f"h{n}")
        label = (first, minus, plain)[n % 3]
        Annotation.objects.create(item=item, annotator=ann, label=label)
        Item.objects.filter(id=item.id).update(final_label=label)
    Prediction.objects.create(
        item=Item.objects.get(external_id="-2+3"), prompt_hash="ph", adapter_set_hash="s", label=minus,
        probs=[0.5, 0.5], mass=-0.25, uncertainty=-1.5,
    )  # fmt: skip

    exact = [json.loads(line) for line in export_labels(project=project, fmt="jsonl")]
    assert [r["item_id"] for r in exact] == [*FORMULAS[1:], "safe id", "'already quoted"]
    assert [r["final_label"] for r in exact][:3] == [FORMULAS[0], "-neg", "plain"]

    rows = list(csv.DictReader(io.StringIO("".join(export_labels(project=project, fmt="csv")), newline="")))
    assert [r["item_id"] for r in rows] == ["'" + f for f in FORMULAS[1:]] + ["safe id", "'already quoted"]
    assert [r["final_label"] for r in rows][:3] == ["'" + FORMULAS[0], "'-neg", "plain"]
    for row in rows:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row.values()), row
    assert json.loads(rows[0]["annotations"]) == {"ann": FORMULAS[0]}  # JSON cells start with '{': untouched

    (prediction,) = csv.DictReader(io.StringIO("".join(export_predictions(project=project, fmt="csv"))))
    assert (prediction["item_id"], prediction["label"]) == ("'-2+3", "'-neg")
    assert (prediction["mass"], prediction["uncertainty"]) == ("-0.25", "-1.5")  # numbers stay numbers
