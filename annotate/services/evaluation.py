"""The evaluation step of a round (evaluating → done), held as the round's ``evaluate`` unit by one
live worker: the fixed random test set scored by the new prod ensemble, the scratch member and the
arms; accuracy, macro-F1, per-class, confusion, ECE + reliability, Cohen's κ model-vs-human next to
human-human; the learning-curve points and SVG; the round's cost.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Sum

from annotate import testhooks
from annotate.loopconfig import loop_config
from annotate.models import AdapterVersion, Annotation, Round, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import claims
from annotate.services.round_state import S, add_cost, read_plan, round_transition
from scoring import pipeline
from scoring.device import device_kind
from training import curves, ensemble


def _clean(value: Any) -> Any:
    """JSON-safe: NaN / inf (no pairs for κ, one test item) become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.floating | np.integer):
        return _clean(value.item())
    return value


def _kappas(row: Round, test_ids: list[int], pred: np.ndarray, n_classes: int) -> dict[str, Any]:
    """Cohen's κ of the model against the humans on test items, next to human against human."""
    from annotate.selectors.agreement import cohen_kappa

    pred_of = dict(zip(test_ids, pred.tolist(), strict=True))
    ids, firsts, a, b = loop_sel.human_pairs_on_test(project=row.project)
    model = [pred_of[i] for i in ids if i in pred_of]
    human = [h for i, h in zip(ids, firsts, strict=True) if i in pred_of]
    return {
        "kappa_model_human": cohen_kappa(np.array(model), np.array(human), n_classes) if model else None,
        "kappa_model_human_n": len(model),
        "kappa_human_human": cohen_kappa(np.array(a), np.array(b), n_classes) if a else None,
        "kappa_human_human_n": len(a),
    }


def _evaluate_arms(row: Round, scores: dict[str, tuple[dict[str, Any], np.ndarray]], y: np.ndarray) -> dict[str, Any]:
    """The active vs random comparison at equal labels, with the gain and its uncertainty."""
    from training.evaluate import gain_with_uncertainty

    if "active" not in scores or "random" not in scores:
        return {}
    n_labels = int(AdapterVersion.objects.get(round=row, arm="random", k=0).n_labels)
    correct = {arm: scores[arm][1].argmax(axis=1) == y for arm in ("active", "random")}
    gain = gain_with_uncertainty(
        scores["active"][0]["accuracy"],
        scores["random"][0]["accuracy"],
        len(y),
        labels=n_labels,
        correct_active=correct["active"],
        correct_random=correct["random"],
    )
    return {
        "arms": {
            arm: {"accuracy": scores[arm][0]["accuracy"], "macro_f1": scores[arm][0]["macro_f1"], "labels": n_labels}
            for arm in ("active", "random")
        },
        "gain": gain,
        "gain_text": gain["sentence"],
    }


def _score_sets(row: Round, texts: list[str], y: np.ndarray) -> dict[str, tuple[dict[str, Any], np.ndarray]]:
    """Metrics and mean distribution per adapter set: prod (the ensemble), prod0 (its first member
    alone), and where trained: scratch, active, random."""
    config = loop_config(row.project)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    engine = ensemble.make_engine(config)
    names = loop_sel.label_names(project=row.project)
    out: dict[str, tuple[dict[str, Any], np.ndarray]] = {}
    by_arm: dict[str, list[AdapterVersion]] = {}
    for adapter in AdapterVersion.objects.filter(round=row).order_by("arm", "k"):
        by_arm.setdefault(adapter.arm, []).append(adapter)
    for arm, adapters in by_arm.items():
        metrics, p_mean = ensemble.evaluate_adapters(engine, renderer, texts, y, loop_sel.adapter_refs(adapters), names)
        out[arm] = (metrics, p_mean)
    if "scratch" in out and len(by_arm["prod"]) > 1:
        metrics, p_mean = ensemble.evaluate_adapters(
            engine, renderer, texts, y, loop_sel.adapter_refs(by_arm["prod"][:1]), names
        )
        out["prod0"] = (metrics, p_mean)
    elif "scratch" in out:
        out["prod0"] = out["prod"]
    return out


def _points(row: Round, metrics: dict[str, Any], labels_used: int) -> list[dict[str, Any]]:
    """Learning-curve points of every finished round of the project plus this one."""
    points: list[dict[str, Any]] = []
    for earlier in Round.objects.filter(project=row.project, status=S.DONE, number__lt=row.number).order_by("number"):
        points.extend(p for p in (earlier.metrics or {}).get("points", []) if p.get("round") == earlier.number)
    if "accuracy" in metrics:
        points.append({"round": row.number, "arm": "prod", "labels": labels_used, "accuracy": metrics["accuracy"]})
    for arm, values in metrics.get("arms", {}).items():
        points.append({"round": row.number, "arm": arm, "labels": values["labels"], "accuracy": values["accuracy"]})
    return points


def _cost(row: Round, metrics: dict[str, Any], labels_used: int) -> dict[str, Any]:
    fresh = Round.objects.get(id=row.id)
    cost = dict(fresh.cost or {})
    annotations = Annotation.objects.filter(round=row)
    seconds = annotations.aggregate(s=Sum("seconds_spent"))["s"] or 0.0
    cost.update({"labels": annotations.count(), "labels_total": labels_used, "human_minutes": round(seconds / 60, 2)})
    previous = (
        Round.objects.filter(project=row.project, status=S.DONE, number__lt=row.number).order_by("-number").first()
    )
    before = (previous.metrics or {}) if previous is not None else {}
    if "accuracy" in metrics and "accuracy" in before and labels_used > int(before.get("labels", 0)):
        gained = metrics["accuracy"] - float(before["accuracy"])
        cost["accuracy_gain_per_100_labels"] = round(100 * gained / (labels_used - int(before["labels"])), 4)
    return cost


def round_evaluate_run(*, round_id: int) -> Round:
    """evaluating → done with Round.metrics and Round.cost. Recomputes everything on a replay."""
    return claims.run_round_step(
        round_id, status=S.EVALUATING, kind=WorkClaim.Kind.EVALUATE, what="the evaluation", step=_evaluate
    )


def _evaluate(row: Round) -> None:
    started = time.perf_counter()
    test_ids, texts, y = loop_sel.test_items(project=row.project)
    labels_used = len(read_plan(row)["prod:0"])
    metrics: dict[str, Any] = {"labels": labels_used, "test_n": len(test_ids)}
    if test_ids:
        scores = _score_sets(row, texts, y)
        prod, p_prod = scores["prod"]
        n_classes = p_prod.shape[1]
        metrics = {
            "accuracy": prod["accuracy"],
            "macro_f1": prod["macro_f1"],
            "ece": prod["ece"],
            **_kappas(row, test_ids, p_prod.argmax(axis=1), n_classes),
            **metrics,
            "prod": prod,
            **_evaluate_arms(row, scores, y),
        }
        if "scratch" in scores:
            warm, scratch = scores["prod0"][0], scores["scratch"][0]
            metrics["scratch_vs_warm"] = {
                "scratch_accuracy": scratch["accuracy"],
                "warm_accuracy": warm["accuracy"],
                "scratch_minus_warm": scratch["accuracy"] - warm["accuracy"],
            }
    else:
        metrics["note"] = "the test set has no labels yet: label it (annotator test queue) or import gold labels"
    metrics.update({k: v for k, v in (row.metrics or {}).items() if k not in metrics and not k.endswith("_svg")})
    metrics["points"] = _points(row, metrics, labels_used)
    if metrics["points"]:
        title = f"{row.project.name}: test accuracy vs labels"
        if metrics.get("gain_text"):
            title += f"\n{metrics['gain_text']}"
        metrics["curve_svg"] = curves.curves_svg(metrics["points"], title)
    if "prod" in metrics:
        metrics["reliability_svg"] = curves.reliability_svg(
            metrics["prod"]["reliability"], title=f"Round {row.number} reliability"
        )
    testhooks.stall("evaluate", row.number)
    add_cost(round_id=row.id, step="evaluating", seconds=time.perf_counter() - started, device=device_kind())
    with transaction.atomic():
        round_transition(row.id, S.EVALUATING, S.DONE, metrics=_clean(metrics), cost=_cost(row, metrics, labels_used))
