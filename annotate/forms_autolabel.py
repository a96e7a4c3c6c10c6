"""Forms of the auto-labelling section: gold draw, calibration split, calibration, launch."""

from __future__ import annotations

from django import forms

from annotate.services.autolabel import CASCADES

CASCADE_NAMES = {
    "none": "None: people get the rest",
    "agreement": "Agreement of all K members",
    "permuted": "Self-consistency (permuted codes)",
    "second_model": "A second model directory",
}


class GoldDrawForm(forms.Form):
    per_class = forms.IntegerField(min_value=1, max_value=10_000, initial=50, label="Items per class")


class SplitDrawForm(forms.Form):
    n = forms.IntegerField(min_value=1, max_value=100_000, initial=500, label="Random pool items")


class CalibrateForm(forms.Form):
    target = forms.FloatField(min_value=0.5, max_value=0.999, initial=0.95, label="Target precision")
    delta = forms.FloatField(
        min_value=0.001, max_value=0.5, initial=0.05, required=False, label="δ (chance a class misses it)"
    )
    cascade = forms.ChoiceField(choices=[(c, CASCADE_NAMES[c]) for c in CASCADES], initial="agreement")
    second_model_dir = forms.CharField(required=False, label="Second model directory")


class LaunchForm(forms.Form):
    audit_share = forms.FloatField(min_value=0.0, max_value=0.5, initial=0.02, label="Audit share")
    max_shards_in_flight = forms.IntegerField(min_value=1, max_value=256, initial=4, label="Shards in flight")
    max_shards_per_worker = forms.IntegerField(
        min_value=1, max_value=64, initial=2, required=False, label="Shards per worker"
    )
    chunk_size = forms.IntegerField(min_value=1, max_value=8192, initial=256, label="Items per engine call")


def given(data: dict) -> dict:
    """The cleaned fields that were filled in (an optional field left out keeps the service default)."""
    return {k: v for k, v in data.items() if v is not None}


def first_error(form: forms.Form) -> str:
    return " ".join(f"{name}: {' '.join(map(str, errors))}" for name, errors in form.errors.items())
