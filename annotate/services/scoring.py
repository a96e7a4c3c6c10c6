"""The scoring step of a round: score one shard of its candidates, claimed by one live worker.

A shard (ScoreShard, planned by annotate/services/planning.py) is claimed (annotate/services/jobs.py:
pending/queued/failed → running, or running whose worker is dead → running by me), scored chunk by
chunk through the score cache (a killed worker loses one chunk), written to
``SCORE_DIR/round_<id>-<key>/shard_<i>.npz`` via a temp file and a rename, then marked done. A done
shard is never rescored. ``scoring_finish`` (called by the round flow once no shard is left undone)
moves the round to selecting, once.

The same three moves — claim a shard, score it through ``training.pipeline.score_items``, publish the
file and mark it done — serve any pool-scoring job (see docs/INTERFACES.md, "claims").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import F, Sum

from annotate import steppoints
from annotate.loopconfig import worker_config
from annotate.models import Item, Round, ScoreShard
from annotate.selectors import loop as loop_sel
from annotate.services import jobs
from annotate.services.round_state import S, add_cost, round_score_dir, round_transition
from annotate.services.workers import worker_id
from scoring import pipeline
from scoring.device import device_kind
from training import ensemble

MAX_SHARD_ATTEMPTS = jobs.MAX_ATTEMPTS


def engine_warm(*, kind: str) -> dict[str, Any]:
    """Start this process's ``kind`` engine for the default model with its own loop options: the engine
    (scoring.engines.get_engine's key) that a round of a project on the default model asks for where
    every process of the deployment has the same ALANN_LOOP_OPTIONS, but for the worker's own GPU share
    (worker_config). A project on another model or options starts its own engine when it first runs."""
    import os
    import time

    from annotate.loopconfig import loop_options
    from scoring.engines import get_engine

    began = time.monotonic()
    get_engine(kind, str(settings.LLM_DIR), **dict(loop_options().engine_options))  # type: ignore[arg-type]
    return {"kind": kind, "pid": os.getpid(), "seconds": round(time.monotonic() - began, 2)}


def score_cache() -> Any:
    from scoring.cache import ScoreCache

    return ScoreCache(Path(settings.SCORE_DIR) / "cache")


def shard_rows(round_id: int, shard: int) -> Any:
    return ScoreShard.objects.filter(round_id=round_id, shard=shard, round__status=S.SCORING)


def shards_to_run(*, round: Round) -> list[int]:
    """Shards that need a worker: pending, queued, failed (attempts left), or running on a dead worker."""
    rows = jobs.needs_worker(ScoreShard.objects.filter(round=round))
    return list(rows.order_by("shard").values_list("shard", flat=True))


def score_shard_run(*, round_id: int, shard: int) -> ScoreShard:
    """Score one shard (task body of ``annotate.gpu.score_shard``). Idempotent: a done shard or one a
    live worker holds is left alone."""
    rows = shard_rows(round_id, shard)
    jobs.run_claimed(
        rows, round_id=round_id, what=f"shard {shard}", step=lambda: _score(rows.select_related("round__project")[0])
    )
    return ScoreShard.objects.get(round_id=round_id, shard=shard)


def _score(shard: ScoreShard) -> None:
    from scoring.cache import require_current
    from scoring.engines import adapter_set_hash

    row = shard.round
    config = worker_config(row)
    candidates = np.load(round_score_dir(row) / "candidates.npy")
    ids = candidates[pipeline.shard_of(candidates, shard.n_shards) == shard.shard]
    items = dict(Item.objects.filter(id__in=ids.tolist()).values_list("id", "text"))
    hashes = dict(Item.objects.filter(id__in=ids.tolist()).values_list("id", "text_hash"))
    refs = loop_sel.adapter_refs(loop_sel.prod_adapters(project=row.project, before_number=row.number))
    require_current(adapter_set_hash(refs), row.adapter_set_hash)
    renderer = pipeline.make_renderer(config.model_dir, config.prompt, config.max_context)
    require_current(renderer.prompt_hash, row.prompt_hash)

    def progress(n: int) -> None:
        Round.objects.filter(id=row.id).update(items_scored=F("items_scored") + n)
        steppoints.reached("score", row.number)

    scored = pipeline.score_items(
        ensemble.make_engine(config),
        renderer,
        [items[int(i)] for i in ids],
        [hashes[int(i)] for i in ids],
        refs,
        cache=score_cache(),
        first_pass_share=config.rescoring.first_pass_share,
        kind=config.selection.uncertainty,
        rng=pipeline.step_rng(row.seed, f"second-stage-{shard.shard}"),
        progress=progress,
    )
    path = round_score_dir(row) / f"shard_{shard.shard:04d}.npz"
    pipeline.save_shard(path, ids, scored)
    jobs.finish(
        ScoreShard.objects.filter(id=shard.id),
        me=worker_id(),
        path=str(path),
        n_items=len(ids),
        seconds=F("seconds") + scored.seconds,
        tokens=F("tokens") + scored.tokens,
    )


def scoring_done(*, round: Round) -> bool:
    return not ScoreShard.objects.filter(round=round).exclude(status=ScoreShard.Status.DONE).exists()


def scoring_finish(*, round_id: int) -> bool:
    """scoring → selecting once no shard is left undone, with the shards' totals in the round's cost.
    True for the one caller that moved it."""
    shards = ScoreShard.objects.filter(round_id=round_id)
    if shards.exclude(status=ScoreShard.Status.DONE).exists():
        return False
    totals = shards.aggregate(items=Sum("n_items"), seconds=Sum("seconds"), tokens=Sum("tokens"))
    moved = round_transition(round_id, S.SCORING, S.SELECTING, items_scored=totals["items"] or 0)
    if moved:
        add_cost(
            round_id=round_id,
            step="scoring",
            seconds=float(totals["seconds"] or 0.0),
            device=device_kind(),
            items=int(totals["items"] or 0),
            tokens=int(totals["tokens"] or 0),
        )
    return moved
