"""Label the rest of the pool: gold set, calibration, per-class thresholds, the bulk job, the cascade,
the random audit, dead letters.

The bulk job is durable in the same way as round scoring: one AutolabelShard row per slice of the
run's items (``sha1(item id) % n_shards``, computed once at plan time into by_shard.npy + offsets.npy
in the run directory, so a shard reads its items instead of re-hashing the run), claimed with a
conditional UPDATE by one live worker, a killed worker's shard reclaimed (the worker start
re-enqueues what a running run still needs), a finished shard never redone. Results are AutoLabel
rows keyed by (item, prompt hash, adapter set), written chunk by chunk with an upsert: a shard that
is redelivered or resumed skips the items it already decided, and a re-run with the same prompt and
adapters finds nothing left to do. The calibration is claimed the same way, so a killed one resumes.

Backpressure: at most ``max_shards_in_flight`` shards are queued or running per run and at most
``max_shards_per_worker`` held by one worker (each finished shard enqueues the next), and each engine
call gets ``chunk_size`` items.

Decisions use the calibration's thresholds only if the run's rendered prompt has the hash the
calibration was fitted on (template drift refuses the run and names what changed).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from annotate import steppoints
from annotate.loopconfig import loop_config, worker_config
from annotate.models import (
    AutoLabel,
    AutolabelRun,
    AutolabelShard,
    BatchItem,
    Calibration,
    DeadLetter,
    GoldItem,
    Item,
    Label,
    Prediction,
    Project,
)
from annotate.selectors import autolabel as auto_sel
from annotate.selectors import loop as loop_sel
from annotate.services import jobs, people_queue
from annotate.services.predictor import RoundPredictor, round_predictor
from annotate.services.round_state import autolabel_run_dir
from annotate.services.rounds import round_open_for_people
from predictor import calibrate as cal
from predictor.model import Predictor
from predictor.thresholds import DEFAULT_DELTA
from scoring import batch_manifest, pipeline
from scoring.prompts import LabelSpec, PromptSpec
from training import ensemble

RunStatus = AutolabelRun.Status
ShardStatus = AutolabelShard.Status
SHARD_ITEMS = 2000  # items per shard: a checkpoint every few seconds of GPU, a minute or two of CPU
MAX_SHARD_ATTEMPTS = jobs.MAX_ATTEMPTS  # a shard claimed more often gives its remaining items to the dead letters
MAX_REASON = 2000
CASCADES = ("none", "agreement", "permuted", "second_model")


class AutolabelError(ValueError):
    """A request that cannot be served (no calibration, wrong options); the message is for people."""


class ClaimLost(RuntimeError):
    """This worker's claim on a shard has moved to another worker (it was counted dead): the chunk it was
    about to commit is rolled back, and the shard is the new holder's."""


class RunActiveError(AutolabelError):
    """A run of the project is still going."""


# -- dispatch -------------------------------------------------------------------------------------


# The bulk job's tasks by their stable names (annotate/tasks_autolabel.py): services send tasks by
# name and never import the task module (no service ↔ task import cycle).
TASK_NAMES = {
    "calibrate": "annotate.gpu.autolabel_calibrate",
    "plan": "annotate.gpu.autolabel_plan",
    "shard": "annotate.gpu.autolabel_shard",
    "retry": "annotate.gpu.autolabel_retry",
}


def _task(task_name: str) -> Any:
    from annotate.services.queue import registered

    return registered(TASK_NAMES[task_name])


Dispatch = Callable[..., None]
"""How a service sends the job's next unit: ``dispatch(step, *args, countdown=None)``, a step of
TASK_NAMES. The services take it as an argument: ``celery_dispatch`` (the default) sends the task
on commit, ``run_inline`` passes an ``InlineQueue`` that runs them in this process."""


def celery_dispatch(step: str, *args: Any, countdown: float | None = None) -> None:
    task = _task(step)
    transaction.on_commit(lambda: task.apply_async(args, countdown=countdown))


class InlineQueue:
    """A dispatcher that keeps what it is sent, in order (run_inline runs it; a test reads it)."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, tuple[Any, ...]]] = []

    def __call__(self, step: str, *args: Any, countdown: float | None = None) -> None:
        self.pending.append((step, args))


def run_inline(first: Callable[[Dispatch], Any], *, after_task: Callable[[str], None] | None = None) -> None:
    """Run ``first(dispatch)`` and every unit it sends, and they send, in order in this process (the
    CLI's --sync, tests): each step's service (what its task calls) with the same inline dispatcher;
    ``after_task(step)`` after each (the CLI prints progress there)."""
    queue = InlineQueue()
    first(queue)
    while queue.pending:
        step, args = queue.pending.pop(0)
        _run_step(step, args, queue)
        if after_task is not None:
            after_task(step)


def _run_step(step: str, args: tuple[Any, ...], dispatch: Dispatch) -> None:
    if step == "calibrate":
        calibration_run(calibration_id=args[0])
    elif step == "plan":
        run_plan(run_id=args[0], dispatch=dispatch)
    elif step == "shard":
        shard_run(run_id=args[0], shard=args[1], dispatch=dispatch)
    else:
        dead_letter_retry_run(dead_letter_ids=args[0])


# -- scoring helpers -------------------------------------------------------------------------------


@dataclass
class Scores:
    p: np.ndarray  # [K, N, C]
    mass: np.ndarray  # [K, N]
    truncated: np.ndarray  # bool[N]
    tokens: int
    computed_tokens: int
    seconds: float


def _score(engine: Any, renderer: Any, texts: Sequence[str], refs: Sequence[Any], chunk: int) -> Scores:
    k, c = max(1, len(refs)), len(renderer.label_token_ids)
    parts, started = [], time.perf_counter()
    for start in range(0, len(texts), max(1, chunk)):
        parts.append(engine.score(renderer, list(texts[start : start + chunk]), refs))
    if not parts:
        return Scores(np.zeros((k, 0, c), np.float32), np.zeros((k, 0), np.float32), np.zeros(0, bool), 0, 0, 0.0)
    return Scores(
        np.concatenate([r.p for r in parts], axis=1),
        np.concatenate([r.mass for r in parts], axis=1),
        np.concatenate([np.asarray(r.truncated, bool) for r in parts]),
        sum(int(r.tokens) for r in parts),
        sum(int(r.computed_tokens) for r in parts),
        time.perf_counter() - started,
    )


def permuted_spec(spec: PromptSpec, perm: Sequence[int]) -> PromptSpec:
    """The prompt with label i wearing the code of label perm[i] (label order kept, so p stays in
    label order)."""
    codes = [label.code for label in spec.labels]
    labels = tuple(LabelSpec(lab.name, lab.description, codes[perm[i]]) for i, lab in enumerate(spec.labels))
    return PromptSpec(spec.instructions, labels, spec.few_shot, spec.item_template)


def fingerprint(renderer: Any, spec: PromptSpec, model_dir: str) -> dict[str, str]:
    """What the prompt hash is made of, part by part, so drift can be explained."""
    from scoring.bundled import model_revision

    def digest(value: Any) -> str:
        return hashlib.sha256(repr(value).encode()).hexdigest()[:16]

    tok = renderer.tokenizer
    return {
        "tokenizer": digest((type(tok).__name__, len(tok), tok.bos_token, tok.eos_token)),
        "chat template": digest(getattr(tok, "chat_template", "")),
        "instructions": digest((spec.instructions, spec.labels, spec.few_shot, spec.item_template)),
        "model revision": str(model_revision(model_dir)),
        "context": str(renderer.max_context),
    }


def drift_reason(
    calibration: Calibration, *, prompt_hash: str, parts: dict[str, str], adapter_set: str, predictor: Predictor
) -> str:
    """Empty when the run may use the calibration; else why it may not: the rendered prompt, the
    adapters, or any other part of the predictor (predictor/model.py: blend weight, proxy labels)
    differs from the one the calibration was fitted on."""
    reasons = []
    if prompt_hash != calibration.prompt_hash:
        changed = [name for name, value in parts.items() if (calibration.fingerprint or {}).get(name) != value]
        what = ", ".join(changed) if changed else "the rendered prefix"
        reasons.append(
            f"the rendered prompt prefix hash is {prompt_hash[:12]}, the thresholds were calibrated on "
            f"{calibration.prompt_hash[:12]} ({what} changed): recalibrate before auto-accepting"
        )
    if adapter_set != calibration.adapter_set_hash:
        reasons.append(
            f"the adapter set is {adapter_set[:12]}, the thresholds were calibrated on "
            f"{calibration.adapter_set_hash[:12]} (a newer round trained new adapters): recalibrate"
        )
    if not reasons and predictor.fingerprint() != calibration.model_version:
        fitted = calibration.predictor or {}
        why = (
            f"{', '.join(Predictor.from_json(fitted).changes(predictor))} changed"
            if fitted
            else "calibrated before predictors were versioned"
        )
        reasons.append(
            f"the predictor is {predictor.fingerprint()[:12]}, the thresholds were calibrated on "
            f"{calibration.model_version[:12] or 'an unversioned one'} ({why}): recalibrate"
        )
    return "; ".join(reasons)


def _drift(run: AutolabelRun, ctx: Context) -> str:
    parts = fingerprint(ctx.renderer, ctx.spec, ctx.config.model_dir)
    return drift_reason(
        run.calibration,
        prompt_hash=ctx.renderer.prompt_hash,
        parts=parts,
        adapter_set=ctx.adapter_set,
        predictor=ctx.predictor.predictor,
    )


@dataclass
class Context:
    """Everything a shard or a calibration needs, built once per task."""

    project: Project
    config: ensemble.LoopConfig
    spec: PromptSpec
    renderer: Any
    engine: Any
    refs: list[Any]
    adapter_set: str
    predictor: RoundPredictor  # uncalibrated: the one the ML page reports for the adapters' round


def _context(project: Project) -> Context:
    from scoring.engines import adapter_set_hash

    adapters = loop_sel.prod_adapters(project=project)
    # The adapters' own round's frozen config (prompt, model, engine): what they were trained and
    # evaluated under, whatever the deployment's options are now.
    config = worker_config(adapters[0].round) if adapters else loop_config(project)
    refs = loop_sel.adapter_refs(adapters)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    source = adapters[0].round if adapters else None
    return Context(
        project=project,
        config=config,
        spec=config.prompt,
        renderer=renderer,
        engine=ensemble.make_engine(config),
        refs=refs,
        adapter_set=adapter_set_hash(refs),
        predictor=round_predictor(source, prompt_hash=renderer.prompt_hash, n_classes=len(config.prompt.labels)),
    )


def _device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


# -- gold set ---------------------------------------------------------------------------------------


def gold_draw(*, project: Project, per_class: int = 50, seed: int = 0) -> int:
    """Top up the gold set so each *true* class can reach ``per_class`` labelled items (all there are
    where fewer). A class's shortfall is ``per_class`` less its labelled gold items (by final label)
    and its gold items still waiting for people (by the class they were drawn for); it is drawn from
    the eligible items the latest predictions give that class (a uniform draw without predictions).
    Call it again as labels come in: a class whose true count stays short gets more draws until no
    item is predicted it. Each item is double-labelled blind (required_labels 2, served in the
    annotators' queue as source "gold"), disagreements go to the leads, the loop never trains on it.
    Returns items added."""
    if per_class < 1:
        raise AutolabelError("the gold set needs at least one item per class")
    rng = np.random.default_rng([seed, project.pk, GoldItem.objects.filter(project=project).count()])
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    shortfall = _gold_shortfall(project, labels, per_class)
    taken = set(GoldItem.objects.filter(project=project).values_list("item_id", flat=True))
    eligible = np.array([i for i in loop_sel.eligible_ids(project=project) if int(i) not in taken], dtype=np.int64)
    latest = {
        item_id: (label_id, probs)
        for item_id, label_id, probs in Prediction.objects.filter(item__project=project, item_id__in=eligible.tolist())
        .order_by("item_id", F("round__number").asc(nulls_first=True), "created_at", "id")  # newest round wins
        .values_list("item_id", "label_id", "probs")
    }
    picks: list[tuple[int, int | None]] = []
    if latest:
        chosen: set[int] = set()
        for c, label in enumerate(labels):
            ranked = _gold_candidates(eligible, latest, label.pk, c, rng)
            mine = [i for i in ranked if i not in chosen][: shortfall[label.pk]]
            chosen.update(mine)
            picks += [(i, label.pk) for i in mine]
    else:
        short = sum(n for pk, n in shortfall.items() if pk is not None) - shortfall[None]
        picks = [(int(i), None) for i in rng.permutation(eligible)[: max(0, short)]]
    _add_held_out(project, picks, purpose=GoldItem.Purpose.GOLD, required_labels=2, source=BatchItem.Source.GOLD)
    return len(picks)


def _gold_candidates(
    eligible: np.ndarray, latest: dict[int, tuple[int, Any]], label_id: int, index: int, rng: np.random.Generator
) -> list[int]:
    """Items for a class's gold draw: those predicted it, in random order, then the rest by their
    predicted probability of it (a true class the model rarely predicts is still reached)."""
    predicted = [int(i) for i in rng.permutation(eligible) if latest.get(int(i), (None, None))[0] == label_id]

    def prob(item_id: int) -> float:
        probs = latest.get(item_id, (None, None))[1]
        return float(probs[index]) if isinstance(probs, list) and len(probs) > index else 0.0

    taken = set(predicted)
    rest = sorted((int(i) for i in eligible if int(i) not in taken), key=lambda i: (-prob(i), i))
    return predicted + rest


def _gold_shortfall(project: Project, labels: list[Label], per_class: int) -> dict[int | None, int]:
    """{label id: labelled gold items it still lacks less those drawn for it and still waiting};
    under None, the items drawn without predictions and still waiting (their class is unknown)."""
    gold = GoldItem.objects.filter(project=project, purpose=GoldItem.Purpose.GOLD)
    labelled = dict(
        gold.filter(item__final_label__isnull=False)
        .values("item__final_label_id")
        .annotate(n=Count("id"))
        .values_list("item__final_label_id", "n")
    )
    waiting_rows = gold.filter(item__final_label__isnull=True)
    waiting: dict[int | None, int] = dict(
        waiting_rows.values("stratum_id").annotate(n=Count("id")).values_list("stratum_id", "n")
    )
    out: dict[int | None, int] = {
        label.pk: max(0, per_class - labelled.get(label.pk, 0) - waiting.get(label.pk, 0)) for label in labels
    }
    out[None] = waiting.get(None, 0)
    return out


def calibration_split_draw(*, project: Project, n: int = 500, seed: int = 0) -> int:
    """Draw ``n`` items uniformly at random from the eligible pool into the calibration split (labelled
    once by people, source "calib"). Auto-accept thresholds are fitted on its labelled items only:
    never trained on, disjoint from the test and gold sets, so the fixed-sequence bound holds on the
    items a run decides. Returns items added."""
    if n < 1:
        raise AutolabelError("the calibration split needs at least one item")
    rng = np.random.default_rng([seed, project.pk, GoldItem.objects.filter(project=project).count(), 1])
    taken = set(GoldItem.objects.filter(project=project).values_list("item_id", flat=True))
    eligible = np.array([i for i in loop_sel.eligible_ids(project=project) if int(i) not in taken], dtype=np.int64)
    picks: list[tuple[int, int | None]] = [(int(i), None) for i in rng.permutation(eligible)[:n]]
    _add_held_out(
        project, picks, purpose=GoldItem.Purpose.CALIBRATION, required_labels=1, source=BatchItem.Source.CALIBRATION
    )
    return len(picks)


def _add_held_out(
    project: Project, picks: list[tuple[int, int | None]], *, purpose: str, required_labels: int, source: str
) -> None:
    with transaction.atomic():
        GoldItem.objects.bulk_create(
            [GoldItem(project=project, item_id=i, stratum_id=s, purpose=purpose) for i, s in picks],
            ignore_conflicts=True,
        )
        ids = [i for i, _ in picks]
        Item.objects.filter(id__in=ids, required_labels__lt=required_labels).update(required_labels=required_labels)
        queue_for_people(project=project, item_ids=ids, source=source)


def queue_for_people(*, project: Project, item_ids: Sequence[int], source: str) -> int:
    """Items people must label (cascade, audit, gold, calibration split): into the batch of the
    project's round in labelling, or of a round opened for them through the round transitions, or,
    while the project's active round is busy, waiting for the next round in labelling
    (annotate/services/people_queue.py). Never a second active round. Idempotent per item."""
    if not item_ids:
        return 0
    with transaction.atomic():
        target = round_open_for_people(project=project)
        if target is None:
            return people_queue.hold(project=project, item_ids=item_ids, source=source)
        return people_queue.add_to_batch(round=target, item_ids=item_ids, source=source)


# -- calibration ------------------------------------------------------------------------------------


def calibration_request(
    *,
    project: Project,
    user: Any = None,
    target: float = cal.DEFAULT_TARGET,
    delta: float = DEFAULT_DELTA,
    cascade: str = "agreement",
    second_model_dir: str = "",
    dispatch: Dispatch = celery_dispatch,
) -> Calibration:
    if not 0.5 <= target < 1.0:
        raise AutolabelError(f"target precision must be in [0.5, 1), got {target}")
    if not 0.0 < delta <= 0.5:
        raise AutolabelError(f"δ (the chance a class misses its target) must be in (0, 0.5], got {delta}")
    if cascade not in CASCADES:
        raise AutolabelError(f"unknown cascade {cascade!r} (one of {', '.join(CASCADES)})")
    if cascade == "second_model" and not Path(second_model_dir).is_dir():
        raise AutolabelError(f"the second model directory {second_model_dir!r} does not exist")
    if not auto_sel.eval_items(project=project).item_ids:
        raise AutolabelError("no human-labelled evaluation items: label the test set or the gold set first")
    with transaction.atomic():
        row = Calibration.objects.create(
            project=project,
            created_by=user,
            target=target,
            delta=delta,
            cascade=cascade,
            second_model_dir=second_model_dir,
            sent_at=timezone.now(),
        )
        dispatch("calibrate", row.id)
    return row


def calibration_run(*, calibration_id: int) -> Calibration:
    """Score the evaluation items and the calibration split, fit the calibrator and every tier's
    thresholds (task body). Claimed like a shard: one live worker fits it, and a worker that finds
    it running on a dead one (killed mid-fit) takes it over and fits it again from the start."""
    from annotate.services.scoring import worker_id

    me = worker_id()
    rows = Calibration.objects.filter(
        id=calibration_id, status__in=[Calibration.Status.PENDING, Calibration.Status.RUNNING]
    )
    if not jobs.claim(rows, me=me):
        return Calibration.objects.get(id=calibration_id)
    row = Calibration.objects.select_related("project").get(id=calibration_id)
    if row.attempts > MAX_SHARD_ATTEMPTS:  # it keeps killing its workers: stop, say so
        calibration_fail(calibration_id=row.id, reason=f"{row.attempts - 1} workers died fitting it")
        return Calibration.objects.get(id=row.id)
    try:
        fitted = _fit(row)
        Calibration.objects.filter(id=row.id, worker=me, status=Calibration.Status.RUNNING).update(
            **fitted, status=Calibration.Status.DONE, finished_at=timezone.now()
        )
    except Exception as exc:
        calibration_fail(calibration_id=row.id, reason=f"{type(exc).__name__}: {exc}")
        raise
    return Calibration.objects.get(id=row.id)


def calibration_fail(*, calibration_id: int, reason: str) -> None:
    jobs.end(
        Calibration.objects.filter(id=calibration_id),
        status=Calibration.Status.FAILED,
        open_statuses=(Calibration.Status.PENDING, Calibration.Status.RUNNING),
        error=reason[:MAX_REASON],
        finished_at=timezone.now(),
    )


def _fit(row: Calibration) -> dict[str, Any]:
    """The calibrator on the evaluation items (test set + gold), every tier's thresholds on the
    calibration split only (fixed-sequence testing at the row's target and δ)."""
    ctx = _context(row.project)
    ev = auto_sel.eval_items(project=row.project)
    split = auto_sel.calibration_inputs(project=row.project)
    names = [label.name for label in ctx.spec.labels]
    y, y_split, n_ev = np.array(ev.y, dtype=np.int64), np.array(split.y, dtype=np.int64), len(ev.y)
    scores = _score(ctx.engine, ctx.renderer, ev.texts + split.texts, ctx.refs, 256)
    steppoints.reached("calibrate", row.id)  # scored, nothing written: a kill here must resume
    members_split = scores.p[:, n_ev:]
    p_all = ctx.predictor.probabilities(scores.p, ev.texts + split.texts)  # what the ML page reports
    p_mean, p_split = p_all[:n_ev], p_all[n_ev:]
    calibrator = cal.fit_calibrator(p_mean, y)

    def rules(pred: np.ndarray, conf: np.ndarray) -> list[dict]:
        found = cal.fit_thresholds(pred, conf, y_split, label_names=names, target=row.target, delta=row.delta)
        return [asdict(r) for r in found]

    thresholds = {"model": rules(*cal.model_tier(p_split, calibrator))}
    tier_calibrators: dict[str, Any] = {}
    perms = cal.code_permutations(len(names))
    if row.cascade == "agreement":
        thresholds["agreement"] = rules(*cal.agreement_tier(members_split, calibrator))
    elif row.cascade == "permuted":
        variants = _variant_scores(ctx, split.texts, perms)
        thresholds["permuted"] = rules(*cal.permuted_tier(np.concatenate([p_split[None], variants]), calibrator))
    elif row.cascade == "second_model":
        second = _second_model_scores(ctx, row.second_model_dir, ev.texts + split.texts)
        second_cal = cal.fit_calibrator(second[:n_ev], y)
        tier_calibrators["second_model"] = second_cal.to_json()
        thresholds["second_model"] = rules(*cal.model_tier(second[n_ev:], second_cal))
    gold = np.array(ev.is_gold, dtype=bool)
    bias_rows = (np.flatnonzero(gold) if gold.any() else np.arange(len(y)))[:BIAS_SLICE]
    bias_variants = _variant_scores(ctx, [ev.texts[i] for i in bias_rows], perms)
    adapters_mean = scores.p[:, :n_ev].mean(axis=0)  # the label-order check reads the adapters, not the proxy
    return {
        "prompt_hash": ctx.renderer.prompt_hash,
        "adapter_set_hash": ctx.adapter_set,
        # and the batch-API manifest's version of the prompt: imported answers are decided on these
        # thresholds only when they answered it (annotate/services/batch_api.py)
        "fingerprint": {
            **fingerprint(ctx.renderer, ctx.spec, ctx.config.model_dir),
            "prompt version": batch_manifest.prompt_version(ctx.spec),
        },
        "model_version": ctx.predictor.fingerprint,
        "predictor": ctx.predictor.predictor.to_json(),
        "n_items": len(y),
        "n_calibration": len(y_split),
        "calibrator": calibrator.to_json(),
        "before": cal.reliability(p_mean, y),
        "after": cal.reliability(calibrator.apply(p_mean), y),
        "thresholds": thresholds,
        "tier_calibrators": tier_calibrators,
        "bias": cal.label_order_bias(adapters_mean[bias_rows], bias_variants, perms),
        "gold_report": _gold_report(row.project, ev, calibrator.apply(p_mean), names),
        "rate": {
            "engine": ctx.config.engine,
            "device": _device(),
            "tokens_per_second": scores.tokens / scores.seconds if scores.seconds else 0.0,
            "tokens_per_item": scores.tokens / max(1, n_ev + len(y_split)),
            "items_per_second": (n_ev + len(y_split)) / scores.seconds if scores.seconds else 0.0,
        },
        "blocked": {},
        "error": "",
    }


BIAS_SLICE = 200  # gold items re-scored per code permutation for the label-order check


def _variant_scores(ctx: Context, texts: Sequence[str], perms: Sequence[Sequence[int]]) -> np.ndarray:
    """Ensemble-mean p [V, N, C] (label order) under each code permutation of the prompt."""
    out = []
    for perm in perms:
        spec = permuted_spec(ctx.spec, perm)
        renderer = pipeline.make_renderer(ctx.config.model_dir, spec, ctx.config.max_context)
        out.append(_score(ctx.engine, renderer, texts, ctx.refs, 256).p.mean(axis=0))
    return np.stack(out) if out else np.zeros((0, len(texts), len(ctx.spec.labels)), np.float32)


def _second_model_scores(ctx: Context, model_dir: str, texts: Sequence[str]) -> np.ndarray:
    from scoring.engines import get_engine

    renderer = pipeline.make_renderer(model_dir, ctx.spec, ctx.config.max_context)
    engine = get_engine(ctx.config.engine, model_dir, **dict(ctx.config.engine_options))
    return _score(engine, renderer, texts, [], 256).p.mean(axis=0)


def _gold_report(project: Project, ev: auto_sel.EvalItems, q: np.ndarray, names: list[str]) -> dict[str, Any]:
    """On the gold items: per-class precision/recall and confusion of the calibrated model, Cohen's κ
    model–human and human–human (first two blind labels) on the same items."""
    from annotate.models import Annotation
    from annotate.selectors.agreement import cohen_kappa
    from predictor.evaluate import evaluate

    rows = [i for i, g in enumerate(ev.is_gold) if g]
    if not rows:
        return {}
    y = np.array([ev.y[i] for i in rows])
    report = evaluate(q[rows], y, label_names=names)
    index = loop_sel.label_index(project=project)
    firsts: dict[int, list[int]] = {}
    ids = [ev.item_ids[i] for i in rows]
    for item_id, label_id in (
        Annotation.objects.filter(item_id__in=ids).order_by("created_at", "id").values_list("item_id", "label_id")
    ):
        firsts.setdefault(item_id, []).append(index[label_id])
    pairs = [(v[0], v[1], ev.y[ev.item_ids.index(i)]) for i, v in firsts.items() if len(v) >= 2]
    pred = q[rows].argmax(axis=1)
    human_human = (
        cohen_kappa(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), len(names)) if pairs else None
    )
    return {
        "n": len(rows),
        "per_class": report["per_class"],
        "confusion": report["confusion"],
        "kappa_model_human": cohen_kappa(pred, y, len(names)),
        "kappa_human_human": human_human,
        "n_pairs": len(pairs),
    }


# -- the bulk job -----------------------------------------------------------------------------------


def run_request(
    *,
    project: Project,
    user: Any = None,
    audit_share: float = 0.02,
    max_shards_in_flight: int = 4,
    max_shards_per_worker: int = 2,
    chunk_size: int = 256,
    shard_items: int = SHARD_ITEMS,
    dispatch: Dispatch = celery_dispatch,
) -> AutolabelRun:
    """Ask for "label the pool" on the latest finished calibration; the plan task does the rest."""
    calibration = auto_sel.latest_calibration(project=project, done=True)
    if calibration is None:
        raise AutolabelError("calibrate first: auto-accept needs thresholds fitted on human labels")
    if not 0.0 <= audit_share <= 0.5:
        raise AutolabelError(f"audit share must be in [0, 0.5], got {audit_share}")
    if min(max_shards_in_flight, max_shards_per_worker, chunk_size, shard_items) < 1:
        raise AutolabelError("shards in flight (per run and per worker), chunk size and shard size must be at least 1")
    active = AutolabelRun.objects.filter(project=project, status__in=[RunStatus.PENDING, RunStatus.RUNNING])
    with transaction.atomic():
        if active.exists():
            raise RunActiveError(f"run #{active.first().pk} is still going")  # type: ignore[union-attr]
        row = AutolabelRun.objects.create(
            project=project,
            calibration=calibration,
            created_by=user,
            audit_share=audit_share,
            max_shards_in_flight=max_shards_in_flight,
            max_shards_per_worker=max_shards_per_worker,
            chunk_size=chunk_size,
            shard_items=shard_items,
            seed=project.seed,
            sent_at=timezone.now(),
        )
        dispatch("plan", row.id)
    return row


def run_plan(*, run_id: int, dispatch: Dispatch = celery_dispatch) -> AutolabelRun:
    """pending → running: the drift check, the run's items (written once), its shards; enqueues the
    first shards. A drifted prompt or adapter set refuses the run (nothing is scored)."""
    run = AutolabelRun.objects.select_related("project", "calibration").get(id=run_id)
    if run.status != RunStatus.PENDING:
        _feed(run, dispatch)
        return run
    ctx = _context(run.project)
    reason = _drift(run, ctx)
    if reason:
        _refuse(run.id, reason)
        return AutolabelRun.objects.get(id=run.id)
    ids = _plan_items(run, ctx)
    n_shards = max(1, math.ceil(len(ids) / run.shard_items)) if len(ids) else 0
    _, offsets = pipeline.write_shard_index(autolabel_run_dir(run), ids, n_shards)  # every shard's items, hashed once
    counts = np.diff(offsets)
    with transaction.atomic():
        AutolabelShard.objects.bulk_create(
            [AutolabelShard(run=run, shard=s, n_items=int(counts[s])) for s in range(n_shards)],
            ignore_conflicts=True,
            batch_size=2000,
        )
        moved = AutolabelRun.objects.filter(id=run.id, status=RunStatus.PENDING).update(
            status=RunStatus.RUNNING,
            started_at=timezone.now(),
            prompt_hash=ctx.renderer.prompt_hash,
            adapter_set_hash=ctx.adapter_set,
            model_version=ctx.predictor.calibrated(cal.Calibrator.from_json(run.calibration.calibrator)).fingerprint,
            n_items=len(ids),
            n_shards=n_shards,
            counts={"k": max(1, len(ctx.refs))},
        )
    run.refresh_from_db()
    if moved:
        _feed(run, dispatch)
    return run


def _plan_items(run: AutolabelRun, ctx: Context) -> np.ndarray:
    """The run's items: the unlabelled pool minus items already decided under this (prompt, adapter
    set) and items an earlier run under it left as open dead letters (theirs is the dead-letter retry:
    a re-run would score a low-mass item again only to dead-letter it again). Written once to
    items.npy, so a replayed plan sees the same list."""
    path = autolabel_run_dir(run) / "items.npy"
    if path.is_file():
        return np.load(path)
    pool = auto_sel.unlabelled_pool(project=run.project)
    done = AutoLabel.objects.filter(
        item__project=run.project, prompt_hash=ctx.renderer.prompt_hash, adapter_set_hash=ctx.adapter_set
    ).values("item_id")
    dead = DeadLetter.objects.filter(
        run__project=run.project,
        run__prompt_hash=ctx.renderer.prompt_hash,
        run__adapter_set_hash=ctx.adapter_set,
        resolved=False,
    ).values("item_id")
    todo = pool.exclude(id__in=done).exclude(id__in=dead)
    ids = np.fromiter(todo.order_by("id").values_list("id", flat=True).iterator(), dtype=np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".items.{os.getpid()}.tmp.npy")
    np.save(tmp, ids)
    os.replace(tmp, path)
    return ids


def _refuse(run_id: int, reason: str) -> None:
    _end_run(run_id, RunStatus.REFUSED, reason)


def run_fail(*, run_id: int, reason: str) -> None:
    _end_run(run_id, RunStatus.FAILED, reason)


def _end_run(run_id: int, status: str, reason: str) -> None:
    jobs.end(
        AutolabelRun.objects.filter(id=run_id),
        status=status,
        open_statuses=(RunStatus.PENDING, RunStatus.RUNNING),
        reason=reason[:MAX_REASON],
        finished_at=timezone.now(),
    )


def _feed(run: AutolabelRun, dispatch: Dispatch) -> int:
    """Backpressure: queue pending shards until ``max_shards_in_flight`` are queued or running;
    finish the run when none is left. Returns shards enqueued."""
    if run.status != RunStatus.RUNNING:
        return 0
    shards = AutolabelShard.objects.filter(run=run)
    in_flight = shards.filter(status__in=[ShardStatus.QUEUED, ShardStatus.RUNNING]).count()
    sent = 0
    for shard in (
        shards.filter(status=ShardStatus.PENDING)
        .order_by("shard")
        .values_list("shard", flat=True)[: max(0, run.max_shards_in_flight - in_flight)]
    ):
        waiting = shards.filter(shard=shard, status=ShardStatus.PENDING)
        if waiting.update(status=ShardStatus.QUEUED, sent_at=timezone.now()):
            dispatch("shard", run.id, shard)
            sent += 1
    _maybe_finish(run.id)
    return sent


def _maybe_finish(run_id: int) -> bool:
    if AutolabelShard.objects.filter(run_id=run_id).exclude(status=ShardStatus.DONE).exists():
        return False
    return bool(
        AutolabelRun.objects.filter(id=run_id, status=RunStatus.RUNNING).update(
            status=RunStatus.DONE, finished_at=timezone.now()
        )
    )


def _claim(run_id: int, shard: int, me: str) -> bool:
    """One live worker per shard: the job engine's claim (conditional UPDATEs, a dead holder's shard
    taken over, attempts counted) on this table of the same shape."""
    return jobs.claim(AutolabelShard.objects.filter(run_id=run_id, shard=shard, run__status=RunStatus.RUNNING), me=me)


def shard_run(*, run_id: int, shard: int, dispatch: Dispatch = celery_dispatch) -> AutolabelShard:
    """Decide one shard's items (task body of ``annotate.gpu.autolabel_shard``). Idempotent: a done
    shard or one a live worker holds is left alone; items already decided are skipped."""
    from annotate.services.scoring import worker_id

    me, node = worker_id(), _node()
    try:
        if _claim(run_id, shard, me) and _within_worker_cap(run_id, shard, me, node, dispatch):
            row = AutolabelShard.objects.select_related("run__project", "run__calibration").get(
                run_id=run_id, shard=shard
            )
            try:
                if row.attempts > MAX_SHARD_ATTEMPTS:
                    _give_up(row)
                else:
                    _run_shard(row)
            except ClaimLost:  # another worker took the shard over: it is theirs, nothing to give back
                pass
            except Exception as exc:  # back in line for another worker; the claim counts attempts
                AutolabelShard.objects.filter(id=row.id, worker=me, status=ShardStatus.RUNNING).update(
                    status=ShardStatus.PENDING, error=f"{type(exc).__name__}: {exc}"[:MAX_REASON]
                )
                raise
    finally:
        _feed(AutolabelRun.objects.get(id=run_id), dispatch)
    return AutolabelShard.objects.get(run_id=run_id, shard=shard)


WORKER_FULL_RETRY_S = 5.0  # a shard its worker had no room for is offered again after this


def _node() -> str:
    """The Celery node running this task (one per GPU worker; its pool's processes share it), else
    this process."""
    from celery import current_task

    from annotate.services.scoring import worker_id

    hostname = getattr(getattr(current_task, "request", None), "hostname", None)
    return str(hostname) if hostname else worker_id()


def node_load(node: str, *, me: str = "") -> int:
    """Shards running on ``node`` held by live processes (``me`` counted without asking)."""
    from annotate.services.workers import worker_alive

    holders = AutolabelShard.objects.filter(node=node, status=ShardStatus.RUNNING).values_list("worker", flat=True)
    return sum(1 for w in holders if w == me or worker_alive(w))


def _within_worker_cap(run_id: int, shard: int, me: str, node: str, dispatch: Dispatch) -> bool:
    """Claim first, then count (two claims racing on one node both see each other): over the run's
    ``max_shards_per_worker``, the shard goes back to the queue for another worker, uncounted."""
    row = AutolabelShard.objects.filter(run_id=run_id, shard=shard, worker=me, status=ShardStatus.RUNNING)
    row.update(node=node)
    cap = AutolabelRun.objects.values_list("max_shards_per_worker", flat=True).get(id=run_id)
    if node_load(node, me=me) <= cap:
        return True
    if row.update(status=ShardStatus.QUEUED, worker="", node="", attempts=F("attempts") - 1):
        dispatch("shard", run_id, shard, countdown=WORKER_FULL_RETRY_S)
    return False


def _shard_items(row: AutolabelShard) -> list[int]:
    run = row.run
    directory = autolabel_run_dir(run)
    if not (directory / "offsets.npy").is_file():  # planned before the index existed
        pipeline.write_shard_index(directory, np.load(directory / "items.npy"), run.n_shards)
    mine = pipeline.read_shard(directory, row.shard).tolist()
    decided = set(
        AutoLabel.objects.filter(
            item_id__in=mine, prompt_hash=run.prompt_hash, adapter_set_hash=run.adapter_set_hash
        ).values_list("item_id", flat=True)
    )
    dead = set(DeadLetter.objects.filter(run=run, item_id__in=mine).values_list("item_id", flat=True))
    still_open = set(auto_sel.unlabelled_pool(project=run.project).filter(id__in=mine).values_list("id", flat=True))
    return [i for i in mine if i not in decided and i not in dead and i in still_open]


def _give_up(row: AutolabelShard) -> None:
    """A shard that keeps killing its workers: its undecided items become dead letters, the shard is
    done, the run goes on."""
    items = _shard_items(row)
    dead_letter_add(run=row.run, item_ids=items, reason=DeadLetter.Reason.FAILED, detail=row.error or "shard crashed")
    AutolabelShard.objects.filter(id=row.id).update(status=ShardStatus.DONE)


def hold_shard(shard_id: int, me: str) -> None:
    """First statement of a chunk's transaction: lock the shard's row while ``me`` still holds it, else
    ClaimLost. A takeover's claim is an UPDATE of that row, so it waits until this transaction ends: a
    holder killed mid-commit has its chunk either committed before the new holder reads what is
    decided, or rolled back, never both written; a holder counted dead while alive (a node that missed a
    ping) writes nothing more. (SQLite runs one writer at a time: no lock needed there.)"""
    held = AutolabelShard.objects.select_for_update().filter(id=shard_id, worker=me, status=ShardStatus.RUNNING)
    if not held.exists():
        raise ClaimLost(f"shard {shard_id}: no longer held by {me}")


def _run_shard(row: AutolabelShard) -> None:
    run = row.run
    ctx = _context(run.project)
    reason = _drift(run, ctx)
    if reason:  # this worker renders another prompt (other tokenizer, template, model revision)
        _refuse(run.id, f"worker {row.worker}: {reason}")
        AutolabelShard.objects.filter(id=row.id).update(status=ShardStatus.FAILED, error=reason[:MAX_REASON])
        return
    audit_refresh(calibration=run.calibration)
    decider = Decider(run, ctx, shard=row)
    items = _shard_items(row)
    started = time.perf_counter()
    for start in range(0, len(items), run.chunk_size):
        decider.decide(items[start : start + run.chunk_size])
        steppoints.reached("autolabel", row.shard)  # a chunk committed, the shard not done
    AutolabelShard.objects.filter(id=row.id, worker=row.worker, status=ShardStatus.RUNNING).update(
        status=ShardStatus.DONE, seconds=F("seconds") + (time.perf_counter() - started), error=""
    )


Tier2 = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # escalated rows → (pred, conf) of tier 2


class Decisions:
    """Label distributions → AutoLabel rows under the run's calibration: the calibrator, each class's
    tier-1 threshold (none for a class the audit blocked), the cascade tier for what tier 1 escalates,
    the random audit pick, the people queue. Shared by the engine's scores (Decider) and a batch API's
    answers (annotate/services/batch_api.py), so both decide alike."""

    def __init__(self, run: AutolabelRun) -> None:
        calibration = Calibration.objects.get(id=run.calibration_id)
        self.run, self.calibration = run, calibration
        self.calibrator = cal.Calibrator.from_json(calibration.calibrator)
        self.label_ids = list(loop_sel.label_index(project=run.project))
        blocked = set((calibration.blocked or {}).keys())
        self.limits = {
            tier: [None if r["label"] in blocked else r["threshold"] for r in rules]
            for tier, rules in (calibration.thresholds or {}).items()
        }

    def write(
        self,
        ids: list[int],
        p: np.ndarray,
        *,
        q: np.ndarray | None = None,
        tier2: Tier2 | None = None,
        to_people: np.ndarray | None = None,
    ) -> np.ndarray:
        """Decide the items ``ids`` from their members' distributions ``p`` [K, N, C] (upserts: a repeat
        rewrites the same rows); ``q``: the calibrated predictor's probabilities [N, C] when the caller
        has them (the engine's path: annotate/services/predictor.py), else the calibrator on the members'
        mean (a batch API's answers); ``tier2`` scores the rows tier 1 escalates (None: they go to
        people); ``to_people`` (bool[N]) escalates rows whatever their confidence. Returns the accepted
        mask."""
        if q is None:
            q = self.calibrator.apply(p.mean(axis=0))
        pred, conf = q.argmax(axis=1), q.max(axis=1)
        tier = np.array(["model"] * len(ids), dtype=object)
        never = [None] * len(self.label_ids)
        forced = np.zeros(len(ids), dtype=bool) if to_people is None else to_people
        accepted = cal.accept(pred, conf, self.limits.get("model", never)) & ~forced
        escalate = np.flatnonzero(~accepted & ~forced)
        cascade = self.calibration.cascade
        if tier2 is not None and cascade != "none" and len(escalate):
            pred2, conf2 = tier2(escalate)
            ok2 = cal.accept(pred2, conf2, self.limits.get(cascade, never))
            tier[escalate] = cascade
            pred[escalate[ok2]], conf[escalate[ok2]] = pred2[ok2], conf2[ok2]
            accepted[escalate[ok2]] = True
        audited = accepted & cal.audit_pick(np.array(ids), share=self.run.audit_share, seed=self.run.seed)
        rows = [
            AutoLabel(
                item_id=item_id,
                prompt_hash=self.run.prompt_hash,
                adapter_set_hash=self.run.adapter_set_hash,
                model_version=self.run.model_version,
                run=self.run,
                label_id=self.label_ids[int(pred[n])],
                confidence=round(float(conf[n]), 6),
                probs=[round(float(x), 6) for x in q[n]],
                tier=str(tier[n]),
                decision=AutoLabel.Decision.ACCEPTED if accepted[n] else AutoLabel.Decision.ESCALATED,
                audit=AutoLabel.Audit.PENDING if audited[n] else AutoLabel.Audit.NONE,
            )
            for n, item_id in enumerate(ids)
        ]
        with transaction.atomic():
            AutoLabel.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["item", "prompt_hash", "adapter_set_hash"],
                update_fields=["run", "model_version", "label", "confidence", "probs", "tier", "decision", "audit"],
            )
            project = self.run.project
            queue_for_people(
                project=project, item_ids=[ids[i] for i in np.flatnonzero(~accepted)], source=BatchItem.Source.CASCADE
            )
            queue_for_people(
                project=project, item_ids=[ids[i] for i in np.flatnonzero(audited)], source=BatchItem.Source.AUDIT
            )
        return accepted


class Decider(Decisions):
    """Scores items and writes their decisions: tier 1, the cascade tier, the audit pick, the people
    queue, dead letters. One per shard (the calibration and blocked classes are read once)."""

    def __init__(self, run: AutolabelRun, ctx: Context, *, shard: AutolabelShard | None = None) -> None:
        super().__init__(run)
        self.ctx = ctx
        self.shard = shard  # a shard's chunks commit only while its worker holds it (hold_shard)
        self.predictor = ctx.predictor.calibrated(self.calibrator)  # shares the fitted proxy with ctx's
        self.names = [label.name for label in ctx.spec.labels]

    def decide(self, item_ids: list[int], *, retry: bool = False) -> None:
        """Decide a chunk. ``retry``: dead letters tried again (over-context items scored on their cut
        text; progress already counted them)."""
        texts = dict(Item.objects.filter(id__in=item_ids).values_list("id", "text"))
        ids = [i for i in item_ids if i in texts]
        try:
            scores = _score(self.ctx.engine, self.ctx.renderer, [texts[i] for i in ids], self.ctx.refs, len(ids))
        except Exception as exc:
            if len(ids) > 1:
                for i in ids:  # one bad item must not take its chunk with it
                    self.decide([i], retry=retry)
                return
            with transaction.atomic():
                self._hold()
                detail = f"{type(exc).__name__}: {exc}"
                dead_letter_add(run=self.run, item_ids=ids, reason=DeadLetter.Reason.FAILED, detail=detail)
                if not retry:
                    AutolabelRun.objects.filter(id=self.run.id).update(items_done=F("items_done") + len(ids))
            return
        mass = scores.mass.mean(axis=0)
        low = mass < self.ctx.config.selection.mass_threshold
        long = np.zeros_like(scores.truncated) if retry else scores.truncated
        keep = np.flatnonzero(~low & ~long)
        with transaction.atomic():  # a chunk's decisions, dead letters and progress commit together
            self._hold()
            self._dead(ids, long, DeadLetter.Reason.OVER_CONTEXT, "longer than the context; a retry scores it cut")
            self._dead(ids, low & ~long, DeadLetter.Reason.LOW_MASS, "label mass {:.3f} under the threshold", mass)
            if len(keep):
                self._write([ids[i] for i in keep], scores.p[:, keep], [texts[ids[i]] for i in keep])
            self._account(scores, 0 if retry else len(ids))

    def _hold(self) -> None:
        if self.shard is not None:
            hold_shard(self.shard.id, self.shard.worker)

    def _dead(self, ids: list[int], mask: np.ndarray, reason: str, detail: str, values: Any = None) -> None:
        for i in np.flatnonzero(mask):
            text = detail.format(float(values[i])) if values is not None else detail
            dead_letter_add(run=self.run, item_ids=[ids[i]], reason=reason, detail=text)

    def _account(self, scores: Scores, n: int) -> None:
        AutolabelRun.objects.filter(id=self.run.id).update(
            items_done=F("items_done") + n,
            seconds=F("seconds") + scores.seconds,
            tokens=F("tokens") + scores.tokens,
            computed_tokens=F("computed_tokens") + scores.computed_tokens,
        )

    def _write(self, ids: list[int], p: np.ndarray, texts: list[str]) -> None:
        q = self.predictor.probabilities(p, texts)
        cascade = self.calibration.cascade

        def tier2(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return self._tier2(cascade, p[:, rows], [texts[i] for i in rows])

        self.write(ids, p, q=q, tier2=tier2)

    def _tier2(self, cascade: str, p: np.ndarray, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if cascade == "agreement":
            return cal.agreement_tier(p, self.calibrator)
        if cascade == "permuted":
            perms = cal.code_permutations(len(self.names))
            variants = _variant_scores(self.ctx, texts, perms)
            base = self.ctx.predictor.probabilities(p, texts)  # tier 1's distribution, before calibration
            return cal.permuted_tier(np.concatenate([base[None], variants]), self.calibrator)
        second = _second_model_scores(self.ctx, self.calibration.second_model_dir, texts)
        return cal.model_tier(second, cal.Calibrator.from_json(self.calibration.tier_calibrators["second_model"]))


# -- dead letters -----------------------------------------------------------------------------------


def dead_letter_add(*, run: AutolabelRun, item_ids: Sequence[int], reason: str, detail: str) -> int:
    """One row per (run, item); a repeat bumps attempts and reopens it."""
    for item_id in item_ids:
        updated = DeadLetter.objects.filter(run=run, item_id=item_id).update(
            reason=reason, detail=detail[:MAX_REASON], attempts=F("attempts") + 1, resolved=False
        )
        if not updated:
            DeadLetter.objects.get_or_create(
                run=run, item_id=item_id, defaults={"reason": reason, "detail": detail[:MAX_REASON]}
            )
    return len(item_ids)


def dead_letter_retry(
    *, project: Project, ids: Sequence[int] | None = None, dispatch: Dispatch = celery_dispatch
) -> int:
    """Queue the project's open dead letters (all, or the given ids) for another try; over-context
    items are scored on their truncated text this time."""
    rows = DeadLetter.objects.filter(run__project=project, resolved=False)
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    picked = list(rows.values_list("id", flat=True))
    if picked:
        dispatch("retry", picked)
    return len(picked)


def dead_letter_retry_run(*, dead_letter_ids: Sequence[int]) -> int:
    """Task body: rescore the dead letters' items with their run's calibration. A letter is resolved
    once its item has a decision; one that fails again stays open with attempts + 1. Letters of a run
    whose predictor has drifted since (a newer round, another prompt) stay open: their decisions would
    carry the run's model version but not its predictor."""
    rows = list(DeadLetter.objects.filter(id__in=list(dead_letter_ids), resolved=False).select_related("run"))
    decided = 0
    for run_id in sorted({r.run_id for r in rows}):
        run = AutolabelRun.objects.select_related("project", "calibration").get(id=run_id)
        mine = [r for r in rows if r.run_id == run_id]
        if not run.prompt_hash:
            continue
        ctx = _context(run.project)
        if _drift(run, ctx):
            continue
        decider = Decider(run, ctx)
        for letter in mine:
            decider.decide([letter.item_id], retry=True)
        done_ids = set(
            AutoLabel.objects.filter(
                item_id__in=[r.item_id for r in mine],
                prompt_hash=run.prompt_hash,
                adapter_set_hash=run.adapter_set_hash,
            ).values_list("item_id", flat=True)
        )
        decided += DeadLetter.objects.filter(run=run, item_id__in=done_ids).update(resolved=True)
    return decided


# -- audit ------------------------------------------------------------------------------------------


def audit_refresh(*, calibration: Calibration) -> list[cal.AuditStatus]:
    """Settle audited rows whose item now has a human final label (passed / failed) and block every
    class whose audited precision is, beyond its interval, under the target (the alarm). A blocked
    class is never auto-accepted again on this calibration; later items of it go to people."""
    pending = AutoLabel.objects.filter(
        run__calibration=calibration, audit=AutoLabel.Audit.PENDING, item__final_label__isnull=False
    )
    pending.filter(label_id=F("item__final_label_id")).update(audit=AutoLabel.Audit.PASSED)
    pending.filter(~Q(label_id=F("item__final_label_id"))).update(audit=AutoLabel.Audit.FAILED)
    statuses = auto_sel.audit_statuses(calibration=calibration)
    alarms = {
        s.label: f"audit: {s.correct}/{s.audited} right, 95% CI {s.ci_low:.2f}–{s.ci_high:.2f} under "
        f"the {calibration.target:.0%} target"
        for s in statuses
        if s.alarm
    }
    with transaction.atomic():
        row = Calibration.objects.select_for_update().get(id=calibration.id)
        blocked = dict(row.blocked or {})
        if set(alarms) - set(blocked):
            blocked.update({k: v for k, v in alarms.items() if k not in blocked})
            Calibration.objects.filter(id=row.id).update(blocked=blocked)
    calibration.blocked = blocked
    return statuses


# -- resume -----------------------------------------------------------------------------------------


def autolabel_resume_all(*, dispatch: Dispatch = celery_dispatch, since: datetime | None = None) -> int:
    """Worker start (the job engine's resume, annotate/services/jobs.py): a calibration running on a
    dead worker, and a pending calibration or run whose message may be lost, are sent again; so are a
    running run's shards running on a dead worker or queued with a message that may be lost. Each unit
    once, however many workers start at once (``jobs.resend_due``); a duplicate is harmless anyway (the
    claim lets one in). Then each run is fed up to its in-flight cap."""
    sent = 0
    C = Calibration.Status
    for cal_id in Calibration.objects.filter(status__in=[C.PENDING, C.RUNNING]).values_list("id", flat=True):
        rows = Calibration.objects.filter(id=cal_id)
        if jobs.requeue_dead(rows, to=C.PENDING) or jobs.resend_due(rows, waiting=(C.PENDING,), since=since):
            dispatch("calibrate", cal_id)
            sent += 1
    for run in AutolabelRun.objects.filter(status__in=[RunStatus.PENDING, RunStatus.RUNNING]):
        if run.status == RunStatus.PENDING:
            if jobs.resend_due(AutolabelRun.objects.filter(id=run.id), waiting=(RunStatus.PENDING,), since=since):
                dispatch("plan", run.id)
                sent += 1
            continue
        open_shards = AutolabelShard.objects.filter(run=run, status__in=[ShardStatus.QUEUED, ShardStatus.RUNNING])
        for shard in open_shards.values_list("shard", flat=True):
            unit = AutolabelShard.objects.filter(run=run, shard=shard)
            if jobs.requeue_dead(unit, to=ShardStatus.QUEUED) or jobs.resend_due(unit, since=since):
                dispatch("shard", run.id, shard)
                sent += 1
        sent += _feed(run, dispatch)
    return sent
