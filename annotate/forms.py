"""Annotator forms (the lead/ML/setup forms live in annotate/forms_setup.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms

from annotate.models import Item, Label, Project, Skip
from annotate.services.labeling import MAX_SECONDS_SPENT, QUEUES

QUEUE_CHOICES = [(q, q) for q in QUEUES]


class _QueueForm(forms.Form):
    queue = forms.ChoiceField(choices=QUEUE_CHOICES, required=False)

    def clean_queue(self) -> str:
        return self.cleaned_data.get("queue") or "batch"


class LabelForm(_QueueForm):
    """The hot form: validated without a query. The labels are the project's cached label set; the
    item's project is checked by the service, in the statement that locks the item."""

    item = forms.IntegerField(
        min_value=1,
        max_value=2**63 - 1,  # the databases' largest id; a bigger number would overflow the query
        error_messages={
            "invalid": "unknown item: it is not in this project",
            "min_value": "unknown item: it is not in this project",
            "max_value": "unknown item: it is not in this project",
        },
    )
    label = forms.ChoiceField(error_messages={"invalid_choice": "unknown label: choose one of this project's labels"})
    revise = forms.BooleanField(required=False)  # set on the undo screen: update my existing label
    # Seconds the item was on screen, measured by annotate.js; without JS the lease's age is used.
    # Lenient: a garbled timing must never cost the label, it just falls back to the lease's age.
    # A plain Field: CharField would refuse a NUL ("Null characters are not allowed") and lose the label.
    seconds = forms.Field(required=False)

    def __init__(self, *args: Any, labels: Sequence[Label], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.labels = {str(label.pk): label for label in labels}
        self.fields["label"].choices = [(pk, label.name) for pk, label in self.labels.items()]  # type: ignore[attr-defined]

    def clean_label(self) -> Label:
        return self.labels[self.cleaned_data["label"]]

    def clean_seconds(self) -> float | None:
        try:
            seconds = float(self.cleaned_data.get("seconds") or "")
        except (TypeError, ValueError):
            return None
        return seconds if 0 <= seconds <= MAX_SECONDS_SPENT else None


class SkipForm(_QueueForm):
    item = forms.ModelChoiceField(
        queryset=Item.objects.none(), error_messages={"invalid_choice": "unknown item: it is not in this project"}
    )
    reason = forms.CharField(required=False, max_length=Skip._meta.get_field("reason").max_length)

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["item"].queryset = Item.objects.filter(project=project)  # type: ignore[attr-defined]
