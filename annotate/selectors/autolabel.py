"""Reads for auto-labelling: evaluation items, the latest calibration, run progress with ETA, tier
counts, the audit's measured precision, dead letters, the budget estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Value
from django.utils import timezone

from annotate.models import AutoLabel, AutolabelRun, Calibration, DeadLetter, GoldItem, Item, Project
from annotate.selectors import loop as loop_sel
from predictor import calibrate as cal

TIER_ORDER = ("model", "agreement", "permuted", "second_model")


@dataclass(frozen=True)
class EvalItems:
    item_ids: list[int]
    texts: list[str]
    hashes: list[str]
    y: list[int]
    is_gold: list[bool]


def eval_items(*, project: Project) -> EvalItems:
    """Human-labelled evaluation items the calibrator is fitted on and reported against: the test set
    and the gold set (not the calibration split), with their final labels."""
    gold = GoldItem.objects.filter(item=OuterRef("pk"), purpose=GoldItem.Purpose.GOLD)
    calibration = GoldItem.objects.filter(item=OuterRef("pk"), purpose=GoldItem.Purpose.CALIBRATION)
    rows = (
        Item.objects.filter(project=project, final_label__isnull=False)
        .filter(Q(is_test=True) | Q(Exists(gold)))
        .exclude(Exists(calibration))
    )
    return _labelled(project, rows.annotate(in_gold=Exists(gold)))


def calibration_inputs(*, project: Project) -> EvalItems:
    """The labelled items of the calibration split: the only items auto-accept thresholds are fitted
    on (drawn at random from the pool, disjoint from the test set, the gold set and training)."""
    calibration = GoldItem.objects.filter(item=OuterRef("pk"), purpose=GoldItem.Purpose.CALIBRATION)
    rows = Item.objects.filter(project=project, final_label__isnull=False, is_test=False).filter(Exists(calibration))
    return _labelled(project, rows.annotate(in_gold=Value(False)))


def calibration_split_counts(*, project: Project) -> dict[str, int]:
    split = GoldItem.objects.filter(project=project, purpose=GoldItem.Purpose.CALIBRATION)
    return {"drawn": split.count(), "labelled": split.filter(item__final_label__isnull=False).count()}


def _labelled(project: Project, rows: QuerySet[Item]) -> EvalItems:
    index = loop_sel.label_index(project=project)
    fields = ("id", "text", "text_hash", "final_label_id", "in_gold")  # in_gold: annotated by the caller
    rows_list = list(rows.order_by("id").values_list(*fields))
    return EvalItems(
        item_ids=[r[0] for r in rows_list],
        texts=[r[1] for r in rows_list],
        hashes=[r[2] for r in rows_list],
        y=[index[r[3]] for r in rows_list],
        is_gold=[bool(r[4]) for r in rows_list],
    )


def unlabelled_pool(*, project: Project) -> QuerySet[Item]:
    """What "label the pool" works on: non-test, non-gold pool items without a final label or any
    human annotation (an item people are on is theirs)."""
    from annotate.models import Annotation

    return (
        Item.objects.filter(project=project, is_test=False, state=Item.State.POOL, final_label__isnull=True)
        .exclude(Exists(GoldItem.objects.filter(item=OuterRef("pk"))))
        .exclude(Exists(Annotation.objects.filter(item=OuterRef("pk"))))
    )


def latest_calibration(*, project: Project, done: bool = False) -> Calibration | None:
    rows = Calibration.objects.filter(project=project)
    if done:
        rows = rows.filter(status=Calibration.Status.DONE)
    return rows.order_by("-id").first()


def latest_run(*, project: Project) -> AutolabelRun | None:
    return AutolabelRun.objects.filter(project=project).order_by("-id").first()


def tier_counts(*, run: AutolabelRun) -> list[dict[str, Any]]:
    """Per cascade tier: tried, accepted, escalated. Counted from the result rows (a redelivered
    shard rewrites its rows, so it cannot count twice). A row's tier is where it was decided: every
    row was tried by tier 1, rows decided by tier 2 were tried by it too."""
    grouped = AutoLabel.objects.filter(run=run).values("tier", "decision").annotate(n=Count("id")).order_by()
    by = {(g["tier"], g["decision"]): g["n"] for g in grouped}
    total = sum(by.values())
    accepted_1 = by.get(("model", AutoLabel.Decision.ACCEPTED), 0)
    rows = [{"tier": "model", "tried": total, "accepted": accepted_1, "escalated": total - accepted_1}]
    for tier in TIER_ORDER[1:]:
        acc, esc = by.get((tier, AutoLabel.Decision.ACCEPTED), 0), by.get((tier, AutoLabel.Decision.ESCALATED), 0)
        if acc or esc or tier == run.calibration.cascade:
            rows.append({"tier": tier, "tried": acc + esc, "accepted": acc, "escalated": esc})
    return rows


@dataclass(frozen=True)
class RunProgress:
    run: AutolabelRun
    percent: int
    eta_seconds: float | None
    tiers: list[dict[str, Any]]
    dead_letters: int
    prefix_cache_hit_rate: float | None
    items_per_second: float | None

    @property
    def active(self) -> bool:
        return self.run.status in (AutolabelRun.Status.PENDING, AutolabelRun.Status.RUNNING)


def run_progress(*, run: AutolabelRun) -> RunProgress:
    elapsed = ((run.finished_at or timezone.now()) - run.started_at).total_seconds() if run.started_at else 0.0
    k = max(1, int(run.counts.get("k", 1))) if isinstance(run.counts, dict) else 1
    hit = 1.0 - run.computed_tokens / (run.tokens * k) if run.tokens and run.computed_tokens else None
    return RunProgress(
        run=run,
        percent=round(100 * run.items_done / run.n_items) if run.n_items else (100 if run.status == "done" else 0),
        eta_seconds=cal.eta_seconds(done=run.items_done, total=run.n_items, elapsed=elapsed)
        if run.status == AutolabelRun.Status.RUNNING
        else None,
        tiers=tier_counts(run=run),
        dead_letters=DeadLetter.objects.filter(run=run, resolved=False).count(),
        prefix_cache_hit_rate=hit,
        items_per_second=run.items_done / run.seconds if run.seconds else None,
    )


def audit_statuses(*, calibration: Calibration) -> list[cal.AuditStatus]:
    """Per class, live: audited auto labels (of every run on this calibration) whose item now has a
    human final label, right or wrong: realised precision with its Clopper–Pearson interval and the
    alarm flag."""
    rows = (
        AutoLabel.objects.filter(run__calibration=calibration, audit__in=["pending", "passed", "failed"])
        .filter(item__final_label__isnull=False)
        .values_list("label__name", "label_id", "item__final_label_id")
    )
    return _realised(calibration, rows)


def oracle_precision(*, calibration: Calibration) -> list[cal.AuditStatus]:
    """Per class: every auto-accepted item of this calibration's runs checked against its oracle
    label (``Item.gold_label``: the simulation's truth, or a gold column of the import) — labels the
    pipeline never saw. Empty where no item has one."""
    rows = AutoLabel.objects.filter(
        run__calibration=calibration, decision=AutoLabel.Decision.ACCEPTED, item__gold_label__isnull=False
    ).values_list("label__name", "label_id", "item__gold_label_id")
    found = _realised(calibration, rows)
    return found if any(s.audited for s in found) else []


def _realised(calibration: Calibration, rows: Any) -> list[cal.AuditStatus]:
    tally: dict[str, list[int]] = {}
    for name, label_id, truth_id in rows:
        entry = tally.setdefault(name, [0, 0])
        entry[0] += int(label_id == truth_id)
        entry[1] += 1
    names = loop_sel.label_names(project=calibration.project)
    return [
        cal.audit_status(name, tally.get(name, [0, 0])[0], tally.get(name, [0, 0])[1], target=calibration.target)
        for name in names
    ]


def audits_waiting(*, calibration: Calibration) -> int:
    return AutoLabel.objects.filter(
        run__calibration=calibration, audit=AutoLabel.Audit.PENDING, item__final_label__isnull=True
    ).count()


def dead_letters(*, project: Project, include_resolved: bool = False) -> QuerySet[DeadLetter]:
    rows = DeadLetter.objects.filter(run__project=project).select_related("item", "run")
    if not include_resolved:
        rows = rows.filter(resolved=False)
    return rows.order_by("-updated_at", "-id")


def budget(*, project: Project, calibration: Calibration) -> dict[str, Any]:
    """GPU-hours and wall time for 1…8 workers over the unlabelled pool, from the fastest measured
    rate on this engine and device: finished runs first, else the calibration's own scoring."""
    decided = AutoLabel.objects.filter(
        item__project=project, prompt_hash=calibration.prompt_hash, adapter_set_hash=calibration.adapter_set_hash
    ).values("item_id")
    waiting = DeadLetter.objects.filter(
        run__project=project,
        run__prompt_hash=calibration.prompt_hash,
        run__adapter_set_hash=calibration.adapter_set_hash,
        resolved=False,
    ).values("item_id")  # theirs is the dead-letter retry, not a launch
    n_items = unlabelled_pool(project=project).exclude(id__in=decided).exclude(id__in=waiting).count()
    rate = dict(calibration.rate or {})
    measured = (
        AutolabelRun.objects.filter(project=project, seconds__gt=0, calibration__rate__engine=rate.get("engine"))
        .order_by("-id")
        .first()
    )
    source = "calibration scoring"
    tokens_per_second = float(rate.get("tokens_per_second", 0.0))
    if measured is not None and measured.tokens:
        tokens_per_second, source = measured.tokens / measured.seconds, f"run #{measured.id}"
    tokens_per_item = float(rate.get("tokens_per_item", 0.0))
    if tokens_per_second <= 0 or tokens_per_item <= 0:
        return {"n_items": n_items, "rows": [], "source": "no measured rate yet"}
    estimate = cal.budget_estimate(
        n_items=n_items, tokens_per_item=tokens_per_item, tokens_per_second=tokens_per_second
    )
    rows: list[dict[str, Any]] = [{**row, "wall": _duration(row["wall_hours"] * 3600)} for row in estimate]
    return {
        "n_items": n_items,
        "rows": rows,
        "source": source,
        "tokens_per_second": tokens_per_second,
        "device": rate.get("device", ""),
        "engine": rate.get("engine", ""),
    }


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def threshold_rows(*, calibration: Calibration) -> list[dict[str, Any]]:
    """One row per (tier, class) for the review table: threshold, eval items, coverage, expected
    precision and the error bound."""
    out = []
    for tier in TIER_ORDER:
        for row in (calibration.thresholds or {}).get(tier, []):
            blocked = (calibration.blocked or {}).get(row["label"], "")
            out.append({"tier": tier, **row, "precision_bound": 1.0 - row["error_bound"], "blocked": blocked})
    return out
