"""Forms of the data pages: the export's columns and filters, the item browser's filters, a lead's
actions on one item, and team administration (users, roles, project members)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth import get_user_model

from annotate.models import BatchItem, BulkAction, Item, Project, ProjectMembership
from annotate.roles import ALL_ROLES, ML, ROLE_NAMES
from annotate.selectors.items import SORTS
from annotate.services.exports_dataset import DATASET_COLUMNS, DEFAULT_COLUMNS, DatasetFilter

SOURCE_CHOICES = [(s.value, s.label) for s in BatchItem.Source]


def _label_choices(project: Project) -> list[tuple[str, str]]:
    return [(str(lab.pk), lab.name) for lab in project.labels.order_by("order", "id")]


class ExportForm(forms.Form):
    fmt = forms.ChoiceField(
        label="Format",
        choices=[
            ("csv", "CSV for spreadsheets"),
            ("csv_raw", "CSV, exact texts (pandas, scripts)"),
            ("jsonl", "JSON Lines (exact)"),
            ("parquet", "Parquet (typed columns, exact)"),
        ],
        initial="csv",
        help_text="CSV for spreadsheets puts a ' before a cell that starts with = + - or @, so a spreadsheet "
        "never runs it as a formula; the other formats keep every text exactly as it is.",
    )
    columns = forms.MultipleChoiceField(
        choices=[(name, f"{name} — {why}") for name, why in DATASET_COLUMNS.items()],
        initial=list(DEFAULT_COLUMNS),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Nothing ticked: the default columns.",
    )
    metadata = forms.BooleanField(
        label="Metadata columns (one per imported extra column, named meta.<column>)", required=False, initial=True
    )
    labelled_only = forms.BooleanField(
        label="Only items with a final label", required=False, initial=True,
        help_text="Untick to add items that have labels but no final label yet (open disagreements).",
    )  # fmt: skip
    include_test = forms.BooleanField(
        label="Include the test set (split = test)", required=False, initial=False,
        help_text="Off by default: the test set measures the model; training on it makes the curve lie.",
    )  # fmt: skip
    labels = forms.MultipleChoiceField(
        label="Only these final labels", required=False, widget=forms.CheckboxSelectMultiple
    )
    sources = forms.MultipleChoiceField(
        label="Only items picked by", choices=SOURCE_CHOICES, required=False, widget=forms.CheckboxSelectMultiple
    )
    rounds = forms.CharField(label="Only rounds", required=False, help_text="Round numbers, e.g. 1,2,5")

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.MultipleChoiceField, self.fields["labels"]).choices = _label_choices(project)

    def clean_rounds(self) -> list[int]:
        raw = self.cleaned_data.get("rounds") or ""
        parts = [p.strip() for p in raw.replace(" ", ",").split(",") if p.strip()]
        if any(not p.isdigit() for p in parts):
            raise forms.ValidationError("round numbers are whole numbers separated by commas, e.g. 1,2")
        return [int(p) for p in parts]

    def spec(self) -> DatasetFilter:
        data = self.cleaned_data
        return DatasetFilter(
            labelled_only=data["labelled_only"],
            include_test=data["include_test"],
            label_ids=[int(v) for v in data["labels"]],
            sources=list(data["sources"]),
            round_numbers=data["rounds"],
            columns=list(data["columns"]) or list(DEFAULT_COLUMNS),
            metadata=data["metadata"],
        )


REVIEW_STATES = [
    ("", "Any"),
    ("open", "Open (no final label)"),
    ("labelled", "Labelled (final label)"),
    ("disagreement", "Disagreement"),
    ("skipped", "Skipped, waiting for a lead"),
    ("review", "In the review bucket"),
    ("unlabelable", "Unlabelable"),
    ("test", "Test set"),
]
CONFIDENCE = [
    ("", "Any"),
    ("low", "Low (under 50 %)"),
    ("mid", "Medium (50–80 %)"),
    ("high", "High (over 80 %)"),
    ("none", "Not scored yet"),
]


class ItemFilterForm(forms.Form):
    q = forms.CharField(label="Search text or id", required=False)
    label = forms.ChoiceField(label="Final label", required=False)
    annotator = forms.ChoiceField(label="Labelled by", required=False)
    source = forms.ChoiceField(label="Picked by", required=False, choices=[("", "Any"), *SOURCE_CHOICES])
    confidence = forms.ChoiceField(label="Model confidence", required=False, choices=CONFIDENCE)
    state = forms.ChoiceField(label="Review state", required=False, choices=REVIEW_STATES)
    round = forms.IntegerField(label="Round", required=False, min_value=1)
    sort = forms.ChoiceField(label="Sort by", required=False, choices=list(SORTS.items()))
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        labels = [("", "Any"), ("none", "None yet"), *_label_choices(project)]
        cast(forms.ChoiceField, self.fields["label"]).choices = labels
        users = (
            get_user_model()
            .objects.filter(annotations__item__project=project)
            .distinct()
            .order_by("username")
            .values_list("pk", "username")
        )
        cast(forms.ChoiceField, self.fields["annotator"]).choices = [("", "Anyone"), *((str(p), u) for p, u in users)]


class _IdsField(forms.TypedMultipleChoiceField):
    """Item ids ticked in the browser: any integers here; the service keeps those of the project."""

    def valid_value(self, value: Any) -> bool:
        return str(value).isdigit()


class BulkForm(forms.Form):
    """The browser's bulk action: the ticked rows (``items``) or every item matching the browser's
    query (``all_matching`` with ``query``, the browser's query string)."""

    action = forms.ChoiceField(label="Action", choices=BulkAction.Kind.choices)
    items = _IdsField(coerce=int, required=False)
    all_matching = forms.BooleanField(required=False)
    query = forms.CharField(required=False, max_length=2000)
    label = forms.ChoiceField(label="Relabel to", required=False)
    assignee = forms.ChoiceField(label="Assign to", required=False)
    note = forms.CharField(label="Note / reason", required=False, max_length=500)

    def __init__(self, *args: Any, project: Project, annotators: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.labels = {str(lab.pk): lab for lab in project.labels.order_by("order", "id")}
        self.users = {str(u.pk): u for u in annotators}
        cast(forms.ChoiceField, self.fields["label"]).choices = [("", "Choose…"), *_label_choices(project)]
        cast(forms.ChoiceField, self.fields["assignee"]).choices = [
            ("", "Choose…"),
            *((pk, u.username) for pk, u in self.users.items()),
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("items") and not data.get("all_matching"):
            raise forms.ValidationError("tick some items, or “select all matching”")
        if data.get("action") == BulkAction.Kind.RELABEL and not data.get("label"):
            self.add_error("label", "choose the label to relabel to")
        if data.get("action") == BulkAction.Kind.ASSIGN and not data.get("assignee"):
            self.add_error("assignee", "choose whom to assign to")
        return data


class SavedFilterForm(forms.Form):
    name = forms.CharField(label="Save this filter as", max_length=100)
    query = forms.CharField(required=False, max_length=2000)


class SendToReviewForm(forms.Form):
    reason = forms.CharField(label="Why", max_length=200, required=False)


def _role_choices(actor_roles: set[str]) -> list[tuple[str, str]]:
    """Leads may give the annotator and lead roles; the ml role takes ML staff (or a superuser)."""
    return [(r, ROLE_NAMES[r]) for r in ALL_ROLES if r != ML or ML in actor_roles]


class UserCreateForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(
        widget=forms.PasswordInput, min_length=8, help_text="At least 8 characters; tell it to the person."
    )
    roles = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)

    def __init__(self, *args: Any, actor_roles: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.MultipleChoiceField, self.fields["roles"]).choices = _role_choices(actor_roles)


class UserRolesForm(forms.Form):
    roles = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)

    def __init__(self, *args: Any, actor_roles: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.MultipleChoiceField, self.fields["roles"]).choices = _role_choices(actor_roles)


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="User")
    role = forms.ChoiceField(choices=[])

    def __init__(self, *args: Any, actor_roles: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["role"]).choices = _role_choices(actor_roles)

    def clean_username(self) -> Any:
        user = get_user_model().objects.filter(username=self.cleaned_data["username"]).first()
        if user is None:
            raise forms.ValidationError("no such user; create them on the Team page first")
        return user


__all__ = [
    "BulkForm",
    "ExportForm",
    "Item",
    "ItemFilterForm",
    "MemberForm",
    "ProjectMembership",
    "SavedFilterForm",
    "SendToReviewForm",
    "UserCreateForm",
    "UserRolesForm",
]
