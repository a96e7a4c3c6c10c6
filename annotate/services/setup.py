"""Project setup edits by ML staff. Creation is services.projects.project_create."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q

from annotate.models import Adjudication, Annotation, Item, Label, Prediction, Project
from annotate.selectors.projects import test_set_fixed
from annotate.services.projects import LabelInput, ProjectError, TestSetRedraw, test_set_redraw


def _label_in_use(label: Label) -> bool:
    return (
        Annotation.objects.filter(label=label).exists()
        or Adjudication.objects.filter(label=label).exists()
        or Prediction.objects.filter(label=label).exists()
        or Item.objects.filter(Q(final_label=label) | Q(gold_label=label)).exists()
    )


def _labels_sync(project: Project, labels: Sequence[LabelInput]) -> None:
    existing = {lab.name: lab for lab in project.labels.all()}
    wanted = {lab.name for lab in labels}
    for name, row in existing.items():
        if name not in wanted:
            if _label_in_use(row):
                raise ProjectError(f"label {name!r} is in use (annotations, predictions or gold labels); keep it")
            row.delete()
    # Park changed codes on placeholders first, so swapping two codes never trips the unique constraint.
    for row in existing.values():
        if row.pk and row.name in wanted:
            Label.objects.filter(pk=row.pk).update(code=f"~parked-{row.pk}")
    for order, lab in enumerate(labels):
        Label.objects.update_or_create(
            project=project, name=lab.name, defaults={"code": lab.code, "description": lab.description, "order": order}
        )


@dataclass(frozen=True)
class SetupSaved:
    project: Project
    redraw: TestSetRedraw | None  # the test set was drawn again at its new size


@transaction.atomic
def project_update(*, project: Project, labels: Sequence[LabelInput], **fields: Any) -> SetupSaved:
    """Update the project's settings and label set (codes already checked against the tokenizer).
    Once a round exists, the few-shot examples and the label names/codes are frozen: they are part of
    the prompt, and changing them would change the prompt hash under the earlier rounds' scores.
    A new test-set size redraws a drawn test set until round 1 trains; after that it is refused."""
    project = Project.objects.select_for_update().get(pk=project.pk)
    resized = "test_set_size" in fields and fields["test_set_size"] != project.test_set_size
    drawn = Item.objects.filter(project=project, is_test=True).exists()
    if resized and drawn and (fixed := test_set_fixed(project=project)):
        raise ProjectError(f"{fixed}; its size stays {project.test_set_size}")
    if project.rounds.exists():
        current = [(lab.name, lab.code) for lab in project.labels.order_by("order", "id")]
        if "few_shot" in fields and fields["few_shot"] != project.few_shot:
            raise ProjectError("few-shot examples are frozen once a round exists (the prompt hash would change)")
        if [(lab.name, lab.code) for lab in labels] != current:
            raise ProjectError("label names and codes are frozen once a round exists (the prompt hash would change)")
    for name, value in fields.items():
        setattr(project, name, value)
    project.full_clean(exclude=["created_by"])
    project.save()
    _labels_sync(project, labels)
    return SetupSaved(project=project, redraw=test_set_redraw(project=project) if resized and drawn else None)
