"""The managed-batch road for the items still to label: export a batch-API request manifest, import
its results file back (scoring/batch_manifest.py holds the format). Import is idempotent by
(item, prompt version) and refuses a file answered under another prompt version, whole."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import transaction

from annotate.loopconfig import prompt_spec
from annotate.models import BatchApiAnswer, Item, Label, Project
from annotate.selectors import autolabel as auto_sel
from scoring import batch_manifest


def manifest_export(*, project: Project, model: str = "") -> Iterator[str]:
    """Request lines for the unlabelled pool less the items already answered under this prompt."""
    spec = prompt_spec(project)
    version = batch_manifest.prompt_version(spec)
    answered = BatchApiAnswer.objects.filter(project=project, prompt_version=version).values("item_id")
    items = auto_sel.unlabelled_pool(project=project).exclude(id__in=answered).order_by("id")
    yield from batch_manifest.manifest_lines(spec, items.values_list("id", "text").iterator(), model=model)


@dataclass(frozen=True)
class ImportResult:
    version: str
    answers: int
    added: int  # new (item, prompt version) rows; 0 when the same file is imported again


def results_import(*, project: Project, lines: Iterable[str]) -> ImportResult:
    """Read a results file (ManifestError refuses it whole) and keep one answer per (item, prompt
    version): a repeat import, or a line answered twice, adds nothing."""
    spec = prompt_spec(project)
    answers = batch_manifest.parse_results(lines, spec)
    version = batch_manifest.prompt_version(spec)
    label_ids = list(Label.objects.filter(project=project).order_by("order", "id").values_list("id", flat=True))
    known = set(Item.objects.filter(project=project, id__in=[a.item_id for a in answers]).values_list("id", flat=True))
    strangers = sorted({a.item_id for a in answers} - known)
    if strangers:
        raise batch_manifest.ManifestError(f"items {strangers[:5]} are not in this project")
    rows = [
        BatchApiAnswer(project=project, item_id=a.item_id, prompt_version=version, label_id=label_ids[a.label_index])
        for a in answers
    ]
    with transaction.atomic():
        before = BatchApiAnswer.objects.filter(project=project, prompt_version=version).count()
        BatchApiAnswer.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
        after = BatchApiAnswer.objects.filter(project=project, prompt_version=version).count()
    return ImportResult(version=version, answers=len(answers), added=after - before)
