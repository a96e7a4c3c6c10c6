"""The plan step of a round (pending → scoring, or pending → selecting): cold start or not, and for a
round that reads scores (with something left to pick, and not a final-model round), its candidates
(written once to candidates.npy) and one ScoreShard per shard.

Shards split the round's candidates by ``sha1(item id) % n_shards`` (training.pipeline.shard_of), so any
number of gpu workers share a pool without coordination.
"""

from __future__ import annotations

import numpy as np

from acquisition.strategies import strategy
from annotate.loopconfig import round_config
from annotate.models import Prediction, Round, ScoreShard, WorkClaim
from annotate.selectors import loop as loop_sel
from annotate.services import jobs
from annotate.services.round_state import S, round_score_dir, round_transition
from scoring import pipeline
from scoring.files import atomic_save_npy


def is_cold(row: Round) -> bool:
    """Cold start: the first ``cold_start_batches`` rounds, or any round before an adapter exists."""
    if row.number <= row.project.cold_start_batches:
        return True
    return not loop_sel.prod_adapters(project=row.project, before_number=row.number)


def cold_mode(row: Round) -> str:
    """How a cold round of ``row``'s requested strategy picks: a project run as ``random`` draws its
    seed set uniformly too (it is the baseline every other strategy is measured against); every other
    strategy uses the project's cold mode, or the deployment's (loop option ``cold_mode``, "typical"
    by default) when the project leaves it empty."""
    if row.strategy == "random":
        return "random"
    return row.project.cold_mode or round_config(row).selection.cold_mode


def round_plan(*, round_id: int) -> Round:
    """pending → selecting (cold start, or a strategy that reads no scores) or pending → scoring
    (candidates and shards planned). Held as the round's ``plan`` unit; a replay changes nothing."""
    return jobs.run_round_step(round_id, status=S.PENDING, kind=WorkClaim.Kind.PLAN, what="planning", step=_plan)


def _plan(row: Round) -> None:
    if row.final_requested or not loop_sel.eligible_pool(project=row.project).exists():
        # nothing to score: selection ends the pool (or fails, saying why) or trains the final model
        round_transition(row.id, S.PENDING, S.SELECTING)
        return
    cold = is_cold(row)
    if cold:
        metrics = {**(row.metrics or {}), "cold_mode": cold_mode(row)}
        round_transition(row.id, S.PENDING, S.SELECTING, strategy="cold-start", metrics=metrics)
        return
    if not strategy(row.strategy).needs_scores:
        round_transition(row.id, S.PENDING, S.SELECTING)
        return
    scoring_plan(round=row)
    round_transition(row.id, S.PENDING, S.SCORING)


def _last_scored(row: Round) -> tuple[np.ndarray, np.ndarray]:
    """Item ids and uncertainty of the previous round's predictions (carried into the candidates)."""
    previous = Round.objects.filter(project=row.project, number__lt=row.number).order_by("-number").first()
    if previous is None:
        return np.zeros(0, np.int64), np.zeros(0)
    rows = list(
        Prediction.objects.filter(round=previous, uncertainty__isnull=False, item__is_test=False).values_list(
            "item_id", "uncertainty"
        )
    )
    return np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], float)


def scoring_plan(*, round: Round) -> list[int]:
    """Candidates (written once to candidates.npy) and one ScoreShard row per shard. Idempotent."""
    from scoring.engines import adapter_set_hash
    from scoring.rescoring import choose_candidates

    config = round_config(round)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    refs = loop_sel.adapter_refs(loop_sel.prod_adapters(project=round.project, before_number=round.number))
    path = round_score_dir(round) / "candidates.npy"
    if path.is_file():
        candidates = np.load(path)
    else:
        last_ids, last_u = _last_scored(round)
        candidates = choose_candidates(
            loop_sel.eligible_ids(project=round.project),
            sample=config.rescoring.candidate_sample,
            last_ids=last_ids,
            last_uncertainty=last_u,
            carry_top_share=config.rescoring.carry_top_share,
            rng=pipeline.step_rng(round.seed, "candidates"),
        )
        atomic_save_npy(path, candidates)
    n_shards = pipeline.n_shards_for(len(candidates), config.rescoring.n_shards)
    counts = np.bincount(pipeline.shard_of(candidates, n_shards), minlength=n_shards)
    for shard in range(n_shards):
        ScoreShard.objects.get_or_create(
            round=round, shard=shard, defaults={"n_shards": n_shards, "n_items": int(counts[shard])}
        )
    Round.objects.filter(id=round.id).update(
        items_to_score=len(candidates), prompt_hash=renderer.prompt_hash, adapter_set_hash=adapter_set_hash(refs)
    )
    return list(range(n_shards))
