"""The selection step of a round (selecting → labeling): choose_batch reads what the round's strategy
declares (acquisition/strategies.py) and lets it pick; selection_record alone writes the result — the
round's predictions upserted, low-label-mass items moved to the leads' review bucket, the round's
metrics, and the batch as BatchItem rows (source cold / active / random), written once.

Cold rounds pick at random or for diversity over the eligible pool; strategies that read scores pick
from the round's scored, eligible candidates, refused unless scored with the current adapter set and
prompt (fail closed); the others from the whole eligible pool.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Case, CharField, Field, Value, When
from django.db.models.constants import OnConflict
from django.utils import timezone

from acquisition import portfolio, strategies
from acquisition.batch import Signals, committee_distribution, signals
from annotate import steppoints
from annotate.loopconfig import round_config
from annotate.models import BatchItem, Item, Prediction, Round, ScoreShard, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import jobs, people_queue
from annotate.services.predictor import round_predictor
from annotate.services.proxy import embeddings, item_texts, proxy_probabilities
from annotate.services.round_state import S, add_cost, round_fail, round_transition
from scoring import pipeline
from training import ensemble

PREDICTION_CHUNK = 2000  # rows an upsert transaction writes
# A Prediction row's columns in the upsert's order, the ones a rerun updates, and its unique key.
PREDICTION_COLUMNS = (
    "item", "round", "prompt_hash", "adapter_set_hash", "model_version", "label", "probs", "mass", "uncertainty",
    "created_at",
)  # fmt: skip
PREDICTION_UPDATED = ("round", "model_version", "label", "probs", "mass", "uncertainty")
PREDICTION_KEY = ("item", "prompt_hash", "adapter_set_hash")
REVIEW_CHUNK = 500  # items a review-bucket UPDATE moves (SQLite binds at most 32,766 parameters)
OFF_LABEL_SET = "the model answers off the label set"


def round_select(*, round_id: int) -> Round:
    """selecting → labeling: the batch the round's strategy picks, written once. Held as the round's
    ``select`` unit; a replay after the rows committed only finishes the move."""
    return jobs.run_round_step(round_id, status=S.SELECTING, kind=WorkClaim.Kind.SELECT, what="selection", step=_select)


def _select(row: Round) -> None:
    if BatchItem.objects.filter(round=row).exists():  # a replay after the rows committed
        _to_labeling(row)
        return
    if row.final_requested:  # a final-model round labels nothing: straight to training, from scratch
        round_transition(row.id, S.SELECTING, S.TRAINING, train_steps_total=0, train_steps_done=0)
        return
    started = time.perf_counter()
    batch = choose_batch(round=row)
    steppoints.reached("select", row.number)
    selection_record(round=row, batch=batch)
    if not batch.rows:
        _nothing_chosen(row)
        return
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
    probs: np.ndarray,
    mass_mean: np.ndarray,
    uncertainty: np.ndarray | None,
    prompt_hash: str,
    adapter_set_hash: str,
    model_version: str = "",
) -> int:
    """One Prediction per (item, prompt, adapter set) — the predictor's distribution ``probs`` and its
    fingerprint ``model_version`` (predictor/model.py); a rerun updates the same rows."""
    label_ids = np.asarray(list(loop_sel.label_index(project=round.project)), dtype=np.int64)
    # Rounded (5 decimals: short JSON) and made Python floats in two C calls instead of a numpy scalar and
    # a round() per probability (2.3 M for CLINC150's pool: 1.3 s of a 4.9 s upsert on the 2-core machine).
    values = np.round(np.asarray(probs, dtype=np.float64), 5).tolist()
    probs_field = _prediction_field("probs")
    created = _prediction_field("created_at").get_db_prep_save(timezone.now(), connection)
    rows = [
        (item_id, round.id, prompt_hash, adapter_set_hash, model_version, label_id)
        + (probs_field.get_db_prep_save(dist, connection), mass, u, created)
        for item_id, label_id, dist, mass, u in zip(
            np.asarray(item_ids, dtype=np.int64).tolist(),
            label_ids[np.argmax(probs, axis=1)].tolist(),
            values,
            np.asarray(mass_mean, dtype=np.float64).tolist(),
            [None] * len(values) if uncertainty is None else np.asarray(uncertainty, dtype=np.float64).tolist(),
            strict=True,
        )
    ]
    sql = _prediction_upsert_sql()
    for start in range(0, len(rows), PREDICTION_CHUNK):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, rows[start : start + PREDICTION_CHUNK])
    return len(rows)


def _prediction_upsert_sql() -> str:
    """The INSERT … ON CONFLICT DO UPDATE that ``bulk_create(update_conflicts=True)`` sends, written once
    for executemany: the ORM's per-row model instance and per-field preparation (ten fields of every
    row) took 2–3 s of a CLINC150 round's upsert (bench/select_round_cost.py) for what is plain values."""
    fields = [_prediction_field(name) for name in PREDICTION_COLUMNS]
    quote = connection.ops.quote_name
    conflict = connection.ops.on_conflict_suffix_sql(
        fields,
        OnConflict.UPDATE,
        [_prediction_field(name).column for name in PREDICTION_UPDATED],
        [_prediction_field(name).column for name in PREDICTION_KEY],
    )
    return (
        f"INSERT INTO {quote(Prediction._meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
        f" VALUES ({', '.join(['%s'] * len(fields))}) {conflict}"
    )


def _prediction_field(name: str) -> Field[Any, Any]:
    field = Prediction._meta.get_field(name)
    assert isinstance(field, Field)  # concrete columns, never a reverse relation
    return field


def review_bucket_move(*, item_ids: list[int], mass: dict[int, float], threshold: float) -> int:
    """Low-label-mass pool items go to the leads' review bucket (never selected until returned): one
    conditional UPDATE a chunk (each item's reason names its mass), so an item labelled meanwhile stays."""
    moved = 0
    for start in range(0, len(item_ids), REVIEW_CHUNK):
        chunk = item_ids[start : start + REVIEW_CHUNK]
        reason = Case(
            *(
                When(id=item_id, then=Value(f"label mass {mass[item_id]:.3f} under {threshold:g}: {OFF_LABEL_SET}"))
                for item_id in chunk
            ),
            output_field=CharField(),
        )
        moved += Item.objects.filter(id__in=chunk, state=Item.State.POOL, final_label__isnull=True).update(
            state=Item.State.REVIEW, review_reason=reason
        )
    return moved


def _texts(ids: np.ndarray, known: dict[int, tuple[str, str]] | None = None) -> tuple[list[str], list[str]]:
    """Texts and text hashes of ``ids``, in order. ``known``: the (text, hash) read so far by id, added to
    here, so one selection reads each item once (its predictor's and its strategy's inputs overlap)."""
    rows = {} if known is None else known
    order = ids.tolist()
    missing = [i for i in order if i not in rows]
    if missing:
        rows.update(item_texts(missing))
    return [rows[i][0] for i in order], [rows[i][1] for i in order]


@dataclass(frozen=True)
class Scored:
    """The round's full-ensemble rows (every scored candidate, eligible or not): what selection_record
    writes as Prediction rows and, under the label-mass threshold, as review-bucket moves."""

    ids: np.ndarray  # int64[N] item ids
    signals: Signals
    threshold: float
    probs: np.ndarray  # float[N, C]: the predictor's distributions (predictor/model.py)
    model_version: str  # the predictor's fingerprint


@dataclass(frozen=True)
class ChosenBatch:
    """What the round's strategy chose, not yet written: the rows in rank order as (item id, source,
    uncertainty), the strategy's explanation, the keys of Round.metrics it sets and the scores read."""

    rows: list[tuple[int, str, float | None]]
    explanation: str
    metrics: dict[str, Any] = field(default_factory=dict)
    scored: Scored | None = None


def round_strategy(row: Round, config: ensemble.LoopConfig) -> strategies.Strategy:
    """The round's strategy. A cold round's mode was fixed when it was planned (planning.cold_mode);
    rows planned before that was recorded follow the round's configuration."""
    if row.strategy == "cold-start":
        return strategies.cold_strategy(str((row.metrics or {}).get("cold_mode", config.selection.cold_mode)))
    return strategies.strategy(row.strategy)


def choose_batch(*, round: Round) -> ChosenBatch:
    """The round's batch as its strategy picks it; reads only (selection_record writes). The strategy
    gets exactly the inputs it declares (acquisition/strategies.py): scores — the round's, refused unless
    made with the current adapter set and prompt, low label mass left out for the review bucket —
    embeddings, and the labels' committee member and portfolio split. A strategy that reads no scores
    picks from the whole eligible pool, so last round's most uncertain items carried into the
    candidates cannot bias it."""
    config = round_config(round)
    chooser = round_strategy(round, config)
    ids = loop_sel.eligible_ids(project=round.project)
    if len(ids) == 0:  # the planner scored nothing either (planning._plan): nothing to pick from
        return ChosenBatch([], "no eligible item")
    metrics: dict[str, Any] = {}
    scored = u = mean_p = None
    texts: dict[int, tuple[str, str]] = {}
    if chooser.needs_scores:
        scored = _scored(round, config, texts)
        keep = ~scored.signals.review & np.isin(scored.ids, ids)
        ids, u, mean_p = scored.ids[keep], scored.signals.uncertainty[keep], scored.signals.mean_p[keep]
        metrics["eligible_scored"] = len(ids)
        if len(ids) == 0:
            return ChosenBatch([], "no scored candidate was eligible", metrics, scored)
    if chooser.cold and chooser.needs_embeddings:
        ids = _cold_sample(ids, round.seed)
    inputs, split = _inputs(round, config, chooser, ids, u, mean_p, metrics, texts)
    choice = chooser.choose(inputs, b=config.selection.batch_size, rng=pipeline.step_rng(round.seed, "select"))
    if split is not None:
        picks: dict[str, list[int]] = {}
        for i, arm in zip(choice.indices, choice.arms, strict=True):
            picks.setdefault(arm, []).append(int(ids[i]))
        metrics["selection"] = {**portfolio.split_to_json(split), "picks": picks}
    rows = [
        (int(ids[i]), "cold" if chooser.cold else "random" if r else "active", None if u is None else float(u[i]))
        for i, r in zip(choice.indices, choice.is_random, strict=True)
    ]
    return ChosenBatch(rows, choice.explanation, metrics, scored)


def _inputs(
    row: Round,
    config: ensemble.LoopConfig,
    chooser: strategies.Strategy,
    ids: np.ndarray,
    u: np.ndarray | None,
    mean_p: np.ndarray | None,
    metrics: dict[str, Any],
    texts: dict[int, tuple[str, str]],
) -> tuple[strategies.Inputs, portfolio.Split | None]:
    """The strategy's declared inputs over the eligible ``ids`` (the committee's mode added to
    ``metrics`` when it follows the blend), and the portfolio's split when it reads one. ``texts``: the
    items' (text, hash) read so far (_texts)."""
    sel = config.selection
    base = strategies.Inputs(
        n=len(ids), uncertainty=u, random_share=sel.random_share, oversample=sel.oversample, beta=sel.softrank_beta
    )
    if not chooser.needs_embeddings:
        return base, None
    labeled = loop_sel.labeled_items(project=row.project)
    emb = embeddings(*_texts(ids, texts))
    if chooser.cold:  # a cold round only needs where the labels lie: a sample of thousands of imported ones
        seen = _cold_sample(np.arange(len(labeled.texts)), row.seed, "cold-labeled")
        labeled_emb = embeddings([labeled.texts[i] for i in seen], [labeled.hashes[i] for i in seen])
    else:
        labeled_emb = embeddings(labeled.texts, labeled.hashes)
    committee_p = split = None
    if "committee_p" in chooser.needs and mean_p is not None:
        proxy_p = proxy_probabilities(labeled_emb, labeled.label_indices, emb, mean_p.shape[1])
        by_blend = sel.committee == "blend"
        weight = _committee_weight(row) if by_blend else None
        committee_p = committee_distribution(mean_p, proxy_p, config.k, weight=weight)
        if by_blend:  # a null weight: no evaluation has fitted one yet, so the K + 1 equal members drew
            metrics["committee"] = {"mode": "blend", "weight": weight}
        if "shares" in chooser.needs:
            split = portfolio_split(round=row, labeled=labeled, labeled_emb=labeled_emb, n_classes=mean_p.shape[1])
    shares = None if split is None else split.shares
    return replace(base, committee_p=committee_p, emb=emb, labeled_emb=labeled_emb, shares=shares), split


def selection_record(*, round: Round, batch: ChosenBatch) -> None:
    """The one writer of a selection's results: the round's predictions (upserted) and its
    low-label-mass items moved to the leads' review bucket, then in one transaction the keys of
    Round.metrics the selection sets, the batch as BatchItem rows and the round moved to labeling.
    Every write is idempotent, so a replay after a kill writes the same rows."""
    metrics = dict(batch.metrics)
    if batch.scored is not None:
        metrics["review_bucket"] = _scored_record(round, batch.scored)
    if batch.rows:
        metrics["choice"] = batch.explanation
    with transaction.atomic():
        _merge_metrics(round.id, **metrics)
        if not batch.rows:
            return
        BatchItem.objects.bulk_create(
            [
                BatchItem(round=round, item_id=item_id, source=source, rank=rank, uncertainty=u)
                for rank, (item_id, source, u) in enumerate(batch.rows)
            ],
            ignore_conflicts=True,
        )
        batch_overlap_apply(round=round)  # the overlap share of the batch needs k distinct annotators
        _to_labeling(round)


def _to_labeling(row: Round) -> None:
    """selecting → labelling, with the items that waited for people (auto-labelling's cascade, audit,
    gold: annotate/services/people_queue.py) joining the batch in the same transaction."""
    with transaction.atomic():
        people_queue.absorb(round=row)
        round_transition(row.id, S.SELECTING, S.LABELING)


def _scored_record(row: Round, scored: Scored) -> int:
    """Predictions and review moves of the scored rows; how many of the low-mass ones are in review."""
    sig = scored.signals
    predictions_upsert(
        round=row,
        item_ids=scored.ids,
        probs=scored.probs,
        mass_mean=sig.mass_mean,
        uncertainty=sig.uncertainty,
        prompt_hash=row.prompt_hash,
        adapter_set_hash=row.adapter_set_hash,
        model_version=scored.model_version,
    )
    low = scored.ids[sig.review]
    review_bucket_move(
        item_ids=low.tolist(),
        mass={int(i): float(m) for i, m in zip(scored.ids, sig.mass_mean, strict=True)},
        threshold=scored.threshold,
    )
    # Counted from the rows, not from this call's moves, so a replayed selection reports the same.
    return int(Item.objects.filter(id__in=low.tolist(), state=Item.State.REVIEW).count())


def _cold_sample(ids: np.ndarray, seed: int, step: str = "cold-sample") -> np.ndarray:
    """What a typical or diversity cold round embeds and clusters (eligible ids, or positions of the
    labeled items): all of them, or a seeded sample of TYPICAL_MAX_POINTS — a 2-million-row pool must
    not be embedded before its first round."""
    from acquisition.batch import TYPICAL_MAX_POINTS  # read at call time: tests shrink it

    if len(ids) <= TYPICAL_MAX_POINTS:
        return ids
    keep = pipeline.step_rng(seed, step).choice(len(ids), size=TYPICAL_MAX_POINTS, replace=False)
    return ids[np.sort(keep)]


def portfolio_split(
    *, round: Round, labeled: loop_sel.Labeled, labeled_emb: np.ndarray, n_classes: int
) -> portfolio.Split:
    """The portfolio's batch shares from the labels so far (acquisition.portfolio): each labelled item's
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
    """Set keys of the round's metrics, keeping the others (read afresh: another step may have
    written since the row was loaded)."""
    if not values:
        return
    metrics = dict(Round.objects.get(id=round_id).metrics or {})
    metrics.update(values)
    Round.objects.filter(id=round_id).update(metrics=metrics)


def _committee_weight(row: Round) -> float | None:
    """The blend weight of the predictor whose adapters scored this round: the latest finished round's
    evaluation (Round.metrics["blend"]["weight"], predictor/blend.py). None — the K + 1 equal members
    draw — before an evaluation has fitted one on held-out labels (the seed round's w = 1 is the
    adapters alone by default, not a fit: fewer than blend.MIN_HELDOUT held-out labels)."""
    from predictor.blend import MIN_HELDOUT

    latest = Round.objects.filter(project=row.project, status=S.DONE, number__lt=row.number).order_by("-number").first()
    record = ((latest.metrics or {}).get("blend") or {}) if latest is not None else {}
    weight, n = record.get("weight"), record.get("heldout_n")
    if not isinstance(weight, int | float) or not isinstance(n, int) or n < MIN_HELDOUT:
        return None
    return float(weight)


def _scored(row: Round, config: ensemble.LoopConfig, texts: dict[int, tuple[str, str]]) -> Scored:
    """The full-ensemble rows of the round's shards, their signals and the predictor's distributions
    (the adapters that scored them, as their round's evaluation blended them); refused (fail closed)
    unless scored with the current adapter set. ``texts``: the items' (text, hash) read so far (_texts)."""
    from scoring.cache import require_current

    require_current(row.adapter_set_hash, loop_sel.prod_set_hash(project=row.project, before_number=row.number))
    paths = [Path(p) for p in ScoreShard.objects.filter(round=row).order_by("shard").values_list("path", flat=True)]
    ids, p, mass, full = pipeline.load_shards(paths)
    ids, p, mass = ids[full], p[:, full], mass[:, full]
    previous = loop_sel.prod_adapters(project=row.project, before_number=row.number)
    source = previous[0].round if previous else None
    predictor = round_predictor(source, prompt_hash=row.prompt_hash, n_classes=p.shape[-1])
    proxy_texts, hashes = _texts(ids, texts) if predictor.predictor.needs_proxy else ([], [])  # the proxy's input
    probs = predictor.probabilities(p, proxy_texts, hashes)
    return Scored(
        ids, signals(p, mass, config.selection), config.selection.mass_threshold, probs, predictor.fingerprint
    )
