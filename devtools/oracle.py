"""Labelled projects driven through the real services without people: a TREC project from the shared
data set with its gold test set, and the oracle annotator that answers with each item's gold label.
The round tests, the round bench and the demo-like checks build their projects with these."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from annotate.models import Item, Label, Project
from annotate.services.imports import import_items
from annotate.services.labeling import label_submit, next_item_for
from annotate.services.projects import LabelInput, project_create, test_set_draw

TREC_CODES = {"abbreviation": "A", "description": "D", "entity": "E", "human": "H", "location": "L", "numeric": "N"}


def trec_project(
    data_dir: Path, work_dir: Path, *, model_dir: Path, pool: int = 60, test: int = 16, **knobs: Any
) -> Project:
    """A TREC project of ``pool`` training rows (named after ``work_dir``, which holds its pool CSV);
    ``test`` of them form the test set with gold labels as final labels."""
    labels = [LabelInput(name, code) for name, code in TREC_CODES.items()]
    settings = {
        "model_dir": str(model_dir),
        "ensemble_k": 2,
        "batch_size": 8,
        "cold_start_batches": 1,
        "candidate_sample": 0,
        "random_share": 0.25,
        "mass_threshold": 0.0,
        "test_set_size": test,
        "scratch_every": 2,
        "seed": 7,
    }
    settings.update(knobs)
    project = project_create(name=f"trec-{work_dir.name}", labels=labels, **settings)
    with (data_dir / "trec" / "train.csv").open() as f:
        rows = [row for _, row in zip(range(pool), csv.DictReader(f), strict=False)]
    path = work_dir / "pool.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text", "label"])
        writer.writeheader()
        writer.writerows({"id": f"t{i}", "text": r["text"], "label": r["label"]} for i, r in enumerate(rows))
    import_items(project=project, path=path)
    test_set_draw(project=project)
    for item in Item.objects.filter(project=project, is_test=True):  # gold labels of the test set
        item.final_label = item.gold_label
        item.save(update_fields=["final_label"])
    return project


def annotator(name: str = "ann") -> Any:
    user, _ = get_user_model().objects.get_or_create(username=name)
    return user


def label_batch(project: Project, user: Any, *, limit: int | None = None) -> int:
    """The simulated annotator: takes items through next_item_for and labels them with the gold label."""
    done = 0
    while limit is None or done < limit:
        item = next_item_for(project=project, annotator=user)
        if item is None:
            break
        if item.gold_label_id is None:
            raise ValueError(f"item {item.external_id} has no gold label for the oracle to answer with")
        label = Label.objects.get(pk=item.gold_label_id)
        label_submit(item=item, annotator=user, label=label, seconds_spent=4.0)
        done += 1
    return done
