"""Where a scored round's selection step spends its time on the CPU worker, for a large label set.
CLINC150's deployed rounds spent 12.8 s selecting (session 28), of which bench/select_record_cost.py
measured ~1.5 s (the predictions upsert and the review-bucket move); this times all of it, part by part.

    .venv/bin/python bench/select_round_cost.py [--data ../shared/data/clinc150] [--labels 300]
        [--test 500] [--embedding-dir /tmp/sel-emb] [--out bench/raw/DATE/select-round-cost-COMMIT-DB.json]

The project is built as the app builds it (the train split imported as the pool, a uniform test slice
of ``--test`` items with gold labels), ``--labels`` pool items labelled over finished rounds of the
project's batch size (a cold round, then batches with their random slice), the last of them holding K
prod adapters, a fitted blend weight and its training plan; the round after it is ``selecting``, its
configuration frozen under the GPU profile, and its score shards written as the gpu workers write them
(scoring.pipeline.save_shard over the candidates' shards): random Dirichlet label distributions per
adapter around a per-item one, label mass near 0.9 with ``--low-mass`` of the items under the mass
threshold. The embedding cache is warm (every item embedded once, timed as "cold embedding" when the
cache folder was empty), as from round 3 on.

Timed: choose_batch alone (``--repeats`` times: it only reads; the first after the process's embedding
cache is dropped), then round_select itself (choose_batch + selection_record, as the worker runs it).
Per part: the functions selection calls, wrapped with a timer (inclusive seconds and calls; a part the
code no longer has is left out), and a cProfile summary of the top functions of one more choose_batch and
of the predictions upsert replayed (cProfile is off in the timed runs: it inflates the ORM several times).
SQLite in a temporary folder, or the database ``DATABASE_URL`` names (give it one of its own: the
script migrates it). Prints one markdown table; ``--out`` writes the raw JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import functools
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (module, attribute, part): what selection calls, where it looks it up. Inclusive times: a nested part
# is also inside its parent's (the indent in the name says which).
PARTS: tuple[tuple[str, str, str], ...] = (
    ("annotate.services.selection", "choose_batch", "choose_batch"),
    ("annotate.services.selection", "round_config", "  round config"),
    ("annotate.selectors.loop", "eligible_ids", "  eligible ids"),
    ("annotate.services.selection", "_scored", "  scores (_scored)"),
    ("annotate.selectors.loop", "prod_set_hash", "    adapter-set check"),
    ("scoring.pipeline", "load_shards", "    read score shards"),
    ("annotate.services.selection", "round_predictor", "    build predictor"),
    ("annotate.services.predictor.RoundPredictor", "probabilities", "    predictor probabilities"),
    ("annotate.services.predictor.RoundPredictor", "proxy_probabilities", "      plan proxy (fit + predict)"),
    ("scoring.pipeline", "signals", "    signals"),
    ("annotate.services.selection", "_inputs", "  strategy inputs (_inputs)"),
    ("annotate.selectors.loop", "labeled_items", "    labelled items"),
    ("annotate.services.selection", "proxy_probabilities", "    committee proxy (fit + predict)"),
    ("annotate.services.selection", "committee_distribution", "    committee distribution"),
    ("annotate.services.selection", "_committee_weight", "    committee blend weight"),
    ("annotate.services.selection", "portfolio_split", "    portfolio split"),
    ("acquisition.strategies.Strategy", "choose", "  strategy choose"),
    ("annotate.services.selection", "item_texts", "item texts (all callers)"),
    ("annotate.services.selection", "_texts", "item texts + order (selection)"),
    ("annotate.services.selection", "embeddings", "embeddings lookup (selection)"),
    ("annotate.services.proxy", "embeddings", "embeddings lookup (predictor proxy)"),
    ("predictor.embedding_proxy", "fit_proxy", "proxy fits (all)"),
    ("predictor.embedding_proxy.Proxy", "predict_proba", "proxy predictions (all)"),
    ("annotate.services.selection", "selection_record", "selection_record"),
    ("annotate.services.selection", "predictions_upsert", "  predictions upsert"),
    ("annotate.services.selection", "review_bucket_move", "  review bucket move"),
    ("annotate.services.selection", "_to_labeling", "  batch rows, to labeling"),
)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        )
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


class PartTimer:
    """Wraps the PARTS that exist with a timer; ``take()`` returns and resets {part: [seconds, calls]}."""

    def __init__(self) -> None:
        import importlib

        self.totals: dict[str, list[float]] = {}
        self.missing: list[str] = []
        for module, attr, part in PARTS:
            owner: Any
            try:
                owner = importlib.import_module(module)
            except ModuleNotFoundError:  # a class: module.Class
                mod, cls = module.rsplit(".", 1)
                owner = getattr(importlib.import_module(mod), cls, None)
            if owner is None or not hasattr(owner, attr):
                self.missing.append(part.strip())
                continue
            setattr(owner, attr, self._wrap(getattr(owner, attr), part))

    def _wrap(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total = self.totals.setdefault(part, [0.0, 0])
                total[0] += time.perf_counter() - started
                total[1] += 1

        return timed

    def take(self) -> dict[str, list[float]]:
        out = {part: [round(s, 3), int(n)] for part, (s, n) in self.totals.items()}
        self.totals = {}
        return out


def _build(a: argparse.Namespace, tmp: Path) -> Any:
    """The project, its finished rounds and the selecting round with its score shards; returns the latter."""
    import numpy as np
    from django.db.models import F

    from annotate.loopconfig import config_fingerprint, freeze_config, round_config
    from annotate.models import AdapterVersion, BatchItem, Item, Round, ScoreShard
    from annotate.selectors import loop as loop_sel
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create, test_set_draw
    from annotate.services.round_state import round_dir, round_score_dir, write_plan

    with (a.data / "train.csv").open() as f:
        rows = list(csv.DictReader(f))
    names = sorted({r["label"] for r in rows})
    project = project_create(
        name=f"select-round-{int(time.time())}",
        labels=[LabelInput(n, f"L{i}") for i, n in enumerate(names)],
        test_set_size=a.test,
        seed=a.seed,
    )
    pool = tmp / "pool.csv"
    with pool.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text", "label"])
        writer.writeheader()
        writer.writerows({"id": f"c{i}", "text": r["text"], "label": r["label"]} for i, r in enumerate(rows))
    import_items(project=project, path=pool)
    test_set_draw(project=project)
    Item.objects.filter(project=project, is_test=True).update(final_label=F("gold_label"))

    rng = np.random.default_rng(a.seed)
    b, k = project.batch_size, max(1, project.ensemble_k)
    pool_ids = np.array(sorted(Item.objects.filter(project=project, is_test=False).values_list("id", flat=True)))
    labelled = rng.choice(pool_ids, size=a.labels, replace=False)
    n_done = -(-a.labels // b)
    last = None
    for number in range(1, n_done + 1):
        row = Round.objects.create(project=project, number=number, status="done", seed=number, strategy="active")
        chunk = labelled[(number - 1) * b : number * b]
        random_n = int(project.random_share * len(chunk) + 0.5)
        BatchItem.objects.bulk_create(
            BatchItem(
                round=row,
                item_id=int(i),
                rank=r,
                source="cold" if number == 1 else "random" if r < random_n else "active",
            )
            for r, i in enumerate(chunk)
        )
        Item.objects.filter(id__in=chunk.tolist()).update(final_label=F("gold_label"))
        last = row
    assert last is not None
    for member in range(k):
        AdapterVersion.objects.create(
            project=project,
            round=last,
            arm="prod",
            k=member,
            path=f"adapters/a{member}",  # a fixed name: the adapter-set hash (and so every row) repeats
            content_hash=f"h{member:063d}",
        )
    labels = loop_sel.labeled_items(project=project)
    # The blend weight the last evaluation fitted: the proxy gets a share, so the predictor runs it.
    last.metrics = {"blend": {"weight": a.blend_weight, "heldout_n": 200}}
    last.save(update_fields=["metrics"])
    write_plan(last, {"prod:0": [[i, y] for i, y in zip(labels.item_ids, labels.label_indices, strict=True)]})
    round_dir(last).mkdir(parents=True, exist_ok=True)

    frozen = freeze_config(project)
    row = Round.objects.create(
        project=project,
        number=n_done + 1,
        status="selecting",
        seed=a.seed,
        strategy="active",  # the default strategy (annotate.services.rounds.round_request_start)
        prompt_hash="p" * 16,
        adapter_set_hash=loop_sel.prod_set_hash(project=project, before_number=n_done + 1),
        config=frozen,
        config_fingerprint=config_fingerprint(frozen),
    )
    config = round_config(row)
    _write_shards(row, config, len(names), loop_sel.eligible_ids(project=project), a, rng)
    assert ScoreShard.objects.filter(round=row).exists() and round_score_dir(row).is_dir()
    return row


def _write_shards(row: Any, config: Any, n_classes: int, candidates: Any, a: argparse.Namespace, rng: Any) -> None:
    """The candidates' score shards as the gpu workers write them (annotate/services/scoring.py)."""
    import numpy as np

    from annotate.models import ScoreShard
    from annotate.services.round_state import round_score_dir
    from scoring import pipeline

    directory = round_score_dir(row)
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "candidates.npy", candidates)
    n_shards = pipeline.n_shards_for(len(candidates), config.rescoring.n_shards)
    shard = pipeline.shard_of(candidates, n_shards)
    k = config.k
    for s in range(n_shards):
        ids = candidates[shard == s]
        n = len(ids)
        centre = rng.dirichlet(np.full(n_classes, 0.1), size=n)  # each item's own likely labels
        p = np.stack([np.vstack([rng.dirichlet(50 * c + 0.01) for c in centre]) for _ in range(k)]).astype(np.float32)
        low = rng.uniform(0, 1, n) < a.low_mass
        mass = np.where(low, rng.uniform(0.0, 0.04, (k, n)), np.clip(rng.normal(0.9, 0.04, (k, n)), 0.5, 1.0))
        scored = pipeline.Scored(p, mass.astype(np.float32), np.ones(n, bool))
        path = directory / f"shard_{s:04d}.npz"
        pipeline.save_shard(path, ids, scored)
        ScoreShard.objects.create(round=row, shard=s, n_shards=n_shards, status="done", n_items=n, path=str(path))


def _warm_embeddings(project: Any) -> float | None:
    """Every item of the project embedded once (what rounds 1–2 did); seconds if it encoded anything."""
    from annotate.models import Item
    from annotate.services import proxy

    rows = list(Item.objects.filter(project=project).order_by("id").values_list("text", "text_hash"))
    started = time.perf_counter()
    proxy.embeddings([t for t, _ in rows], [h for _, h in rows])
    encoded = proxy._EMBEDDINGS["cache"].encoded
    return round(time.perf_counter() - started, 2) if encoded else None


def _profile_top(profile: cProfile.Profile, n: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = file.replace(str(ROOT) + "/", "")
        rows.append({"function": f"{where}:{line}({name})", "calls": calls, "tottime": tottime, "cumtime": cumtime})
    rows.sort(key=lambda r: -r["cumtime"])
    top_cum = rows[:n]
    top_own = sorted(rows, key=lambda r: -r["tottime"])[:n]
    rnd = lambda rs: [{**r, "tottime": round(r["tottime"], 3), "cumtime": round(r["cumtime"], 3)} for r in rs]  # noqa: E731
    return [{"by": "cumulative", "rows": rnd(top_cum)}, {"by": "own time", "rows": rnd(top_own)}]


def _predictions_digest(row: Any) -> str:
    """sha256 of the round's Prediction rows as values (item, label, probabilities, mass, uncertainty,
    model version, hashes): equal digests, the same rows written."""
    import hashlib

    from annotate.models import Prediction

    fields = ("item_id", "label_id", "probs", "mass", "uncertainty", "model_version", "prompt_hash", "adapter_set_hash")
    rows = Prediction.objects.filter(round=row).order_by("item_id").values_list(*fields)
    return hashlib.sha256(json.dumps([list(r) for r in rows]).encode()).hexdigest()


def _profiles(selection: Any, row: Any, n: int) -> dict[str, Any]:
    """cProfile (off during the timed runs: it inflates the ORM's deep call chains several times) of one
    more choose_batch, and of the record's writes replayed (the upsert then updates the same rows)."""
    profile = cProfile.Profile()
    profile.enable()
    batch = selection.choose_batch(round=row)
    profile.disable()
    out = {"choose_batch": _profile_top(profile, n)}
    scored = batch.scored
    profile = cProfile.Profile()
    profile.enable()
    selection.predictions_upsert(
        round=row,
        item_ids=scored.ids,
        probs=scored.probs,
        mass_mean=scored.signals.mass_mean,
        uncertainty=scored.signals.uncertainty,
        prompt_hash=row.prompt_hash,
        adapter_set_hash=row.adapter_set_hash,
        model_version=scored.model_version,
    )
    profile.disable()
    out["predictions_upsert_replay"] = _profile_top(profile, n)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "clinc150")
    p.add_argument("--labels", type=int, default=300, help="labelled pool items before the round (past the cold start)")
    p.add_argument("--test", type=int, default=500, help="the test slice (the project default)")
    p.add_argument("--low-mass", type=float, default=0.05, help="share of the candidates under the mass threshold")
    p.add_argument("--blend-weight", type=float, default=0.7, help="the last evaluation's fitted blend weight")
    p.add_argument("--repeats", type=int, default=2, help="choose_batch calls before round_select")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--embedding-dir", type=Path, default=None, help="keep the embedding cache here between runs")
    p.add_argument("--profile-rows", type=int, default=25)
    p.add_argument("--out", type=Path, default=None, help="raw JSON")
    a = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="select-round-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["VAR_DIR"] = str(tmp / "var")
    os.environ.setdefault("DEBUG", "1")
    os.environ["ALANN_LOOP_OPTIONS"] = json.dumps({"profile": "gpu"})  # the deployed round's configuration
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/db.sqlite3"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    if a.embedding_dir is not None:
        settings.EMBEDDING_DIR = a.embedding_dir
    from annotate.models import BatchItem, Prediction, Round
    from annotate.services import proxy, selection

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    row = _build(a, tmp)
    setup_seconds = round(time.perf_counter() - started, 2)
    cold_embedding = _warm_embeddings(row.project)
    timer = PartTimer()

    runs: dict[str, dict[str, Any]] = {}
    batches = []
    for rep in range(a.repeats):
        if rep == 0:
            proxy._EMBEDDINGS.clear()  # a fresh worker process: the cache's index is read from disk
        getattr(proxy, "_FITTED", {}).clear()  # a new round's labels: no proxy fitted on them yet
        t = time.perf_counter()
        batch = selection.choose_batch(round=Round.objects.get(id=row.id))
        runs[f"choose_batch {rep + 1}"] = {"total": round(time.perf_counter() - t, 3), "parts": timer.take()}
        batches.append(batch.rows)
    getattr(proxy, "_FITTED", {}).clear()
    t = time.perf_counter()
    selection.round_select(round_id=row.id)
    runs["round_select"] = {"total": round(time.perf_counter() - t, 3), "parts": timer.take()}
    row.refresh_from_db()
    written = list(BatchItem.objects.filter(round=row).order_by("rank").values_list("item_id", "source"))
    assert row.status == "labeling", (row.status, row.failure_reason)
    assert all(b == batches[0] for b in batches) and [i for i, _ in written] == [i for i, _, _ in batches[0]]
    profiles = _profiles(selection, row, a.profile_rows)
    timer.take()

    n_pred = Prediction.objects.filter(round=row).count()
    facts = {
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "database": connection.vendor,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "round": {
            "number": row.number,
            "strategy": row.strategy,
            "profile": row.config.get("profile"),
            "k": row.config["loop"]["k"],
            "labels": len(selection.loop_sel.labeled_items(project=row.project).item_ids),
            "n_classes": len(selection.loop_sel.label_names(project=row.project)),
            "predictions": n_pred,
            "predictions_digest": _predictions_digest(row),
            "review_bucket": row.metrics.get("review_bucket"),
            "eligible_scored": row.metrics.get("eligible_scored"),
            "batch": [i for i, _ in written],
            "choice": row.metrics.get("choice"),
        },
        "setup_seconds": setup_seconds,
        "cold_embedding_seconds": cold_embedding,
        "missing_parts": timer.missing,
        "runs": runs,
        "cprofile": profiles,
    }
    _print_table(facts)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(facts, indent=1) + "\n")
    return 0


def _print_table(facts: dict[str, Any]) -> None:
    runs = facts["runs"]
    r = facts["round"]
    print(
        f"| {facts['commit']} on {facts['database']}: round {r['number']}, {r['predictions']} scored x"
        f" {r['n_classes']} labels, K={r['k']}, {r['labels']} labels | " + " | ".join(runs) + " |"
    )
    print("|---|" + "---:|" * len(runs))
    print("| **total** | " + " | ".join(f"**{v['total']}**" for v in runs.values()) + " |")
    for _, _, part in PARTS:
        if part.strip() in facts["missing_parts"]:
            continue
        cells = [v["parts"].get(part) for v in runs.values()]
        if not any(cells):
            continue
        name = "&nbsp;" * (len(part) - len(part.lstrip())) + part.strip()
        print(f"| {name} | " + " | ".join("–" if c is None else f"{c[0]}" for c in cells) + " |")
    if facts["cold_embedding_seconds"] is not None:
        print(
            f"| (cold embedding of every item, before) | {facts['cold_embedding_seconds']} |" + " |" * (len(runs) - 1)
        )


if __name__ == "__main__":
    raise SystemExit(main())
