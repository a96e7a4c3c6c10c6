"""The training steps of a round: freeze the training plan, then train one adapter per planned key.

The plan (``training_plan_run``, the round's ``train_plan`` unit, run by a worker — never inside an
annotator's request) reads every label once and writes ``train_plan.json``: K prod members warm-started
from the previous round's member k — or from scratch (``Round.training_mode``: the first adapters, a
consolidation round every N, the pool's end, a requested final model) — a from-scratch comparison
member every R rounds (compared with the warm one), and the equal-size active / random arms. Labels
revised later cannot make a resumed member differ from an uninterrupted one.

Each adapter (``train_adapter_run``, task ``annotate.gpu.train_adapter``) is a ``train`` unit with key
"arm:k", claimed by one live worker: a second worker, a duplicated message or a restart never trains
it twice (a worker that died mid-way is taken over, and the trainer resumes from its checkpoint).
``training.lora.train_adapter`` publishes the adapter atomically under ``round_dir/<arm>_<k>``; the
AdapterVersion row (unique (round, arm, k)) is written once. ``training_finish`` (called by the round
flow once every planned adapter on the round's path exists) moves the round to evaluating, once.

With loop option ``arms_timing`` "deferred" (the CPU profile) the plan is the same, but only its prod
members are on the round's path (``path_keys``): the comparison adapters (``comparison_keys``: scratch,
active, random) are trained after the round is done, by the same unit and claims (``train`` "arm:k"),
and their evaluation is the round's ``arms_eval`` unit, created here with the plan.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from django.db.models import F
from django.db.models.functions import Least

from annotate import steppoints
from annotate.loopconfig import round_arms_deferred, round_config, worker_config
from annotate.models import AdapterVersion, Item, Round, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import jobs
from annotate.services.round_state import (
    COMPARISON_RUNNING,
    COMPARISON_TRAINING_COST,
    Plan,
    S,
    add_cost,
    comparison_give_up,
    comparison_keys,
    comparison_mark,
    plan_path,
    read_plan,
    round_dir,
    round_transition,
    write_plan,
)
from scoring import pipeline
from scoring.device import device_kind
from scoring.toplayers import adapted_layers, adapter_config
from training import ensemble
from training.ensemble import LoopConfig
from training.eta import seconds_per_unit
from training.lora import ADAPTER_CONFIG


def train_plan(row: Round, labeled: loop_sel.Labeled, config: ensemble.LoopConfig, *, mode: str) -> Plan:
    """What each adapter of this round trains on: K prod members on every label, a from-scratch
    comparison member every R rounds (unless the prod members are trained from scratch themselves:
    ``mode``), and the equal-size active / random arms."""
    pairs = [[i, y] for i, y in zip(labeled.item_ids, labeled.label_indices, strict=True)]
    plan: Plan = {f"prod:{i}": pairs for i in range(config.k)}
    # The simulation harness turns the in-round comparison arms off (its strategies are the arms); the
    # CPU profile trains them every few rounds only (arms_every).
    if not config.arms or not ensemble.is_arms_round(row.number, config.arms_every):
        return plan
    if mode == Round.TrainingMode.WARM and ensemble.is_scratch_round(row.number, row.project.scratch_every):
        plan["scratch:0"] = pairs
    for arm, positions in ensemble.arm_training_sets(labeled.sources, pipeline.step_rng(row.seed, "arms")).items():
        plan[f"{arm}:0"] = [pairs[i] for i in positions]
    return plan


def has_plan(row: Round) -> bool:
    return plan_path(row).is_file()


def path_keys(row: Round) -> list[str]:
    """The planned adapters the round waits for before its evaluation: every one, less the deferred."""
    deferred = set(comparison_keys(row))
    return [key for key in read_plan(row) if key not in deferred]


def training_plan_run(*, round_id: int) -> Round:
    """Freeze the training round's plan (once) with the total of its optimiser steps."""
    return jobs.run_round_step(
        round_id, status=S.TRAINING, kind=WorkClaim.Kind.TRAIN_PLAN, what="the training plan", step=_write_plan
    )


def _write_plan(row: Round) -> None:
    from training.lora import total_steps

    if has_plan(row):
        return
    config = round_config(row)
    mode = training_mode(row, config)
    plan = train_plan(row, loop_sel.labeled_items(project=row.project), config, mode=mode)
    deferred = round_arms_deferred(row)
    # The round's progress bar counts the adapters it waits for: deferred comparison arms train after it.
    steps = sum(
        total_steps(len(pairs), config.train.for_arm(name.split(":")[0]))
        for name, pairs in plan.items()
        if not deferred or name.startswith(f"{AdapterVersion.Arm.PROD}:")
    )
    if deferred and any(not name.startswith(f"{AdapterVersion.Arm.PROD}:") for name in plan):
        jobs.work_rows(row.id, WorkClaim.Kind.ARMS_EVAL)  # owed from now on: the resume looks for it
    Round.objects.filter(id=row.id).update(
        train_steps_total=steps,
        train_steps_done=0,
        training_mode=mode,
        unit_seconds=0.0,
        train_runs_seconds=0.0,
        train_runs_steps=0,
    )
    write_plan(row, plan)  # last: the plan's existence says the totals and the mode are set


def training_mode(row: Round, config: ensemble.LoopConfig) -> str:
    """Warm start or from scratch for the round's prod members (training.ensemble.prod_training_mode):
    fixed once with the plan, so a resumed member trains as an uninterrupted one would have."""
    return ensemble.prod_training_mode(
        number=row.number,
        consolidate_every=config.consolidate_every,
        final=row.pool_exhausted or row.final_requested,
        has_previous=bool(loop_sel.prod_adapters(project=row.project, before_number=row.number)),
    )


def adapters_to_train(*, round: Round, keys: list[str] | None = None) -> list[tuple[str, int]]:
    """Planned (arm, k) of ``keys`` (None: the round's path) whose claim is not done and that no live
    worker holds, in plan order. An adapter whose AdapterVersion exists but whose claim its worker never
    closed (it died, or its last UPDATE failed) is listed too: its message finds the adapter and closes
    the claim."""
    done = set(
        WorkClaim.objects.filter(round=round, kind=WorkClaim.Kind.TRAIN, status=WorkClaim.Status.DONE).values_list(
            "key", flat=True
        )
    )
    out = []
    for key in path_keys(round) if keys is None else keys:
        if key in done:
            continue
        if jobs.needs_worker(jobs.work_rows(round.id, WorkClaim.Kind.TRAIN, key)).exists():
            arm, k = key.split(":")
            out.append((arm, int(k)))
    return out


def training_done(*, round: Round, keys: list[str] | None = None) -> bool:
    """Every planned adapter of ``keys`` (None: the round's path) exists and its claim is closed: a round
    never leaves training while a worker still holds one of its units."""
    if not has_plan(round):
        return False
    plan = set(path_keys(round) if keys is None else keys)
    made = {f"{a}:{k}" for a, k in AdapterVersion.objects.filter(round=round).values_list("arm", "k")}
    closed = set(
        WorkClaim.objects.filter(round=round, kind=WorkClaim.Kind.TRAIN, status=WorkClaim.Status.DONE).values_list(
            "key", flat=True
        )
    )
    return plan <= made and plan <= closed


def training_finish(*, round_id: int) -> bool:
    """training → evaluating once every planned adapter exists. True for the one caller that moved it."""
    row = Round.objects.get(id=round_id)
    return row.status == S.TRAINING and training_done(round=row) and round_transition(row.id, S.TRAINING, S.EVALUATING)


def train_adapter_run(*, round_id: int, arm: str, k: int) -> AdapterVersion | None:
    """Train (or resume, or find) one planned adapter of a training round — or a deferred comparison
    adapter of a done round whose comparison is still owed — holding its claim. None when the round is
    in neither case or a live worker holds the adapter. A deferred adapter that fails every attempt gives
    the comparison up (``comparison_give_up``); the round stays done."""
    row = Round.objects.select_related("project").get(id=round_id)
    key = f"{arm}:{k}"
    deferred = row.status == S.DONE and key in comparison_keys(row)
    if not (row.status == S.TRAINING or (deferred and comparison_owed(row))):
        return None
    rows = jobs.work_rows(row.id, WorkClaim.Kind.TRAIN, key)
    existing = AdapterVersion.objects.filter(round=row, arm=arm, k=k).first()
    if existing is not None:
        jobs.close(rows)  # its trainer may have died (or failed to write) after saving it
        return existing
    if not deferred:
        return jobs.run_claimed(rows, round_id=row.id, what=f"adapter {key}", step=lambda: _train(row, arm, k))
    return jobs.run_claimed(
        rows,
        round_id=row.id,
        what=f"comparison adapter {key}",
        step=lambda: _train(row, arm, k, on_path=False),
        give_up=lambda reason: comparison_give_up(round_id=row.id, reason=reason),
        started=lambda: comparison_mark(round_id=row.id, state=COMPARISON_RUNNING),
    )


def comparison_owed(row: Round) -> bool:
    """Whether the round's deferred comparison is still to be trained and evaluated (its ``arms_eval``
    unit exists and is not done: neither measured nor given up)."""
    return (
        WorkClaim.objects.filter(round=row, kind=WorkClaim.Kind.ARMS_EVAL)
        .exclude(status=WorkClaim.Status.DONE)
        .exists()
    )


def _lineage_config(row: Round, config: LoopConfig) -> LoopConfig:
    """``config`` with the adapted layer count of the project's prod adapters so far, when they have
    one: a warm start keeps its source's shape, so a project whose first adapters took 8 layers
    (before a deployment widened its label count's default, say) trains its from-scratch member and
    its comparison arms on 8 too, and "scratch vs warm" and "active vs random" stay like for like."""
    previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
    if not previous or not (Path(previous[0].path) / ADAPTER_CONFIG).is_file():
        return config
    layers = adapted_layers(adapter_config(previous[0].path))
    if layers == config.train.top_layers:
        return config
    return replace(config, train=replace(config.train, top_layers=layers))


def _train(row: Round, arm: str, k: int, *, on_path: bool = True) -> AdapterVersion:
    """One adapter; ``on_path=False`` (a deferred comparison adapter of a done round) moves neither the
    round's training progress nor its rate, and its seconds are the cost step "comparison_training"."""
    config = _lineage_config(row, worker_config(row))
    pairs = read_plan(row)[f"{arm}:{k}"]
    ids = [int(p[0]) for p in pairs]
    texts = dict(Item.objects.filter(id__in=ids).values_list("id", "text"))
    warm = None
    # A round planned before its mode was recorded ("") trained warm, as every round did then.
    if arm == AdapterVersion.Arm.PROD and row.training_mode != Round.TrainingMode.SCRATCH:
        previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
        warm = next((a for a in previous if a.k == k), None)
    last = [-1]
    run_started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        delta, last[0] = (done - last[0] if last[0] >= 0 else 0), done
        if delta > 0 and on_path:
            Round.objects.filter(id=row.id).update(
                train_steps_done=Least(F("train_steps_done") + delta, F("train_steps_total"))
            )
            _measure_rate(row.id, seconds=time.perf_counter() - run_started, steps=done)
        if 2 * done >= total:  # crash tests: halfway through the adapter, its checkpoint written
            steppoints.reached("train", f"{row.project.name}-{arm}:{k}")

    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    trained = ensemble.train_member(
        config=config,
        renderer=renderer,
        texts=[texts[i] for i in ids],
        label_indices=[int(p[1]) for p in pairs],
        out_dir=round_dir(row) / f"{arm}_{k}",
        round_seed=row.seed,
        arm=arm,  # type: ignore[arg-type]
        k=k,
        warm_from=warm.path if warm is not None else None,
        progress=progress,
    )
    adapter, created = AdapterVersion.objects.get_or_create(
        round=row,
        arm=arm,
        k=k,
        defaults={
            "project": row.project,
            "path": trained.path,
            "content_hash": trained.content_hash,
            "warm_from": warm,
            "n_labels": len(ids),
        },
    )
    if created:
        step = "training" if on_path else COMPARISON_TRAINING_COST
        add_cost(round_id=row.id, step=step, seconds=trained.seconds, device=device_kind(), steps=trained.steps)
    if created and on_path:
        _run_finished(row.id, seconds=time.perf_counter() - run_started, steps=trained.steps)
    return adapter


def _measure_rate(round_id: int, *, seconds: float, steps: int) -> None:
    """The ETA's rate from this run so far, until a run of the round has finished (training.eta)."""
    Round.objects.filter(id=round_id, train_runs_steps=0).update(
        unit_seconds=seconds_per_unit(
            finished_seconds=0.0, finished_units=0, current_seconds=seconds, current_units=steps
        )
    )


def _run_finished(round_id: int, *, seconds: float, steps: int) -> None:
    """A finished run's wall time, its start-up included (every run pays it again), joins the rate."""
    if steps <= 0:
        return
    Round.objects.filter(id=round_id).update(
        train_runs_seconds=F("train_runs_seconds") + seconds,
        train_runs_steps=F("train_runs_steps") + steps,
        unit_seconds=(F("train_runs_seconds") + seconds) / (F("train_runs_steps") + steps),
    )
