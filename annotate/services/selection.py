"""The selection step of a round (selecting → labeling): the batch the round's strategy picks, written
once as BatchItem rows (source cold / active / random), with the round's predictions upserted and
low-label-mass items moved to the leads' review bucket on the way.

Cold rounds pick at random or for diversity over the eligible pool; strategies that read scores
(scoring.selection.NEEDS_SCORES) pick from the round's scored, eligible candidates, refused unless
scored with the current adapter set and prompt (fail closed); the others from the whole eligible pool.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from django.db import transaction

from annotate import testhooks
from annotate.loopconfig import round_config
from annotate.models import BatchItem, Item, Prediction, Round, ScoreShard, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import claims
from annotate.services.proxy import embeddings, item_texts, proxy_probabilities
from annotate.services.round_state import S, add_cost, round_fail, round_transition
from scoring import pipeline, portfolio
from training import ensemble

PREDICTION_CHUNK = 2000


def round_select(*, round_id: int) -> Round:
    """selecting → labeling: the batch the round's strategy picks, written once. Held as the round's
    ``select`` unit; a replay after the rows committed only finishes the move."""
    return claims.run_round_step(
        round_id, status=S.SELECTING, kind=WorkClaim.Kind.SELECT, what="selection", step=_select
    )


def _select(row: Round) -> None:
    if BatchItem.objects.filter(round=row).exists():  # a replay after the rows committed
        round_transition(row.id, S.SELECTING, S.LABELING)
        return
    if row.final_requested:  # a final-model round labels nothing: straight to training, from scratch
        round_transition(row.id, S.SELECTING, S.TRAINING, train_steps_total=0, train_steps_done=0)
        return
    started = time.perf_counter()
    chosen = choose_batch(round=row)
    testhooks.stall("select", row.number)
    if not chosen:
        _nothing_chosen(row)
        return
    with transaction.atomic():
        BatchItem.objects.bulk_create(
            [
                BatchItem(round=row, item_id=item_id, source=source, rank=rank, uncertainty=u)
                for rank, (item_id, source, u) in enumerate(chosen)
            ],
            ignore_conflicts=True,
        )
        batch_overlap_apply(round=row)  # the overlap share of the batch needs k distinct annotators
        round_transition(row.id, S.SELECTING, S.LABELING)
    add_cost(round_id=row.id, step="selecting", seconds=time.perf_counter() - started, device="cpu")


def _nothing_chosen(row: Round) -> None:
    """No batch. Every pool item labelled (the ones in the leads' review bucket aside) is the pool's
    end, a success: the round trains the final model from scratch on every label and is marked
    ``pool_exhausted``. Anything else that leaves nothing to pick is a failure that says what waits."""
    project = row.project
    if loop_sel.eligible_pool(project=project).exists():
        reason = "no scored candidate was eligible (low label mass sent them to review); start the round again"
    elif busy := loop_sel.unlabelled_pool(project=project).count():
        reason = (
            f"nothing to select: the unlabelled pool items left ({busy}) are still with annotators (leased, or"
            " waiting for another annotator's label); start the round once they are finished"
        )
    elif not Item.objects.filter(project=project, is_test=False, final_label__isnull=False).exists():
        reason = "the pool is empty: import items first"
    else:
        round_transition(row.id, S.SELECTING, S.TRAINING, pool_exhausted=True, train_steps_total=0, train_steps_done=0)
        return
    round_fail(round_id=row.id, reason=reason)


def batch_overlap_apply(*, round: Round) -> int:
    """Make the project's ``overlap_share`` of the round's batch need ``overlap_annotators`` distinct
    annotators (so leads see agreement and disagreements on training items, not only on the test
    set). The overlap rows are spread evenly over the batch's rank order (every n-th row from the
    first), so they come up early and throughout. Called once when the batch is written; idempotent.
    Returns how many items need several annotators."""
    project = round.project
    if project.overlap_share <= 0 or project.overlap_annotators < 2:
        return 0
    ranked = list(BatchItem.objects.filter(round=round).order_by("rank", "item_id").values_list("item_id", flat=True))
    if not ranked:
        return 0
    n = max(1, round_half_up(project.overlap_share * len(ranked)))
    step = len(ranked) / n
    chosen = [ranked[int(i * step)] for i in range(n)]
    Item.objects.filter(id__in=chosen, final_label__isnull=True, required_labels__lt=project.overlap_annotators).update(
        required_labels=project.overlap_annotators
    )
    return n


def round_half_up(value: float) -> int:
    return int(value + 0.5)


def predictions_upsert(
    *,
    round: Round,
    item_ids: np.ndarray,
    mean_p: np.ndarray,
    mass_mean: np.ndarray,
    uncertainty: np.ndarray | None,
    prompt_hash: str,
    adapter_set_hash: str,
) -> int:
    """One Prediction per (item, prompt, adapter set); a rerun updates the same rows."""
    label_ids = list(loop_sel.label_index(project=round.project))
    rows = [
        Prediction(
            item_id=int(item_id),
            round=round,
            prompt_hash=prompt_hash,
            adapter_set_hash=adapter_set_hash,
            label_id=label_ids[int(np.argmax(mean_p[i]))],
            probs=[round_(x) for x in mean_p[i]],
            mass=float(mass_mean[i]),
            uncertainty=None if uncertainty is None else float(uncertainty[i]),
        )
        for i, item_id in enumerate(item_ids)
    ]
    for start in range(0, len(rows), PREDICTION_CHUNK):
        Prediction.objects.bulk_create(
            rows[start : start + PREDICTION_CHUNK],
            update_conflicts=True,
            unique_fields=["item", "prompt_hash", "adapter_set_hash"],
            update_fields=["round", "label", "probs", "mass", "uncertainty"],
        )
    return len(rows)


def round_(x: float) -> float:
    return round(float(x), 5)


def review_bucket_move(*, item_ids: list[int], mass: dict[int, float], threshold: float) -> int:
    """Low-label-mass pool items go to the leads' review bucket (never selected until returned)."""
    moved = 0
    for item_id in item_ids:
        moved += Item.objects.filter(id=item_id, state=Item.State.POOL, final_label__isnull=True).update(
            state=Item.State.REVIEW,
            review_reason=f"label mass {mass[item_id]:.3f} under {threshold:g}: the model answers off the label set",
        )
    return moved


def _texts(ids: np.ndarray) -> tuple[list[str], list[str]]:
    rows = item_texts(ids.tolist())
    return [rows[int(i)][0] for i in ids], [rows[int(i)][1] for i in ids]


def choose_batch(*, round: Round) -> list[tuple[int, str, float | None]]:
    """The round's batch as (item id, source, uncertainty), in rank order, picked by the round's
    strategy. Cold rounds: random or diversity over the eligible pool. Strategies that read scores
    (NEEDS_SCORES): the round's scores (refused unless made with the current adapter set and prompt),
    predictions upserted, low mass → review, then the selection over the eligible scored rows. The
    others (random, kcenter-only): the whole eligible pool, so last round's most uncertain items
    carried into the candidates cannot bias them."""
    from scoring.selection import NEEDS_EMBEDDINGS, NEEDS_LABELS, NEEDS_SCORES, committee_distribution

    config = round_config(round)
    cold = round.strategy == "cold-start"
    ids, u, mean_p = loop_sel.eligible_ids(project=round.project), None, None
    if len(ids) == 0:  # the planner scored nothing either (planning._plan): nothing to pick from
        return []
    if not cold and round.strategy in NEEDS_SCORES:
        ids, u, mean_p = _eligible_scored(round, config, ids)
    if len(ids) == 0:
        return []
    emb = labeled_emb = committee_p = None
    split = None
    # A cold round's mode was fixed when it was planned (planning.cold_mode); rows planned before
    # that was recorded follow the deployment's option.
    mode = str((round.metrics or {}).get("cold_mode", config.selection.cold_mode)) if cold else None
    if cold and mode != "random":
        ids = _cold_sample(ids, round.seed)
    needs_embeddings = mode != "random" if cold else round.strategy in NEEDS_EMBEDDINGS
    if needs_embeddings:
        labeled = loop_sel.labeled_items(project=round.project)
        seen = _cold_sample(np.arange(len(labeled.texts)), round.seed, "cold-labeled") if cold else None
        emb = embeddings(*_texts(ids))
        if seen is None:
            labeled_emb = embeddings(labeled.texts, labeled.hashes)
        else:  # a cold round only needs where the labels lie: a sample of thousands of imported ones
            labeled_emb = embeddings([labeled.texts[i] for i in seen], [labeled.hashes[i] for i in seen])
        if not cold and round.strategy in NEEDS_LABELS and mean_p is not None:
            proxy_p = proxy_probabilities(labeled_emb, labeled.label_indices, emb, mean_p.shape[1])
            by_blend = config.selection.committee == "blend"
            weight = _committee_weight(round) if by_blend else None
            committee_p = committee_distribution(mean_p, proxy_p, config.k, weight=weight)
            if by_blend:  # a null weight: no evaluation has fitted one yet, so the K + 1 equal members drew
                _merge_metrics(round.id, committee={"mode": "blend", "weight": weight})
            if round.strategy == "portfolio":
                split = portfolio_split(
                    round=round, labeled=labeled, labeled_emb=labeled_emb, n_classes=mean_p.shape[1]
                )
    sel = pipeline.select(
        cold=cold,
        strategy=round.strategy,
        n_eligible=len(ids),
        config=config.selection,
        rng=pipeline.step_rng(round.seed, "select"),
        uncertainty=u,
        emb=emb,
        labeled_emb=labeled_emb,
        committee_p=committee_p,
        shares=None if split is None else split.shares,
        cold_mode=mode,
    )
    if split is not None:
        picks: dict[str, list[int]] = {}
        for i, arm in zip(sel.indices, sel.arms, strict=True):
            picks.setdefault(arm, []).append(int(ids[i]))
        _merge_metrics(round.id, selection={**portfolio.split_to_json(split), "picks": picks})
    return [
        (int(ids[i]), "cold" if cold else "random" if r else "active", None if u is None else float(u[i]))
        for i, r in zip(sel.indices, sel.is_random, strict=True)
    ]


def _cold_sample(ids: np.ndarray, seed: int, step: str = "cold-sample") -> np.ndarray:
    """What a typical or diversity cold round embeds and clusters (eligible ids, or positions of the
    labeled items): all of them, or a seeded sample of TYPICAL_MAX_POINTS — a 2-million-row pool must
    not be embedded before its first round."""
    from scoring.selection import TYPICAL_MAX_POINTS

    if len(ids) <= TYPICAL_MAX_POINTS:
        return ids
    keep = pipeline.step_rng(seed, step).choice(len(ids), size=TYPICAL_MAX_POINTS, replace=False)
    return ids[np.sort(keep)]


def portfolio_split(
    *, round: Round, labeled: loop_sel.Labeled, labeled_emb: np.ndarray, n_classes: int
) -> portfolio.Split:
    """The portfolio's batch shares from the labels so far (scoring.portfolio): each labelled item's
    arm comes from its batch source (cold → the shared seed set, random slice → uniform) or from the
    picks the earlier portfolio rounds stored in ``metrics["selection"]``. Items other strategies
    picked train the model but are nobody's evidence."""
    arm_of: dict[int, str] = {}
    earlier = Round.objects.filter(project=round.project, number__lt=round.number).order_by("number")
    for metrics in earlier.values_list("metrics", flat=True):
        for arm, item_ids in ((metrics or {}).get("selection") or {}).get("picks", {}).items():
            arm_of.update((int(i), str(arm)) for i in item_ids)
    arms = [
        "seed" if source == "cold" else "random" if source == "random" else arm_of.get(item_id, "")
        for item_id, source in zip(labeled.item_ids, labeled.sources, strict=True)
    ]
    y = np.asarray(labeled.label_indices, dtype=np.int64)
    return portfolio.split_labels(labeled_emb, y, arms, n_classes, pipeline.step_rng(round.seed, "portfolio"))


def _merge_metrics(round_id: int, **values: Any) -> None:
    """Set keys of the round's metrics, keeping the others (read afresh: another step of this
    selection may have written since the row was loaded)."""
    metrics = dict(Round.objects.get(id=round_id).metrics or {})
    metrics.update(values)
    Round.objects.filter(id=round_id).update(metrics=metrics)


def _committee_weight(row: Round) -> float | None:
    """The blend weight of the predictor whose adapters scored this round: the latest finished round's
    evaluation (Round.metrics["blend"]["weight"], training/blend.py). None — the K + 1 equal members
    draw — before an evaluation has fitted one on held-out labels (the seed round's w = 1 is the
    adapters alone by default, not a fit: fewer than blend.MIN_HELDOUT held-out labels)."""
    from training.blend import MIN_HELDOUT

    latest = Round.objects.filter(project=row.project, status=S.DONE, number__lt=row.number).order_by("-number").first()
    record = ((latest.metrics or {}).get("blend") or {}) if latest is not None else {}
    weight, n = record.get("weight"), record.get("heldout_n")
    if not isinstance(weight, int | float) or not isinstance(n, int) or n < MIN_HELDOUT:
        return None
    return float(weight)


def _eligible_scored(
    row: Round, config: ensemble.LoopConfig, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The round's scored rows still eligible: ids, uncertainty, the ensemble's mean distribution;
    the review count in metrics."""
    ids, u, mean_p, review_count = _scored_candidates(row, config)
    keep = np.isin(ids, eligible)
    ids, u, mean_p = ids[keep], u[keep], mean_p[keep]
    metrics = dict(row.metrics or {})
    metrics.update({"review_bucket": review_count, "eligible_scored": len(ids)})
    Round.objects.filter(id=row.id).update(metrics=metrics)
    return ids, u, mean_p


def _scored_candidates(row: Round, config: ensemble.LoopConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Full-ensemble rows of the round's shards → predictions, review bucket; (ids, uncertainty,
    mean distribution, moved)."""
    from scoring.cache import require_current

    require_current(row.adapter_set_hash, loop_sel.prod_set_hash(project=row.project, before_number=row.number))
    paths = [Path(p) for p in ScoreShard.objects.filter(round=row).order_by("shard").values_list("path", flat=True)]
    ids, p, mass, full = pipeline.load_shards(paths)
    ids, p, mass = ids[full], p[:, full], mass[:, full]
    sig = pipeline.signals(p, mass, config.selection)
    predictions_upsert(
        round=row,
        item_ids=ids,
        mean_p=sig.mean_p,
        mass_mean=sig.mass_mean,
        uncertainty=sig.uncertainty,
        prompt_hash=row.prompt_hash,
        adapter_set_hash=row.adapter_set_hash,
    )
    low = ids[sig.review]
    review_bucket_move(
        item_ids=low.tolist(),
        mass={int(i): float(m) for i, m in zip(ids, sig.mass_mean, strict=True)},
        threshold=config.selection.mass_threshold,
    )
    # Counted from the rows, not from this call's moves, so a replayed selection reports the same.
    in_review = int(Item.objects.filter(id__in=low.tolist(), state=Item.State.REVIEW).count())
    keep = ~sig.review
    return ids[keep], sig.uncertainty[keep], sig.mean_p[keep], in_review
