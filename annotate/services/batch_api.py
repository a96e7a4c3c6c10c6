"""The managed-batch road for the items still to label: export a batch-API request manifest, import
its results file back (scoring/batch_manifest.py holds the format) and decide the answers like the
engine's scores. Import is idempotent by (item, prompt version) and refuses a file answered under
another prompt version, whole.

Deciding (``answers_decide``): an answer with a distribution over the labels (the provider's logprobs)
goes through the latest calibration exactly as a shard's scores do (annotate.services.autolabel.Decisions:
the calibrator, each class's tier-1 threshold, none for a class the audit blocked, the random audit,
the people queue), into AutoLabel rows keyed by (item, prompt version, BATCH_API_KEY) of one
``batch_api`` run per import that had anything to decide: a second import of the same file finds every
answer decided and writes nothing. The thresholds are used only if the calibration was fitted under the
prompt the answers answered (its fingerprint's ``prompt version``); else nothing is decided and the
result says why. What the engine's cascade tiers would try (agreement of the adapters, permuted codes, a
second model) needs the local engine: an answer under its class's threshold goes to people, and so does
one whose label mass is under the project's threshold. An answer without logprobs has no confidence to
hold to a threshold: it is kept, undecided, and counted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from annotate.loopconfig import prompt_spec
from annotate.models import AutoLabel, AutolabelRun, BatchApiAnswer, Calibration, Item, Label, Project
from annotate.selectors import autolabel as auto_sel
from annotate.services import autolabel as auto
from scoring import batch_manifest

BATCH_API_KEY = "batch-api"  # AutoLabel.adapter_set_hash of answered items: no adapter of ours scored them
DEFAULT_AUDIT_SHARE = 0.02  # as the engine's runs: one answer in 50 accepted goes to people as well
CHUNK = 2000  # answers decided per write, as a shard's checkpoint: bounded memory and statement size


def manifest_export(*, project: Project, model: str = "") -> Iterator[str]:
    """Request lines for the unlabelled pool less the items already answered under this prompt."""
    spec = prompt_spec(project)
    version = batch_manifest.prompt_version(spec)
    answered = BatchApiAnswer.objects.filter(project=project, prompt_version=version).values("item_id")
    items = auto_sel.unlabelled_pool(project=project).exclude(id__in=answered).order_by("id")
    yield from batch_manifest.manifest_lines(spec, items.values_list("id", "text").iterator(), model=model)


@dataclass(frozen=True)
class Decided:
    """What ``answers_decide`` did with the answers of one prompt version."""

    run: int | None = None  # the batch_api AutolabelRun it wrote (None: nothing to decide, or refused)
    accepted: int = 0
    escalated: int = 0  # to people: under the threshold, a class without one, or under the label mass
    audited: int = 0  # accepted and also given to people (the random audit)
    without_probs: int = 0  # no logprobs in the file: kept, undecided
    refused: str = ""  # why nothing was decided (no calibration, another prompt)


@dataclass(frozen=True)
class ImportResult:
    version: str
    answers: int
    added: int  # new (item, prompt version) rows; 0 when the same file is imported again
    decided: Decided = field(default_factory=Decided)


def results_import(*, project: Project, lines: Iterable[str], audit_share: float = DEFAULT_AUDIT_SHARE) -> ImportResult:
    """Read a results file (ManifestError refuses it whole), keep one answer per (item, prompt version):
    a repeat import, or a line answered twice, adds nothing; then decide what is undecided."""
    spec = prompt_spec(project)
    answers = batch_manifest.parse_results(lines, spec)
    version = batch_manifest.prompt_version(spec)
    label_ids = list(Label.objects.filter(project=project).order_by("order", "id").values_list("id", flat=True))
    known = set(Item.objects.filter(project=project, id__in=[a.item_id for a in answers]).values_list("id", flat=True))
    strangers = sorted({a.item_id for a in answers} - known)
    if strangers:
        raise batch_manifest.ManifestError(f"items {strangers[:5]} are not in this project")
    rows = [
        BatchApiAnswer(
            project=project,
            item_id=a.item_id,
            prompt_version=version,
            label_id=label_ids[a.label_index],
            probs=list(a.probs),
            mass=a.mass,
        )
        for a in answers
    ]
    with transaction.atomic():
        before = BatchApiAnswer.objects.filter(project=project, prompt_version=version).count()
        BatchApiAnswer.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
        after = BatchApiAnswer.objects.filter(project=project, prompt_version=version).count()
    decided = answers_decide(project=project, version=version, audit_share=audit_share)
    return ImportResult(version=version, answers=len(answers), added=after - before, decided=decided)


def answers_decide(*, project: Project, version: str, audit_share: float = DEFAULT_AUDIT_SHARE) -> Decided:
    """Decide the answers of ``version`` not decided yet whose item is still to label, on the latest
    finished calibration (see the module's docstring)."""
    if not 0.0 <= audit_share <= 0.5:
        raise auto.AutolabelError(f"audit share must be in [0, 0.5], got {audit_share}")
    calibration = auto_sel.latest_calibration(project=project, done=True)
    reason = _refusal(calibration, version)
    if reason or calibration is None:
        return Decided(refused=reason)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # one import decides at a time
        pending = _undecided(project, version)
        decidable = [(item_id, probs, mass) for item_id, probs, mass in pending if probs]
        if not decidable:
            return Decided(without_probs=len(pending))
        auto.audit_refresh(calibration=calibration)  # classes whose audit fails are blocked before deciding
        run = _batch_run(project, calibration, version, audit_share=audit_share, n_items=len(decidable))
        decisions, accepted = auto.Decisions(run), 0
        for start in range(0, len(decidable), CHUNK):
            chunk = decidable[start : start + CHUNK]
            p = np.array([probs for _, probs, _ in chunk], dtype=np.float64)[None]  # [K=1, N, C]
            # under the label mass the engine's path writes a dead letter to rescore; an answer cannot be: people
            low = _under_mass(project, [mass for _, _, mass in chunk])
            accepted += int(decisions.write([i for i, _, _ in chunk], p, tier2=None, to_people=low).sum())
    return Decided(
        run=run.id,
        accepted=accepted,
        escalated=len(decidable) - accepted,
        audited=AutoLabel.objects.filter(run=run, audit=AutoLabel.Audit.PENDING).count(),
        without_probs=len(pending) - len(decidable),
    )


def _refusal(calibration: Calibration | None, version: str) -> str:
    if calibration is None:
        return "no finished calibration: calibrate first, then import the file again (its answers are kept)"
    fitted_on = (calibration.fingerprint or {}).get("prompt version", "")
    if fitted_on != version:
        return (
            f"the answers are for prompt version {version}, calibration #{calibration.pk} was fitted under "
            f"{fitted_on or 'an earlier prompt'}: recalibrate under this prompt, then import the file again "
            "(its answers are kept)"
        )
    return ""


def _undecided(project: Project, version: str) -> list[tuple[int, list[float], float | None]]:
    """(item id, probs, mass) of the answers without a decision whose item people have not taken up."""
    decided = AutoLabel.objects.filter(item=OuterRef("item"), prompt_hash=version, adapter_set_hash=BATCH_API_KEY)
    open_items = auto_sel.unlabelled_pool(project=project).values("id")
    rows = (
        BatchApiAnswer.objects.filter(project=project, prompt_version=version, item_id__in=open_items)
        .exclude(Exists(decided))
        .order_by("item_id")
    )
    return list(rows.values_list("item_id", "probs", "mass"))


def _batch_run(
    project: Project, calibration: Calibration, version: str, *, audit_share: float, n_items: int
) -> AutolabelRun:
    now = timezone.now()
    return AutolabelRun.objects.create(
        project=project,
        calibration=calibration,
        source=AutolabelRun.Source.BATCH_API,
        status=AutolabelRun.Status.DONE,
        prompt_hash=version,
        adapter_set_hash=BATCH_API_KEY,
        # the answers are a batch API's model under this prompt version, not our predictor's
        model_version=f"{BATCH_API_KEY}:{version}"[:64],
        audit_share=audit_share,
        seed=project.seed,
        n_items=n_items,
        items_done=n_items,
        started_at=now,
        finished_at=now,
        counts={"k": 1},
    )


def _under_mass(project: Project, masses: list[float | None]) -> np.ndarray:
    """Answers whose label mass is known and under the project's review threshold."""
    return np.array([m is not None and m < project.mass_threshold for m in masses], dtype=bool)
