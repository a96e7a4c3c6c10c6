"""The evaluation step of a round (evaluating → done), held as the round's ``evaluate`` unit by one
live worker: the fixed random test set scored by the new prod ensemble, the scratch member and the
arms; accuracy, macro-F1, per-class, confusion, ECE + reliability, Cohen's κ model-vs-human next to
human-human; the prod ensemble's predictions on the fixed stop set (the stopping criterion's input);
the learning-curve points and SVG; the round's cost.

The round's predictor is the prod ensemble blended with the embedding proxy (predictor/blend.py): the
round's own batch is first stored as held-out evidence (the adapters and the proxy of the round
before never saw its labels), then the weight that predicted the latest batches best is applied to
the test and stop sets. Loop option ``blend: "off"`` predicts with the adapters alone.

With loop option ``eval_shards`` N > 0 (the GPU profile's 4) the scoring comes first, split: N
``eval_shard`` units (``eval_shard_run``), one per gpu worker that takes one, each score their slice of
every set the evaluation scores (``evaluation_jobs``) into the round's evaluation score cache
(``eval_cache``: scoring/cache.py, keyed by text, prompt and adapter set); the ``evaluate`` unit then
reads them there and computes the metrics as before (anything no shard scored it scores itself). Without,
the evaluate unit scores everything alone.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import F, Sum, Value
from django.db.models.functions import Least

from annotate import steppoints
from annotate.loopconfig import round_config, round_eval_shards, round_frozen, round_stop_set_size, worker_config
from annotate.models import AdapterVersion, Annotation, BatchItem, Round, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import jobs
from annotate.services.projects import stop_set_draw
from annotate.services.proxy import item_texts, plan_proxy_probabilities
from annotate.services.round_state import (
    COMPARISON,
    COMPARISON_DONE,
    COMPARISON_EVALUATING_COST,
    COMPARISON_RUNNING,
    COMPARISON_WAITING,
    S,
    add_cost,
    comparison_give_up,
    comparison_keys,
    comparison_mark,
    plan_path,
    read_plan,
    round_dir,
    round_transition,
)
from predictor import blend
from scoring import pipeline
from scoring.cache import ScoreCache, text_hash
from scoring.device import device_kind
from scoring.toplayers import adapted_layers, adapter_config
from scoring.uncertainty import mean_distribution
from training import curves, ensemble
from training.lora import ADAPTER_CONFIG, TRAINING_INFO, WIDE_LABELS

HELDOUT_FILE = "heldout.npz"
# Prompts per engine call while evaluating: the round page's progress bar and ETA move every few seconds
# on a CPU (issue 32, problem 5: 4.5-9.5 min of evaluation with neither). Any subset scores alike
# (the engines' contract; the trunk and prefix caches are per item and per prompt), so chunks cost a
# Python loop and one UPDATE each.
EVAL_CHUNK = 128
EVAL_CACHE = "eval-scores"  # the round folder's evaluation score cache (eval shards write it, evaluate reads it)


def eval_cache(row: Round) -> ScoreCache:
    return ScoreCache(round_dir(row) / EVAL_CACHE)


class _Counted:
    """The engine, scoring in chunks of EVAL_CHUNK texts and counting each chunk's prompts (texts x
    adapters) on the round, with the measured rate for the ETA (training.eta). With a ``cache`` (a round
    with eval shards) it reads what the shards scored and scores only the rest, counting nothing: the
    shards counted the evaluation's progress."""

    def __init__(self, engine: Any, round_id: int, cache: ScoreCache | None = None) -> None:
        self.engine, self.round_id, self.done, self.started = engine, round_id, 0, time.perf_counter()
        self.cache = cache

    def score(self, renderer: Any, texts: Any, adapters: Any) -> Any:
        from scoring.engines.base import ScoreResult
        from training.eta import seconds_per_unit

        if self.cache is not None and texts:
            got = pipeline.score_items(
                self.engine, renderer, list(texts), [text_hash(t) for t in texts], adapters, cache=self.cache
            )
            return ScoreResult(p=got.p, mass=got.mass, truncated=np.zeros(len(texts), dtype=bool), tokens=got.tokens)
        if not texts:
            return self.engine.score(renderer, texts, adapters)
        parts = []
        for start in range(0, len(texts), EVAL_CHUNK):
            chunk = list(texts[start : start + EVAL_CHUNK])
            parts.append(self.engine.score(renderer, chunk, adapters))
            self.done += len(chunk) * max(1, len(adapters))
            rate = seconds_per_unit(
                finished_seconds=0.0,
                finished_units=0,
                current_seconds=time.perf_counter() - self.started,
                current_units=self.done,
            )
            Round.objects.filter(id=self.round_id).update(
                eval_items_done=Least(Value(self.done), F("eval_items_total")), unit_seconds=rate
            )
            steppoints.reached("evaluate_progress", self.round_id)
        return ScoreResult(
            p=np.concatenate([r.p for r in parts], axis=1),
            mass=np.concatenate([r.mass for r in parts], axis=1),
            truncated=np.concatenate([r.truncated for r in parts]),
            tokens=sum(r.tokens for r in parts),
            computed_tokens=sum(r.computed_tokens for r in parts),
        )


def _adapters_by_arm(row: Round, *, deferred: bool = False) -> dict[str, list[AdapterVersion]]:
    """The round's adapters by arm (prod, scratch, active, random), members in k order: those its own
    evaluation scores, or (``deferred``) the comparison adapters it trains after it (comparison_keys)."""
    later = set(comparison_keys(row))
    by_arm: dict[str, list[AdapterVersion]] = {}
    for adapter in AdapterVersion.objects.filter(round=row).order_by("arm", "k"):
        if (f"{adapter.arm}:{adapter.k}" in later) == deferred:
            by_arm.setdefault(adapter.arm, []).append(adapter)
    return by_arm


def _evaluation_prompts(row: Round, by_arm: dict[str, list[AdapterVersion]], n_test: int, n_stop: int) -> int:
    """What the evaluation will score, in prompts (texts x adapters): the held-out batch under the round
    before's adapters (heldout_write's conditions), test and stop sets under the prod adapters, the
    test set under every other set, and the first prod member alone beside a scratch member."""
    prod = len(by_arm.get(AdapterVersion.Arm.PROD, []))
    total = (n_test + n_stop) * prod + n_test * sum(len(a) for arm, a in by_arm.items() if arm != "prod")
    if n_test and "scratch" in by_arm and prod > 1:
        total += n_test
    if round_config(row).blend == "auto":
        previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
        if previous and plan_path(previous[0].round).is_file():
            batch = BatchItem.objects.filter(round=row, item__final_label__isnull=False, item__is_test=False)
            total += batch.count() * len(previous)
    return total


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
    from predictor.evaluate import gain_with_uncertainty

    if "active" not in scores or "random" not in scores:
        return {}
    n_labels = int(AdapterVersion.objects.get(round=row, arm="random", k=0).n_labels)
    correct = {arm: scores[arm][1].argmax(axis=1) == y for arm in ("active", "random")}
    # The discordant items carry all of the paired evidence: the rest are right or wrong for both.
    discordant = {
        "active_only_correct": int((correct["active"] & ~correct["random"]).sum()),
        "random_only_correct": int((correct["random"] & ~correct["active"]).sum()),
    }
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
        "gain": {**gain, **discordant, "n": len(y)},
        "gain_text": gain["sentence"],
    }


def _comparison_metrics(row: Round, scores: dict[str, tuple[dict[str, Any], Any]], y: np.ndarray) -> dict[str, Any]:
    """What the comparison adapters measured: active vs random (``_evaluate_arms``) and, beside a
    scratch member, scratch vs the warm first prod member (``scores["prod0"]``)."""
    out = _evaluate_arms(row, scores, y)
    if "scratch" in scores:
        warm, scratch = scores["prod0"][0], scores["scratch"][0]
        out["scratch_vs_warm"] = {
            "scratch_accuracy": scratch["accuracy"],
            "warm_accuracy": warm["accuracy"],
            "scratch_minus_warm": scratch["accuracy"] - warm["accuracy"],
        }
    return out


def _curve(row: Round, points: list[dict[str, Any]], gain_text: str | None) -> dict[str, Any]:
    """The learning curve's SVG of ``points``, titled with the round's gain sentence; empty without points."""
    if not points:
        return {}
    title = f"{row.project.name}: test accuracy vs labels"
    if gain_text:
        title += f"\n{gain_text}"
    return {"curve_svg": curves.curves_svg(points, title)}


def _score_sets(
    row: Round, test_ids: list[int], texts: list[str], y: np.ndarray, stop_ids: list[int], stop_texts: list[str]
) -> tuple[dict[str, tuple[dict[str, Any], np.ndarray]], np.ndarray, dict[str, Any], dict[str, Any]]:
    """Metrics and distribution per adapter set: prod (the round's predictor, predictor/model.py:
    the ensemble blended with the proxy), prod0 (its first member's mean alone), and where trained:
    scratch, active, random (their members' mean; none without test items); the predictor's
    distribution on the stop set, scored in the same engine call as its test set so the prompt
    prefix is computed once for both; the blend's record for the metrics (empty with ``blend`` off);
    and the predictor's parts and fingerprint (empty without prod adapters)."""
    from predictor.evaluate import evaluate

    config = worker_config(row)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    by_arm = _adapters_by_arm(row)
    total = _evaluation_prompts(row, by_arm, len(texts), len(stop_texts))
    sharded = round_eval_shards(row) > 0
    if sharded:  # the shards counted the prompts as they scored them
        Round.objects.filter(id=row.id).update(eval_items_total=total, eval_items_done=total)
    else:
        Round.objects.filter(id=row.id).update(eval_items_total=total, eval_items_done=0, unit_seconds=0.0)
    engine = _Counted(ensemble.make_engine(config), row.id, eval_cache(row) if sharded else None)
    names = loop_sel.label_names(project=row.project)
    out: dict[str, tuple[dict[str, Any], np.ndarray]] = {}
    p_stop = np.empty((0, len(names)))
    blend_record: dict[str, Any] = {}
    predictor: dict[str, Any] = {}
    own = heldout_write(row, engine, renderer, len(names)) if config.blend == "auto" else None
    for arm, adapters in by_arm.items():
        refs = loop_sel.adapter_refs(adapters)
        if arm == AdapterVersion.Arm.PROD:
            member_p = engine.score(renderer, [*texts, *stop_texts], refs).p
            p_all, blend_record, predictor = _predicted(
                row, renderer.prompt_hash, member_p, [*test_ids, *stop_ids], y, own
            )
            p_mean, p_stop = p_all[: len(texts)], p_all[len(texts) :]
            if texts:
                out[arm] = (evaluate(p_mean, y, label_names=names), p_mean)
        elif texts:
            out[arm] = ensemble.evaluate_adapters(engine, renderer, texts, y, refs, names)
    if "scratch" in out and len(by_arm["prod"]) > 1:
        metrics, p_mean = ensemble.evaluate_adapters(
            engine, renderer, texts, y, loop_sel.adapter_refs(by_arm["prod"][:1]), names
        )
        out["prod0"] = (metrics, p_mean)
    elif "scratch" in out:
        out["prod0"] = out["prod"]
    return out, p_stop, blend_record, predictor


def evaluation_jobs(row: Round) -> list[tuple[list[str], list[Any]]]:
    """What the evaluation will score, as (texts, adapter refs), as ``_score_sets`` asks for it: the held-out
    batch under the round before's prod adapters (``heldout_write``'s conditions), the test and stop sets
    under the prod adapters, the test set under every other arm's, the first prod member alone beside a
    scratch member."""
    config = round_config(row)
    out: list[tuple[list[str], list[Any]]] = []
    previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
    if config.blend == "auto" and previous and plan_path(previous[0].round).is_file():
        batch = list(
            BatchItem.objects.filter(round=row, item__final_label__isnull=False, item__is_test=False)
            .order_by("item_id")
            .values_list("item__text", flat=True)
        )
        if batch:
            out.append((batch, loop_sel.adapter_refs(previous)))
    _, texts, _ = loop_sel.test_items(project=row.project)
    _, stop_texts = loop_sel.stop_set_items(project=row.project) if round_stop_set_size(row) else ([], [])
    by_arm = _adapters_by_arm(row)
    for arm, adapters in by_arm.items():
        if arm == AdapterVersion.Arm.PROD and (texts or stop_texts):
            out.append(([*texts, *stop_texts], loop_sel.adapter_refs(adapters)))
        elif texts:
            out.append((list(texts), loop_sel.adapter_refs(adapters)))
    if texts and "scratch" in by_arm and len(by_arm.get("prod", [])) > 1:
        out.append((list(texts), loop_sel.adapter_refs(by_arm["prod"][:1])))
    return out


def eval_shard_run(*, round_id: int, shard: int) -> Round:
    """Score shard ``shard`` of the round's ``eval_shards`` slices of the evaluation into its evaluation score
    cache, holding the round's ``eval_shard`` unit of that number (round still evaluating)."""
    row = Round.objects.select_related("project").get(id=round_id)
    if row.status == S.EVALUATING:
        rows = jobs.work_rows(row.id, WorkClaim.Kind.EVAL_SHARD, str(shard))
        jobs.run_claimed(rows, round_id=row.id, what=f"evaluation shard {shard}", step=lambda: _eval_shard(row, shard))
    row.refresh_from_db()
    return row


def _eval_shard(row: Round, shard: int) -> None:
    from training.eta import seconds_per_unit

    started = time.perf_counter()
    n = round_eval_shards(row)
    with transaction.atomic():  # the first evaluation draws the stop set: the shards score it too
        stop_set_draw(project=row.project, size=round_stop_set_size(row))
    config = worker_config(row)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    engine, cache = ensemble.make_engine(config), eval_cache(row)
    work = evaluation_jobs(row)
    total = sum(len(texts) * max(1, len(refs)) for texts, refs in work)
    Round.objects.filter(id=row.id).update(eval_items_total=total)
    done = 0
    for texts, refs in work:
        lo, hi = len(texts) * shard // n, len(texts) * (shard + 1) // n
        part = texts[lo:hi]
        if not part:
            continue
        pipeline.score_items(engine, renderer, part, [text_hash(t) for t in part], refs, cache=cache)
        prompts = len(part) * max(1, len(refs))
        done += prompts
        # n shards side by side: the round's rate is about this shard's over n
        rate = seconds_per_unit(
            finished_seconds=0.0, finished_units=0, current_seconds=time.perf_counter() - started, current_units=done
        )
        Round.objects.filter(id=row.id).update(
            eval_items_done=Least(F("eval_items_done") + prompts, F("eval_items_total")),
            unit_seconds=rate / n,
        )
        steppoints.reached("evaluate_progress", row.id)
    add_cost(round_id=row.id, step="evaluating", seconds=time.perf_counter() - started, device=device_kind())


def heldout_path(row: Round) -> Path:
    return round_dir(row) / HELDOUT_FILE


def heldout_write(row: Round, engine: Any, renderer: Any, n_classes: int) -> blend.HeldOut | None:
    """The round's labelled batch as held-out evidence for the blend: its items' distributions under
    the prod adapters of the round before (the ones that picked it) and under a proxy trained on the
    labels those adapters trained on (that round's plan) — neither saw these labels. Written to the
    round's folder (``heldout.npz``); a replay writes the same. None for a round with no earlier
    adapters (the seed round)."""
    previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
    rows = list(
        BatchItem.objects.filter(round=row, item__final_label__isnull=False, item__is_test=False)
        .order_by("item_id")
        .values_list("item_id", "item__text", "item__text_hash", "item__final_label_id", "source")
    )
    if not previous or not rows or not plan_path(previous[0].round).is_file():
        return None  # the seed round, nothing labelled, or the earlier round's plan gone: no evidence
    from scoring.files import atomic_save_npz

    index = loop_sel.label_index(project=row.project)
    ids = [r[0] for r in rows]
    texts = [r[1] for r in rows]
    y = np.array([index[r[3]] for r in rows], dtype=np.int64)
    p_llm = np.asarray(ensemble.ensemble_mean(engine, renderer, texts, loop_sel.adapter_refs(previous)), np.float32)
    p_proxy = np.asarray(
        plan_proxy_probabilities(previous[0].round, texts, [r[2] for r in rows], n_classes, exclude=set(ids)),
        np.float32,
    )
    uniform = np.array([r[4] == BatchItem.Source.RANDOM for r in rows], dtype=bool)  # the random slice
    atomic_save_npz(
        heldout_path(row), item_ids=np.array(ids, dtype=np.int64), y=y, p_llm=p_llm, p_proxy=p_proxy, uniform=uniform
    )
    return blend.HeldOut(y=y, p_llm=p_llm, p_proxy=p_proxy, uniform=uniform)


def heldout_evidence(row: Round, n_classes: int, own: blend.HeldOut | None) -> list[blend.HeldOut]:
    """The round's own held-out batch (``own``, just written) and the held-out files of the finished
    rounds before it: the latest ``blend.WINDOW`` that exist (a file of another label-set size is
    skipped)."""
    evidence = [own] if own is not None else []
    earlier = Round.objects.filter(project=row.project, number__lt=row.number, status=S.DONE).order_by("-number")
    for done in earlier:
        if len(evidence) >= blend.WINDOW:
            break
        path = heldout_path(done)
        if not path.exists():
            continue
        with np.load(path) as data:
            if data["p_llm"].shape[1] == n_classes:
                evidence.append(blend.HeldOut(y=data["y"], p_llm=data["p_llm"], p_proxy=data["p_proxy"]))
    return evidence


def _predicted(
    row: Round,
    prompt_hash: str,
    member_p: np.ndarray,
    item_ids: list[int],
    y: np.ndarray,
    own: blend.HeldOut | None,
) -> tuple[np.ndarray, dict[str, Any], dict[str, Any]]:
    """The round's predictor (annotate/services/predictor.py) on ``item_ids`` (test then stop items)
    from its members' scores: with loop option ``blend`` auto, at the weight the held-out evidence
    fits (``_blend_record``), else the adapters alone; its distributions, the blend's record and
    the predictor's parts with its fingerprint (the ML page's model version)."""
    from annotate.services.predictor import round_predictor

    n_classes = member_p.shape[-1]
    fit = blend.fit_weight(heldout_evidence(row, n_classes, own)) if round_config(row).blend == "auto" else None
    predictor = round_predictor(
        row, prompt_hash=prompt_hash, n_classes=n_classes, weight=1.0 if fit is None else fit.weight
    )
    rows = item_texts(item_ids)
    texts, hashes = [rows[i][0] for i in item_ids], [rows[i][1] for i in item_ids]
    record: dict[str, Any] = {}
    if fit is not None:
        p_llm = mean_distribution(member_p)
        p_proxy = predictor.proxy_probabilities(texts, hashes) if item_ids else None
        record = _blend_record(fit, own, p_llm, p_proxy, y)
    return predictor.probabilities(member_p, texts, hashes), record, predictor.predictor.to_json()


def _blend_record(
    fit: blend.BlendFit, own: blend.HeldOut | None, p_llm: np.ndarray, p_proxy: np.ndarray | None, y: np.ndarray
) -> dict[str, Any]:
    """What the ML page shows of the blend (weight, why, held-out and test accuracy of each part)
    with every grid weight's counts on the round's batch, its random slice and the test set — the
    inputs of any other rule for the weight, replayed offline by bench/blend_rules.py (the test
    counts never choose the weight)."""
    evidence: dict[str, Any] = {"grid": list(blend.GRID)}
    if own is not None and own.uniform is not None:
        evidence["batch"] = blend.weight_counts(own.p_llm, own.p_proxy, own.y)
        evidence["uniform"] = blend.weight_counts(own.p_llm[own.uniform], own.p_proxy[own.uniform], own.y[own.uniform])
    record: dict[str, Any] = {
        "weight": fit.weight,
        "heldout_n": fit.n,
        "heldout_accuracy": fit.accuracy,
        "reason": fit.reason,
        "evidence": evidence,
    }
    if p_proxy is not None and len(y):
        test = blend.weight_counts(p_llm[: len(y)], p_proxy[: len(y)], y)
        evidence["test"] = test
        record["test_accuracy"] = {
            name: test["correct"][blend.GRID.index(w)] / len(y)
            for name, w in (("llm", 1.0), ("proxy", 0.0), ("blend", fit.weight))
        }
    return record


def _adapters(row: Round) -> dict[str, Any]:
    """What the round's prod adapters are, read from their own files (a warm start keeps the shape
    of the project's first adapters, whatever the options say now): members, LoRA rank, the distinct
    adapted-layer counts (0: every layer) and how many members' configs are unreadable, the base model's
    layers, optimiser steps and batch size a member, and whether the many-label rule widened them."""
    members = list(AdapterVersion.objects.filter(round=row, arm=AdapterVersion.Arm.PROD).order_by("k"))
    infos = [_adapter_files(Path(m.path)) for m in members]
    layers = sorted({info["layers"] for info in infos if info["layers"] is not None})
    config = round_config(row)
    widened = bool(round_frozen(row)["widened"])
    return {
        "k": len(members),
        "rank": next((info["rank"] for info in infos if info["rank"] is not None), None),
        "layers": layers,
        "unreadable": sum(info["layers"] is None for info in infos),  # members without adapter_config.json
        "model_layers": _model_layers(config.model_dir),
        "steps": next((info["steps"] for info in infos if info["steps"] is not None), None),
        "batch_size": config.train.batch_size,
        "wide": bool(widened and layers == [config.train.top_layers]),
        "wide_labels": WIDE_LABELS,
        # how the members' steps ran (training.json "fixed_step"): "graph", "eager" (fixed shapes, no
        # capture: asked for, or a capture that failed) or "per-batch"; empty for adapters from before
        "step_modes": sorted({info["step_mode"] for info in infos if info["step_mode"] is not None}),
    }


def _adapter_files(path: Path) -> dict[str, Any]:
    """An adapter's LoRA rank and adapted layers (adapter_config.json), its steps and how they ran
    (training.json); None where a file or key is missing."""
    config = adapter_config(path) if (path / ADAPTER_CONFIG).is_file() else None
    info = json.loads((path / TRAINING_INFO).read_text()) if (path / TRAINING_INFO).is_file() else {}
    return {
        "rank": config.get("r") if config is not None else None,
        "layers": adapted_layers(config) if config is not None else None,
        "steps": info.get("steps"),
        "step_mode": (info["fixed_step"] or "per-batch") if "fixed_step" in info else None,
    }


def _model_layers(model_dir: str) -> int | None:
    """The base model's decoder layers (config.json's num_hidden_layers), None if unreadable."""
    path = Path(model_dir) / "config.json"
    layers = json.loads(path.read_text()).get("num_hidden_layers") if path.is_file() else None
    return int(layers) if isinstance(layers, int) else None


def _stop_predictions(row: Round, stop_ids: list[int], p_stop: np.ndarray) -> dict[str, Any]:
    """The prod ensemble's argmax on the stop set as label ids (stable across a reordering of the
    label set), aligned with the item ids: what κ between this round and the next is computed from
    (annotate/selectors/stopping.py)."""
    label_ids = {i: label_id for label_id, i in loop_sel.label_index(project=row.project).items()}
    return {"item_ids": stop_ids, "labels": [label_ids[int(i)] for i in p_stop.argmax(axis=1)]}


def _points(row: Round, metrics: dict[str, Any], labels_used: int) -> list[dict[str, Any]]:
    """Learning-curve points of every finished round of the project plus this one."""
    points: list[dict[str, Any]] = []
    for earlier in Round.objects.filter(project=row.project, status=S.DONE, number__lt=row.number).order_by("number"):
        points.extend(p for p in (earlier.metrics or {}).get("points", []) if p.get("round") == earlier.number)
    if "accuracy" in metrics:
        points.append({"round": row.number, "arm": "prod", "labels": labels_used, "accuracy": metrics["accuracy"]})
    return points + _arm_points(row, metrics)


def _arm_points(row: Round, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The round's active / random learning-curve points from its measured ``metrics["arms"]``."""
    return [
        {"round": row.number, "arm": arm, "labels": values["labels"], "accuracy": values["accuracy"]}
        for arm, values in metrics.get("arms", {}).items()
    ]


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
    return jobs.run_round_step(
        round_id, status=S.EVALUATING, kind=WorkClaim.Kind.EVALUATE, what="the evaluation", step=_evaluate
    )


def _evaluate(row: Round) -> None:
    started = time.perf_counter()
    test_ids, texts, y = loop_sel.test_items(project=row.project)
    stop_ids: list[int] = []
    stop_texts: list[str] = []
    with transaction.atomic():  # the drawer's row lock holds until its draw commits (one drawer a project)
        drawn = stop_set_draw(project=row.project, size=round_stop_set_size(row))  # drawn once, then read
    if drawn:
        stop_ids, stop_texts = loop_sel.stop_set_items(project=row.project)
    labels_used = len(read_plan(row)["prod:0"])
    metrics: dict[str, Any] = {"labels": labels_used, "test_n": len(test_ids), "adapters": _adapters(row)}
    scores, p_stop, blend_record, predictor = (
        _score_sets(row, test_ids, texts, y, stop_ids, stop_texts)
        if test_ids or stop_ids
        else ({}, np.empty((0, 0)), {}, {})
    )
    if blend_record:
        metrics["blend"] = blend_record
    if predictor:
        metrics["predictor"] = predictor
    if stop_ids:
        metrics["stop_set"] = _stop_predictions(row, stop_ids, p_stop)
    if test_ids:
        prod, p_prod = scores["prod"]
        n_classes = p_prod.shape[1]
        metrics = {
            "accuracy": prod["accuracy"],
            "macro_f1": prod["macro_f1"],
            "ece": prod["ece"],
            **_kappas(row, test_ids, p_prod.argmax(axis=1), n_classes),
            **metrics,
            "prod": prod,
            **_comparison_metrics(row, scores, y),
        }
    else:
        metrics["note"] = "the test set has no labels yet: label it (annotator test queue) or import gold labels"
    if comparison_keys(row):  # trained and evaluated after the round (arms_eval): the ML page says so meanwhile
        metrics[COMPARISON] = {"state": COMPARISON_WAITING}
    metrics.update({k: v for k, v in (row.metrics or {}).items() if k not in metrics and not k.endswith("_svg")})
    metrics["points"] = _points(row, metrics, labels_used)
    metrics.update(_curve(row, metrics["points"], metrics.get("gain_text")))
    if "prod" in metrics:
        metrics["reliability_svg"] = curves.reliability_svg(
            metrics["prod"]["reliability"], title=f"Round {row.number} reliability"
        )
    steppoints.reached("evaluate", row.number)
    add_cost(round_id=row.id, step="evaluating", seconds=time.perf_counter() - started, device=device_kind())
    with transaction.atomic():
        round_transition(row.id, S.EVALUATING, S.DONE, metrics=_clean(metrics), cost=_cost(row, metrics, labels_used))


# -- the comparison arms after the round (loop option arms_timing "deferred") ------------------------


def arms_evaluate_run(*, round_id: int) -> Round:
    """Evaluate a done round's deferred comparison adapters on the test set, holding its ``arms_eval``
    unit, and merge what they measured (active vs random, scratch vs warm, their learning-curve points)
    into the round's metrics: exactly what an in-round evaluation would have stored. Nothing when the
    round is not done, the comparison is no longer owed, or one of its adapters is missing yet. Failing
    every attempt gives the comparison up (the round says why) and never fails the round."""
    row = Round.objects.select_related("project").get(id=round_id)
    keys = comparison_keys(row)
    made = {f"{a}:{k}" for a, k in AdapterVersion.objects.filter(round=row).values_list("arm", "k")}
    if row.status == S.DONE and keys and set(keys) <= made:
        jobs.run_claimed(
            jobs.work_rows(row.id, WorkClaim.Kind.ARMS_EVAL),
            round_id=row.id,
            what="the comparison arms' evaluation",
            step=lambda: _evaluate_comparison(row),
            give_up=lambda reason: comparison_give_up(round_id=row.id, reason=reason),
            started=lambda: comparison_mark(round_id=row.id, state=COMPARISON_RUNNING),
        )
    row.refresh_from_db()
    return row


def _evaluate_comparison(row: Round) -> None:
    started = time.perf_counter()
    _, texts, y = loop_sel.test_items(project=row.project)
    measured: dict[str, Any] = {}
    if texts:
        config = worker_config(row)
        renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
        engine, names = ensemble.make_engine(config), loop_sel.label_names(project=row.project)
        scores: dict[str, tuple[dict[str, Any], Any]] = {
            arm: ensemble.evaluate_adapters(engine, renderer, texts, y, loop_sel.adapter_refs(adapters), names)
            for arm, adapters in _adapters_by_arm(row, deferred=True).items()
        }
        if "scratch" in scores:  # beside the warm first prod member, as the round's own evaluation compares them
            prod = _adapters_by_arm(row).get(AdapterVersion.Arm.PROD, [])
            scores["prod0"] = (
                ensemble.evaluate_adapters(engine, renderer, texts, y, loop_sel.adapter_refs(prod[:1]), names)
                if len(prod) > 1
                else ((row.metrics or {})["prod"], None)
            )
        measured = _comparison_metrics(row, scores, y)
    points = list((row.metrics or {}).get("points", [])) + _arm_points(row, measured)
    measured |= {"points": points, **_curve(row, points, measured.get("gain_text"))}
    seconds = time.perf_counter() - started
    add_cost(round_id=row.id, step=COMPARISON_EVALUATING_COST, seconds=seconds, device=device_kind())
    comparison_mark(round_id=row.id, state=COMPARISON_DONE, **_clean(measured))
