"""Seed and inspect helpers the auto-labelling and label-error browser tests run in the live server's
database (``LiveServer.call``): a small TREC project, one labelled with flipped labels, test state for
thresholds, simulated annotators."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def seed_project(*, data_dir: str, model_dir: str, tmp: str) -> dict[str, Any]:
    from tests.integration.round_helpers import trec_project

    path = Path(tmp)
    path.mkdir(parents=True, exist_ok=True)
    project = trec_project(Path(data_dir), path, model_dir=Path(model_dir))
    return {"project": project.pk}


def seed_flipped_project(*, data_dir: str, model_dir: str, tmp: str) -> dict[str, Any]:
    """384 labelled TREC pool items, 20 of them with a wrong label (the label-error scan's prey)."""
    from tests.integration.round_helpers import labelled_with_flips

    path = Path(tmp)
    path.mkdir(parents=True, exist_ok=True)
    project, flipped = labelled_with_flips(Path(data_dir), path, Path(model_dir))
    return {"project": project.pk, "flipped": sorted(flipped)}


def accept_everything(*, project: int) -> int:
    """Test state: every class's tier-1 threshold at 0 on the latest calibration (the fitting rule
    itself is tested on arrays and in the service tests). Returns the calibration id."""
    from annotate.models import Calibration

    row = Calibration.objects.filter(project_id=project, status="done").latest("id")
    rules = dict(row.thresholds)
    rules["model"] = [{**r, "threshold": 0.0, "reason": ""} for r in rules["model"]]
    Calibration.objects.filter(id=row.id).update(thresholds=rules)
    return row.id


def label_audits_wrong(*, project: int) -> int:
    """A simulated annotator takes the queue and disagrees with every audited auto label."""
    from django.contrib.auth.models import User

    from annotate.models import AutoLabel, Label, Project
    from annotate.services.labeling import label_submit, next_item_for

    row = Project.objects.get(pk=project)
    user, _ = User.objects.get_or_create(username="auditor")
    labels = list(Label.objects.filter(project=row))
    auto_of = dict(AutoLabel.objects.filter(item__project=row).values_list("item_id", "label_id"))
    done = 0
    while (item := next_item_for(project=row, annotator=user)) is not None:
        wrong = next(lab for lab in labels if lab.pk != auto_of.get(item.id))
        label_submit(item=item, annotator=user, label=wrong)
        done += 1
    return done
