"""Forms of the ML and lead pages: project setup (labels with verified codes, prompt, knobs), the
round request and the lead's adjudication."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator, validate_email
from django.http import QueryDict

from acquisition.strategies import STRATEGIES
from annotate.loopconfig import new_project_defaults
from annotate.models import Label, Project
from annotate.services.notify import email_addresses
from annotate.services.projects import LabelInput

UNLABELABLE = "unlabelable"


@functools.lru_cache(maxsize=4)
def load_tokenizer(model_dir: str) -> Any:
    """One tokenizer per model directory per process (loading takes about a second)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def model_dir_for(raw: str) -> str:
    return raw.strip() or str(settings.LLM_DIR)


# ---- label lines: "name | description | code" -------------------------------------------------


def parse_label_lines(text: str) -> list[LabelInput]:
    """One label per line, `name | description | code`; description and code may be left out."""
    labels: list[LabelInput] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split("|")]
        if len(parts) > 3:
            errors.append(f"line {number}: expected `name | description | code`, found {len(parts) - 1} '|'")
            continue
        name, description, code = (parts + ["", ""])[:3]
        if not name:
            errors.append(f"line {number}: the label name is empty")
        elif len(name) > 100:
            errors.append(f"line {number}: the label name is longer than 100 characters")
        elif any(label.name == name for label in labels):
            errors.append(f"line {number}: the label {name!r} appears twice")
        elif (twin := next((lab.name for lab in labels if _fold(lab.name) == _fold(name)), None)) is not None:
            errors.append(f"line {number}: the label {name!r} differs from {twin!r} only by case or spacing")
        elif (hidden := _invisible(name)) is not None:
            errors.append(f"line {number}: the label name contains an invisible character U+{ord(hidden):04X}")
        elif len(code) > 32:
            errors.append(f"line {number}: the code {code!r} is longer than 32 characters")
        else:
            labels.append(LabelInput(name=name, code=code, description=description))
    if errors:
        raise ValidationError(errors)
    if len(labels) < 2:
        raise ValidationError("enter at least two labels, one per line")
    return labels


def _fold(name: str) -> str:
    """Label names that look the same to an annotator: case and runs of spaces ignored."""
    return " ".join(name.casefold().split())


def _invisible(name: str) -> str | None:
    """A format character (RTL/LTR marks, zero-width space, BOM...) that makes two names look alike;
    the zero-width joiner is allowed, emoji sequences need it."""
    return next((c for c in name if unicodedata.category(c) == "Cf" and c != "\u200d"), None)


def format_label_lines(labels: Sequence[LabelInput]) -> str:
    return "\n".join(f"{lab.name} | {lab.description} | {lab.code}" for lab in labels)


# ---- few-shot lines: "text | label" ----------------------------------------------------------


def parse_few_shot(text: str, label_names: Sequence[str]) -> list[dict[str, str]]:
    """One example per line, `text | label`; the label is after the last '|', so texts may contain '|'."""
    examples: list[dict[str, str]] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if "|" not in line:
            errors.append(f"line {number}: expected `text | label`")
            continue
        body, label = (part.strip() for part in line.rsplit("|", 1))
        if not body:
            errors.append(f"line {number}: the example text is empty")
        elif label not in label_names:
            errors.append(f"line {number}: unknown label {label!r} (labels: {', '.join(label_names)})")
        else:
            examples.append({"text": body, "label": label})
    if errors:
        raise ValidationError(errors)
    return examples


def format_few_shot(few_shot: Sequence[dict[str, str]]) -> str:
    return "\n".join(f"{ex['text']} | {ex['label']}" for ex in few_shot)


def case_only_differences(labels: Sequence[LabelInput]) -> list[str]:
    """Warnings for label codes that differ only by upper/lower case ("P" and "p"): valid, distinct
    tokens, but easy to mix up for people reading the codes. (Names that differ only by case are
    refused outright by parse_label_lines.)"""
    warnings: list[str] = []
    seen: dict[str, LabelInput] = {}
    for lab in labels:
        key = lab.code.strip().casefold()
        first = seen.setdefault(key, lab)
        if key and first is not lab and first.code != lab.code:
            warnings.append(
                f"The codes “{first.code}” ({first.name}) and “{lab.code}” ({lab.name}) differ only by case: "
                "easy to confuse when reading the prompt; consider another code."
            )
    return warnings


# ---- the setup form ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Range:
    low: float
    high: float | None
    why: str


MIN_MAX_VALIDATORS = (MinValueValidator, MaxValueValidator)

# Precise bounds, each with the reason a value outside it cannot work.
RANGES: dict[str, _Range] = {
    "batch_size": _Range(1, None, "batch size B must be at least 1"),
    "oversample": _Range(1.0, None, "oversample factor M/B must be at least 1 (top-M must hold a whole batch)"),
    "random_share": _Range(0.0, 1.0, "random-slice share must be between 0 and 1"),
    "mass_threshold": _Range(0.0, 1.0, "label-mass threshold must be between 0 and 1 (it is a probability mass)"),
    "ensemble_k": _Range(1, 32, "ensemble size K must be between 1 and 32"),
    "overlap_share": _Range(0.0, 1.0, "overlap share must be between 0 and 1"),
    "overlap_annotators": _Range(2, 20, "annotators per overlapped item must be between 2 and 20"),
    "test_set_size": _Range(1, None, "test-set size must be at least 1 (the learning curve is measured on it)"),
    "lease_seconds": _Range(30, 86400, "lease must be between 30 seconds and one day"),
    "cold_start_batches": _Range(0, 100, "cold-start batches must be between 0 and 100"),
    "auto_retrain_share": _Range(0.0, 1.0, "the share of the batch that starts training must be between 0 and 1"),
}


class ProjectSetupForm(forms.ModelForm):  # type: ignore[type-arg]
    labels_text = forms.CharField(
        label="Labels",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text="One label per line: name | description | code. Leave the code empty to get a suggestion; "
        "each code must be a single token of the model's tokenizer, distinct from the others.",
    )
    few_shot_text = forms.CharField(
        label="Few-shot examples",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="One example per line: text | label name. Frozen once the first round exists.",
    )
    uncertainty = forms.ChoiceField(
        choices=[("margin", "Margin"), ("entropy", "Entropy + tail"), ("bald", "BALD (ensemble)")],
        label="Uncertainty measure",
        help_text="Margin: the gap between the two likeliest labels (default); Entropy: the spread over all labels; "
        "BALD: disagreement between the ensemble's models (needs 2 or more).",
    )

    class Meta:
        model = Project
        fields = [
            "name",
            "guidelines",
            "instructions",
            "model_dir",
            "engine",
            "seed",
            "batch_size",
            "oversample",
            "random_share",
            "mass_threshold",
            "uncertainty",
            "cold_start_batches",
            "cold_mode",
            "ensemble_k",
            "overlap_share",
            "overlap_annotators",
            "test_set_size",
            "lease_seconds",
            "show_suggestion",
            "auto_retrain_share",
            "lead_adjudicates_own",
            "notify_webhook_url",
            "notify_emails",
        ]
        labels = {
            "name": "Project name",
            "model_dir": "Model directory",
            "engine": "Scoring engine",
            "seed": "Random seed",
            "batch_size": "Batch size (items per round)",
            "oversample": "Candidates per batch item",
            "random_share": "Random share of the batch",
            "mass_threshold": "Review threshold (label mass)",
            "uncertainty": "Uncertainty measure",
            "cold_start_batches": "Cold-start rounds",
            "cold_mode": "How cold-start rounds pick",
            "ensemble_k": "Models in the ensemble",
            "overlap_share": "Share of items labelled twice",
            "overlap_annotators": "Annotators per double-labelled item",
            "lease_seconds": "Time an annotator holds an item (seconds)",
            "test_set_size": "Test-set size (items)",
            "show_suggestion": "Show the model's suggestion to annotators",
            "auto_retrain_share": "Start training when this share of the batch is done",
            "lead_adjudicates_own": "Leads may decide items they labelled themselves",
            "notify_webhook_url": "Webhook URL",
            "notify_emails": "Email addresses",
        }
        help_texts = {
            "name": "Shown to everyone on the project, annotators included.",
            "model_dir": "A local Hugging Face model directory; empty: the bundled SmolLM2-135M.",
            "engine": "Transformers (with PEFT adapters) runs on CPU or GPU; vLLM is faster but needs a GPU.",
            "seed": "Fixes the random choices (test set, random slice, training) so a rerun repeats them.",
            "batch_size": "How many texts annotators get per round. 20–100 is typical; smaller rounds learn sooner.",
            "oversample": "The most uncertain (batch size × this) texts are kept, then the most varied of them are "
            "picked. 4 is a good default; 1 means uncertainty only.",
            "random_share": "Part of each batch picked at random (0–1): it keeps an unbiased comparison with "
            "random selection. Default 0.15 (15 %).",
            "mass_threshold": "Texts where the model puts less than this probability (0–1) on all labels together "
            "go to the leads' review bucket instead of annotators. Default 0.05.",
            "uncertainty": "margin: gap between the two likeliest labels (default); entropy: spread over all "
            "labels; BALD: disagreement between the ensemble's models (needs 2 or more).",
            "cold_start_batches": "How many first rounds pick without the model (see below) before it is trusted "
            "to choose.",
            "cold_mode": "Typical items: the most typical text of each group of similar texts (the default) — best "
            "when the labels follow topics; Random: a uniform draw — safer when they do not (sentiment, question "
            "type); Half typical, half random: both at once; Farthest-first: texts far from each other. A project "
            "run as Random always starts at random.",
            "ensemble_k": "How many small adapters are trained; more gives better uncertainty and costs more "
            "time per round. 1 on a CPU (the embedding proxy is the second opinion), 2–4 on a GPU.",
            "overlap_share": "Share of each batch (0–1) labelled by several annotators, to measure agreement and "
            "find disagreements for leads. 0.1 = one item in ten.",
            "overlap_annotators": "How many different annotators label each double-labelled item (2 or more).",
            "lease_seconds": "After this long an item an annotator opened but did not label goes to someone else.",
            "test_set_size": "Drawn at random at the first import, never more than 30 % of the texts. A new size "
            "redraws it until round 1 trains; then it is fixed: the learning curve is measured on it.",
            "show_suggestion": "Off by default: seeing the model's guess biases annotators.",
            "auto_retrain_share": "0–1. 1: the round trains by itself when every batch item is labelled, decided "
            "or returned; 0.8: at 80 %; 0: only when ML staff press “Retrain now”.",
            "lead_adjudicates_own": "Off by default: a lead who labelled an item is not its judge.",
            "notify_webhook_url": "Optional. An http:// or https:// address that gets a JSON POST when a round "
            "finishes or fails and when a batch's remaining items wait for a lead.",
            "notify_emails": "Optional. Comma-separated addresses that get the same notices by email.",
        }
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 8}), "instructions": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.suggested_codes: dict[str, str] = {}
        self.collisions: list[tuple[str, str]] = []
        self.frozen_round: int | None = None
        if self.instance.pk:
            last = self.instance.rounds.order_by("-number").values_list("number", flat=True).first()
            self.frozen_round = last
            self.initial.setdefault("labels_text", format_label_lines(self._current_labels()))
            self.initial.setdefault("few_shot_text", format_few_shot(self.instance.few_shot or []))
        self.case_warnings: list[str] = []
        self.fields["auto_retrain_share"].required = False  # a script that leaves it out keeps the default
        if not self.instance.pk:
            self.initial.setdefault("auto_retrain_share", 1.0)  # new projects: a round finishes by itself
            # The profile's quick start (K=1 on a CPU) over the model's defaults, which a new instance's
            # initial data already holds (so not setdefault).
            for name, value in new_project_defaults().items():
                if name in self.fields:
                    self.initial[name] = value
        for name, rng in RANGES.items():
            # The model field's own bounds (a PositiveIntegerField's ≥ 0) would answer −5 with Django's
            # generic message and 0 with ours: drop them, so any value out of range gets the one reason.
            field = self.fields[name]
            field.validators = [v for v in field.validators if not isinstance(v, MIN_MAX_VALIDATORS)]
            widget = field.widget
            widget.attrs["min"] = rng.low
            if rng.high is not None:
                widget.attrs["max"] = rng.high
            if isinstance(rng.low, float):
                widget.attrs["step"] = "any"

    def _current_labels(self) -> list[LabelInput]:
        rows: Sequence[Label] = list(self.instance.labels.order_by("order", "id")) if self.instance.pk else []
        return [LabelInput(name=lab.name, code=lab.code, description=lab.description) for lab in rows]

    def _clean_range(self, name: str) -> Any:
        value = self.cleaned_data.get(name)
        rng = RANGES[name]
        if value is not None and (value < rng.low or (rng.high is not None and value > rng.high)):
            raise ValidationError(f"{rng.why}; got {value}")
        return value

    def clean_auto_retrain_share(self) -> float:
        value = self.cleaned_data.get("auto_retrain_share")
        if value is None:
            return float(self.instance.auto_retrain_share if self.instance.pk else 0.0)
        return float(value)

    def clean_model_dir(self) -> str:
        return str(self.cleaned_data.get("model_dir") or "").strip()

    def clean_notify_webhook_url(self) -> str:
        url = str(self.cleaned_data.get("notify_webhook_url") or "").strip()
        if not url:
            return ""
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in ("http", "https"):
            shown = f"“{scheme}://”" if scheme else "none"
            raise ValidationError(f"the webhook URL must start with http:// or https:// (its scheme: {shown})")
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise ValidationError(f"“{url}” is not a valid http(s) URL") from None
        return url

    def clean_notify_emails(self) -> str:
        addresses = email_addresses(str(self.cleaned_data.get("notify_emails") or ""))
        bad = [a for a in addresses if not _valid_email(a)]
        if bad:
            raise ValidationError(f"not an email address: {', '.join(bad)}")
        return ", ".join(addresses)

    def clean_labels_text(self) -> list[LabelInput]:
        return parse_label_lines(self.cleaned_data["labels_text"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in RANGES:
            if name in data:
                try:
                    data[name] = self._clean_range(name)
                except ValidationError as exc:
                    self.add_error(name, exc)
        labels = data.get("labels_text")
        if isinstance(labels, list):
            known = {lab.name: lab.code for lab in self._current_labels()}
            labels = [
                lab if lab.code else LabelInput(lab.name, known.get(lab.name, ""), lab.description) for lab in labels
            ]
            try:
                data["few_shot"] = parse_few_shot(data.get("few_shot_text", ""), [lab.name for lab in labels])
            except ValidationError as exc:
                self.add_error("few_shot_text", exc)
            self._check_frozen(labels, data.get("few_shot"))
            if "labels_text" not in self.errors and "model_dir" not in self.errors:
                data["labels_text"] = self._verify_codes(labels, data.get("model_dir", ""))
                self.case_warnings = case_only_differences(data["labels_text"])
        return data

    def _check_frozen(self, labels: list[LabelInput], few_shot: list[dict[str, str]] | None) -> None:
        if self.frozen_round is None:
            return
        why = (
            f"round {self.frozen_round} exists, and editing them would change the prompt hash, so the scores and "
            "learning curve of earlier rounds would no longer compare. Start a new project to change them."
        )
        if few_shot is not None and few_shot != list(self.instance.few_shot or []):
            self.add_error("few_shot_text", f"Few-shot examples are frozen: {why}")
        current = [(lab.name, lab.code) for lab in self._current_labels()]
        wanted = [(lab.name, lab.code) for lab in labels]
        if wanted != current:
            self.add_error("labels_text", f"Label names and codes are frozen (descriptions may change): {why}")

    def _verify_codes(self, labels: list[LabelInput], model_dir: str) -> list[LabelInput]:
        """Fill empty codes with suggestions and check them all against the tokenizer. On a collision,
        name the colliding labels and pre-fill the textarea with codes that work."""
        from scoring.labels import LabelCodeError, label_token_ids, suggest_codes

        directory = model_dir_for(model_dir)
        try:
            tokenizer = load_tokenizer(directory)
        except (OSError, ValueError) as exc:
            self.add_error("model_dir", f"cannot load a tokenizer from {directory}: {exc}")
            return labels
        names = [lab.name for lab in labels]
        try:
            if any(not lab.code for lab in labels):
                proposed = suggest_codes(tokenizer, names)
                labels = [
                    lab if lab.code else LabelInput(lab.name, code, lab.description)
                    for lab, code in zip(labels, proposed, strict=True)
                ]
            label_token_ids(tokenizer, [lab.code for lab in labels], names)
        except LabelCodeError as exc:
            self.collisions = list(exc.collisions)
            self.suggested_codes = dict(exc.suggestions)
            self.add_error("labels_text", self._code_error_message(exc))
            self._prefill(labels)
        return labels

    def _code_error_message(self, exc: Any) -> str:
        problems = [f"“{a}” and “{b}” share a first token" for a, b in self.collisions]
        problems += [f"the code of “{name}” is not a single token" for name in getattr(exc, "multi_token", [])]
        head = f"These label codes do not work: {'; '.join(problems)}." if problems else f"{exc}."
        if not self.suggested_codes:
            return head
        proposal = ", ".join(f"{name} → {code}" for name, code in self.suggested_codes.items())
        return f"{head} Suggested codes (filled in below; check them and save again): {proposal}."

    def _prefill(self, labels: list[LabelInput]) -> None:
        fixed = [LabelInput(lab.name, self.suggested_codes.get(lab.name, lab.code), lab.description) for lab in labels]
        data = self.data.copy() if isinstance(self.data, QueryDict) else dict(self.data)
        data[self.add_prefix("labels_text")] = format_label_lines(fixed)
        self.data = data

    def project_fields(self) -> dict[str, Any]:
        fields = {name: self.cleaned_data[name] for name in self.Meta.fields if name != "name"}
        fields["few_shot"] = self.cleaned_data.get("few_shot", [])
        if not self.instance.pk:  # the profile's defaults the page has no field for (candidate_sample)
            fields.update({k: v for k, v in new_project_defaults().items() if k not in fields})
        return fields


def _valid_email(address: str) -> bool:
    try:
        validate_email(address)
    except ValidationError:
        return False
    return True


# Short enough for a phone's select (the ML page's help text says what active and portfolio do).
STRATEGY_NAMES = {
    "active": "Active (production)",
    "random": "Random (baseline, no scoring)",
    "uncertainty-only": "Uncertainty only (top scores)",
    "kcenter-only": "Diversity only (k-center)",
    "margin-kcenter": "Margin top-M, then k-center",
    "portfolio": "Portfolio (best measure wins)",
}
# What a round's strategy reads as on the Rounds page: the start form's names and the ones the app sets
# itself (the cold start's rounds, a requested final model).
ROUND_STRATEGY_NAMES = {
    **STRATEGY_NAMES,
    "active": "Active",
    "cold-start": "Cold start (typical items)",
    "final-model": "Final model",
}


class RoundStartForm(forms.Form):
    """The ML page's "start next round": the selection strategy (active unless another is picked)."""

    strategy = forms.ChoiceField(
        choices=[(s, STRATEGY_NAMES.get(s, s)) for s in STRATEGIES],
        initial="active",
        required=False,
        error_messages={"invalid_choice": f"unknown strategy %(value)s; expected one of {', '.join(STRATEGIES)}"},
    )

    def clean_strategy(self) -> str:
        return self.cleaned_data.get("strategy") or "active"


class AdjudicationForm(forms.Form):
    """A lead's decision: one of the project's labels, or 'unlabelable'."""

    decision = forms.ChoiceField(label="Final label")
    note = forms.CharField(required=False, max_length=2000)

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.labels = {str(lab.pk): lab for lab in project.labels.order_by("order", "id")}
        choices = [(pk, lab.name) for pk, lab in self.labels.items()]
        cast(forms.ChoiceField, self.fields["decision"]).choices = [
            *choices,
            (UNLABELABLE, "Unlabelable (out of the loop)"),
        ]

    def label(self) -> Label | None:
        decision = self.cleaned_data["decision"]
        return None if decision == UNLABELABLE else self.labels[decision]


class ProjectDeleteForm(forms.Form):
    """Deleting a project is confirmed by typing its name (the service checks it against the name)."""

    confirm_name = forms.CharField(
        label="Type the project's name to confirm",
        max_length=200,
        strip=False,
        widget=forms.TextInput({"autocomplete": "off"}),
    )
