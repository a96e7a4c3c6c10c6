"""Pool scoring for a round: candidates, shards (one Celery task each), predictions, the review bucket,
and the batch choice that reads the scores.

Shards split the round's candidates by ``sha1(item id) % n_shards``, so any number of gpu workers
share a pool without coordination. A shard is claimed with a conditional UPDATE (pending/failed →
running, or running whose worker is dead → running by me), scored chunk by chunk through the score
cache (a killed worker loses one chunk), written to ``SCORE_DIR/round_<id>/shard_<i>.npz`` via a temp
file and a rename, then marked done. A done shard is never rescored. After each shard, a DB-side
check "every shard done" moves the round to selecting; the transition guard makes that happen once.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum

from annotate.loopconfig import loop_config
from annotate.models import Item, Prediction, Round, ScoreShard
from annotate.selectors import loop as loop_sel
from annotate.services.rounds import S, add_cost, device_name, dispatch, round_fail, round_transition
from training import loop

MAX_SHARD_ATTEMPTS = 3  # a shard failing this often fails the round instead of looping
PREDICTION_CHUNK = 2000


def round_score_dir(row: Round) -> Path:
    """The round's shard folder. Named by id and creation time: a database that reuses ids (SQLite
    after a rollback, a restored backup) must never find another round's finished shards there."""
    return Path(settings.SCORE_DIR) / f"round_{row.id}-{run_key(row)}"


def run_key(row: Round) -> str:
    return f"{int(row.created_at.timestamp() * 1_000_000):x}"


def score_cache() -> Any:
    from scoring.cache import ScoreCache

    return ScoreCache(Path(settings.SCORE_DIR) / "cache")


# -- planning ------------------------------------------------------------------------------------


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
    from scoring.rescoring import choose_candidates

    config = loop_config(round.project)
    renderer = loop.make_renderer(config.model_dir, config.prompt, config.max_context)
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
            rng=loop.step_rng(round.seed, "candidates"),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".candidates.{os.getpid()}.tmp.npy")
        np.save(tmp, candidates)
        os.replace(tmp, path)
    n_shards = loop.n_shards_for(len(candidates), config.rescoring.n_shards)
    counts = np.bincount(loop.shard_of(candidates, n_shards), minlength=n_shards)
    for shard in range(n_shards):
        ScoreShard.objects.get_or_create(
            round=round, shard=shard, defaults={"n_shards": n_shards, "n_items": int(counts[shard])}
        )
    from scoring.engines import adapter_set_hash

    Round.objects.filter(id=round.id).update(
        items_to_score=len(candidates), prompt_hash=renderer.prompt_hash, adapter_set_hash=adapter_set_hash(refs)
    )
    return list(range(n_shards))


# -- shards --------------------------------------------------------------------------------------


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_alive(worker: str) -> bool:
    """Whether the process that claimed a shard still runs. Same host: the pid is checked; another
    host: its Celery node must answer a ping within 2 s."""
    host, _, pid = worker.rpartition(":")
    if not host or not pid.isdigit():
        return False
    if host == socket.gethostname():
        if int(pid) == os.getpid():
            return False  # a retry in this very process: the earlier attempt is over
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _is_zombie(int(pid))
    from config.celery import app

    replies = app.control.ping(timeout=2.0) or []
    return any(host in name for reply in replies for name in reply)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def shards_to_run(*, round: Round) -> list[int]:
    """Shards that need a worker: pending, failed (attempts left), or running on a dead worker."""
    out = []
    for shard in ScoreShard.objects.filter(round=round).exclude(status=ScoreShard.Status.DONE).order_by("shard"):
        if shard.status == ScoreShard.Status.RUNNING and worker_alive(shard.worker):
            continue
        out.append(shard.shard)
    return out


def _claim(round_id: int, shard: int, me: str) -> bool:
    rows = ScoreShard.objects.filter(round_id=round_id, shard=shard, round__status=S.SCORING)
    if rows.filter(status__in=[ScoreShard.Status.PENDING, ScoreShard.Status.FAILED]).update(
        status=ScoreShard.Status.RUNNING, worker=me, attempts=F("attempts") + 1
    ):
        return True
    current = rows.filter(status=ScoreShard.Status.RUNNING).values_list("worker", flat=True).first()
    if current is None or worker_alive(current):
        return False
    return bool(
        rows.filter(status=ScoreShard.Status.RUNNING, worker=current).update(worker=me, attempts=F("attempts") + 1)
    )


def score_shard_run(*, round_id: int, shard: int) -> ScoreShard:
    """Score one shard (task body of ``annotate.gpu.score_shard``). Idempotent: a done shard or one a
    live worker holds is left alone; then the round moves on if every shard is done."""
    me = worker_id()
    if _claim(round_id, shard, me):
        row = ScoreShard.objects.select_related("round__project").get(round_id=round_id, shard=shard)
        if row.attempts > MAX_SHARD_ATTEMPTS:
            ScoreShard.objects.filter(id=row.id).update(status=ScoreShard.Status.FAILED)
            round_fail(round_id=round_id, reason=f"shard {shard} failed {MAX_SHARD_ATTEMPTS} times: {row.error}")
            return row
        try:
            _score(row)
        except Exception as exc:
            ScoreShard.objects.filter(id=row.id, worker=me).update(
                status=ScoreShard.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000]
            )
            raise
    maybe_finish_scoring(round_id=round_id)
    return ScoreShard.objects.get(round_id=round_id, shard=shard)


def _score(shard: ScoreShard) -> None:
    row = shard.round
    config = loop_config(row.project)
    candidates = np.load(round_score_dir(row) / "candidates.npy")
    ids = candidates[loop.shard_of(candidates, shard.n_shards) == shard.shard]
    items = dict(Item.objects.filter(id__in=ids.tolist()).values_list("id", "text"))
    hashes = dict(Item.objects.filter(id__in=ids.tolist()).values_list("id", "text_hash"))
    refs = loop_sel.adapter_refs(loop_sel.prod_adapters(project=row.project, before_number=row.number))
    from scoring.cache import require_current
    from scoring.engines import adapter_set_hash

    require_current(adapter_set_hash(refs), row.adapter_set_hash)
    renderer = loop.make_renderer(config.model_dir, config.prompt, config.max_context)
    require_current(renderer.prompt_hash, row.prompt_hash)

    def progress(n: int) -> None:
        Round.objects.filter(id=row.id).update(items_scored=F("items_scored") + n)

    scored = loop.score_items(
        loop.make_engine(config),
        renderer,
        [items[int(i)] for i in ids],
        [hashes[int(i)] for i in ids],
        refs,
        cache=score_cache(),
        first_pass_share=config.rescoring.first_pass_share,
        kind=config.selection.uncertainty,
        rng=loop.step_rng(row.seed, f"second-stage-{shard.shard}"),
        progress=progress,
    )
    path = round_score_dir(row) / f"shard_{shard.shard:04d}.npz"
    loop.save_shard(path, ids, scored)
    ScoreShard.objects.filter(id=shard.id, status=ScoreShard.Status.RUNNING).update(
        status=ScoreShard.Status.DONE,
        path=str(path),
        n_items=len(ids),
        seconds=F("seconds") + scored.seconds,
        tokens=F("tokens") + scored.tokens,
        error="",
    )


def maybe_finish_scoring(*, round_id: int) -> bool:
    """scoring → selecting when no shard is left undone (DB-side check; the guard makes it once)."""
    from annotate import tasks

    shards = ScoreShard.objects.filter(round_id=round_id)
    if shards.exclude(status=ScoreShard.Status.DONE).exists():
        return False
    totals = shards.aggregate(items=Sum("n_items"), seconds=Sum("seconds"), tokens=Sum("tokens"))
    with transaction.atomic():
        moved = round_transition(round_id, S.SCORING, S.SELECTING, items_scored=totals["items"] or 0)
        if moved:
            dispatch(tasks.round_select, round_id)
    if moved:
        add_cost(
            round_id=round_id,
            step="scoring",
            seconds=float(totals["seconds"] or 0.0),
            device=device_name(),
            items=int(totals["items"] or 0),
            tokens=int(totals["tokens"] or 0),
        )
    return moved


# -- predictions, review bucket, the batch ---------------------------------------------------------


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


_EMBEDDINGS: dict[str, Any] = {}


def embeddings(texts: list[str], hashes: list[str]) -> np.ndarray:
    from scoring.bundled import encoder_path
    from scoring.embeddings import EmbeddingCache

    if "cache" not in _EMBEDDINGS:
        _EMBEDDINGS["cache"] = EmbeddingCache(settings.EMBEDDING_DIR, encoder_path(settings.ENCODER_DIR or None))
    if not texts:
        return np.zeros((0, _EMBEDDINGS["cache"].dim), np.float32)
    return np.asarray(_EMBEDDINGS["cache"].embed(texts, hashes))


def _texts(ids: np.ndarray) -> tuple[list[str], list[str]]:
    rows = dict(
        (i, (t, h)) for i, t, h in Item.objects.filter(id__in=ids.tolist()).values_list("id", "text", "text_hash")
    )
    return [rows[int(i)][0] for i in ids], [rows[int(i)][1] for i in ids]


def choose_batch(*, round: Round) -> list[tuple[int, str, float | None]]:
    """The round's batch as (item id, source, uncertainty), in rank order, picked by the round's
    strategy. Cold rounds: random or diversity over the eligible pool. Strategies that read scores
    (NEEDS_SCORES): the round's scores (refused unless made with the current adapter set and prompt),
    predictions upserted, low mass → review, then the selection over the eligible scored rows. The
    others (random, kcenter-only): the whole eligible pool, so last round's most uncertain items
    carried into the candidates cannot bias them."""
    from scoring.selection import NEEDS_EMBEDDINGS, NEEDS_LABELS, NEEDS_SCORES, committee_distribution

    config = loop_config(round.project)
    cold = round.strategy == "cold-start"
    ids, u, mean_p = loop_sel.eligible_ids(project=round.project), None, None
    if not cold and round.strategy in NEEDS_SCORES:
        ids, u, mean_p = _eligible_scored(round, config, ids)
    if len(ids) == 0:
        return []
    emb = labeled_emb = committee_p = None
    needs_embeddings = config.selection.cold_mode != "random" if cold else round.strategy in NEEDS_EMBEDDINGS
    if needs_embeddings:
        labeled = loop_sel.labeled_items(project=round.project)
        emb, labeled_emb = embeddings(*_texts(ids)), embeddings(labeled.texts, labeled.hashes)
        if not cold and round.strategy in NEEDS_LABELS and mean_p is not None:
            proxy_p = _proxy_probabilities(labeled_emb, labeled.label_indices, emb, mean_p.shape[1])
            committee_p = committee_distribution(mean_p, proxy_p, config.k)
    sel = loop.select(
        cold=cold,
        strategy=round.strategy,
        n_eligible=len(ids),
        config=config.selection,
        rng=loop.step_rng(round.seed, "select"),
        uncertainty=u,
        emb=emb,
        labeled_emb=labeled_emb,
        committee_p=committee_p,
    )
    return [
        (int(ids[i]), "cold" if cold else "random" if r else "active", None if u is None else float(u[i]))
        for i, r in zip(sel.indices, sel.is_random, strict=True)
    ]


def _proxy_probabilities(labeled_emb: np.ndarray, labels: list[int], emb: np.ndarray, n_classes: int) -> np.ndarray:
    """The embedding proxy (logistic regression on the labels so far) over the eligible rows."""
    from scoring.proxy import fit_proxy

    if not labels:
        return np.full((len(emb), n_classes), 1.0 / n_classes)
    return fit_proxy(labeled_emb, np.asarray(labels), n_classes).predict_proba(emb)


def _eligible_scored(
    row: Round, config: loop.LoopConfig, eligible: np.ndarray
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


def _scored_candidates(row: Round, config: loop.LoopConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Full-ensemble rows of the round's shards → predictions, review bucket; (ids, uncertainty,
    mean distribution, moved)."""
    from scoring.cache import require_current

    require_current(row.adapter_set_hash, loop_sel.prod_set_hash(project=row.project, before_number=row.number))
    paths = [Path(p) for p in ScoreShard.objects.filter(round=row).order_by("shard").values_list("path", flat=True)]
    ids, p, mass, full = loop.load_shards(paths)
    ids, p, mass = ids[full], p[:, full], mass[:, full]
    sig = loop.signals(p, mass, config.selection)
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
