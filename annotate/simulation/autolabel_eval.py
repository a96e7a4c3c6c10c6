"""Auto-labelling measured on items nobody labelled (issue 31): after a simulated job's last round, the
product's own path — a calibration split drawn at random from the pool and labelled by the simulated
annotator, the calibration (calibrator on the test set, per-class thresholds by fixed-sequence testing
on the split at each target precision), then the bulk job over the rest of the pool — and every
auto-accepted item checked against its oracle label, which no part of the pipeline saw.

One record per target in ``<out>/autolabel.jsonl``; ``bench/autoaccept_sim.py`` makes the tables.
Each target gets a run of its own over the same items: the previous target's decisions are deleted
first (a run skips items already decided under the same prompt and adapters, as it should in the
product; here each target must decide them all). The calibration split is drawn and labelled once,
so both targets rest on the same human labels."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import Count

from annotate.models import AutoLabel, AutolabelRun, Calibration, DeadLetter, Item, Label, Project
from predictor import thresholds as th

Log = Callable[[str], None]
CASCADE = "agreement"  # the app's default cascade (Calibration.cascade)


def class_outcomes(
    accepted: Sequence[tuple[int, int]], label_ids: Sequence[int], names: Sequence[str], *, target: float, delta: float
) -> list[dict[str, Any]]:
    """Per class (label order): the accepted items it was given, how many of them the oracle agrees
    with, the realised precision with its two-sided Clopper–Pearson interval at ``delta``, whether the
    point estimate reaches the target, and the alarm (the whole interval under it). ``accepted`` holds
    (given label id, oracle label id) pairs."""
    out = []
    for label_id, name in zip(label_ids, names, strict=True):
        mine = [truth for given, truth in accepted if given == label_id]
        right = sum(truth == label_id for truth in mine)
        realised = th.realised_precision(name, right, len(mine), target=target, alpha=delta)
        out.append(
            {
                "label": name,
                "accepted": len(mine),
                "correct": right,
                "precision": realised.precision,
                "ci": [realised.ci_low, realised.ci_high],
                "meets": realised.precision is not None and realised.precision >= target,
                "alarm": realised.alarm,
            }
        )
    return out


def _calibrate(project: Project, target: float, delta: float) -> Calibration:
    """A calibration at ``target``, run in this process (the services' inline queue)."""
    from annotate.services import autolabel as auto

    made: list[Calibration] = []
    auto.run_inline(
        lambda send: made.append(
            auto.calibration_request(project=project, target=target, delta=delta, cascade=CASCADE, dispatch=send)
        )
    )
    calibration = Calibration.objects.get(id=made[0].id)
    if calibration.status != Calibration.Status.DONE:
        raise RuntimeError(f"calibration at {target} failed: {calibration.error}")
    return calibration


def _run(project: Project) -> AutolabelRun:
    """The bulk job over the unlabelled pool on the latest calibration, run in this process."""
    from annotate.services import autolabel as auto

    made: list[AutolabelRun] = []
    auto.run_inline(lambda send: made.append(auto.run_request(project=project, dispatch=send)))
    return AutolabelRun.objects.get(id=made[0].id)


def autolabel_eval(
    *,
    project: Project,
    annotator: Any,
    targets: Sequence[float],
    calibration_items: int,
    delta: float,
    seed: int,
    context: dict[str, Any],
    label_batch: Callable[..., int],
    log: Log = print,
) -> list[dict[str, Any]]:
    """The calibration split, then per target a calibration and a bulk run, each run's accepted items
    against the oracle. Returns one record per target (the caller appends them)."""
    from annotate.selectors import autolabel as auto_sel
    from annotate.services import autolabel as auto

    started = time.perf_counter()
    drawn = auto.calibration_split_draw(project=project, n=calibration_items, seed=seed)
    labelled = label_batch(project=project, annotator=annotator)  # the people round the draw opened
    counts = auto_sel.calibration_split_counts(project=project)
    if counts["labelled"] < drawn:
        raise RuntimeError(f"calibration split: {counts['labelled']} of {drawn} drawn items labelled")
    log(f"calibration split: {drawn} drawn, {labelled} labelled in {time.perf_counter() - started:.1f}s")
    labels = list(Label.objects.filter(project=project).order_by("order", "id").values_list("id", "name"))
    label_ids, names = [pk for pk, _ in labels], [name for _, name in labels]
    records = []
    for target in targets:
        AutoLabel.objects.filter(item__project=project).delete()  # the previous target's decisions
        t0 = time.perf_counter()
        calibration = _calibrate(project, target, delta)
        t1 = time.perf_counter()
        run = _run(project)
        t2 = time.perf_counter()
        rows = list(AutoLabel.objects.filter(run=run).values_list("item_id", "label_id", "decision"))
        truth = dict(Item.objects.filter(id__in=[r[0] for r in rows]).values_list("id", "gold_label_id"))
        accepted = [(label, truth[item]) for item, label, decision in rows if decision == AutoLabel.Decision.ACCEPTED]
        by_tier = dict(
            AutoLabel.objects.filter(run=run, decision=AutoLabel.Decision.ACCEPTED)
            .values("tier")
            .annotate(n=Count("id"))
            .values_list("tier", "n")
        )
        rules = {r["label"]: r for r in (calibration.thresholds or {}).get("model", [])}
        per_class = class_outcomes(accepted, label_ids, names, target=target, delta=delta)
        for row in per_class:
            rule = rules.get(row["label"], {})
            row["threshold"] = rule.get("threshold")
            row["calibration_predicted"] = rule.get("n_predicted")
            row["needed"] = rule.get("needed")
        right = sum(given == oracle for given, oracle in accepted)
        overall = th.realised_precision("all", right, len(accepted), target=target, alpha=delta)
        dead = dict(
            DeadLetter.objects.filter(run=run).values("reason").annotate(n=Count("id")).values_list("reason", "n")
        )
        record = {
            **context,
            "kind": "autolabel",
            "target": target,
            "delta": delta,
            "cascade": CASCADE,
            "calibration_items": drawn,
            "calibration_id": calibration.id,
            "n_eval_items": calibration.n_items,
            "n_calibration": calibration.n_calibration,
            "ece_before": (calibration.before or {}).get("ece"),
            "ece_after": (calibration.after or {}).get("ece"),
            "classes_with_threshold": sum(r.get("threshold") is not None for r in rules.values()),
            "tier2_classes_with_threshold": sum(
                r.get("threshold") is not None for r in (calibration.thresholds or {}).get(CASCADE, [])
            ),
            "n_classes": len(names),
            "run_status": run.status,
            "run_reason": run.reason,
            "n_items": run.n_items,
            "decided": len(rows),
            "accepted": len(accepted),
            "accepted_by_tier": by_tier,
            "dead_letters": dead,
            "coverage": len(accepted) / run.n_items if run.n_items else 0.0,
            "correct": right,
            "precision": overall.precision,
            "precision_ci": [overall.ci_low, overall.ci_high],
            "per_class": per_class,
            "seconds": {"calibrate": round(t1 - t0, 2), "run": round(t2 - t1, 2)},
        }
        records.append(record)
        shown = "—" if overall.precision is None else f"{overall.precision:.3f}"
        log(
            f"auto-labelling at {target:.2f}: {len(accepted)} of {run.n_items} accepted"
            f" ({record['coverage']:.1%}), realised precision {shown}; calibrate {t1 - t0:.1f}s, run {t2 - t1:.1f}s"
        )
    return records
