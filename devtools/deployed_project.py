"""The Django side of a deployed run (bench/deployed_loop.py): functions that ``Deployment.call`` runs
inside the deployment's environment and database, each returning JSON. They set up what a team does
before its first round (accounts, an API token, a project with the app's defaults) and read back
what the rounds left (step timings, shard workers, adapter directories).

The project mirrors the in-process simulation's (annotate/simulation/harness.py, ``job_project``):
the data set's train split is the pool, its test split the fixed test set whose gold labels count as
a lead's final labels, and the label codes are ``scoring.labels.suggest_codes``'s. The items arrive
through the web's import page (the caller uploads them); only the test set's marking is done here."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

# What a new project gets from the setup page, but for two things a script must say: the engine (the
# setup page's default is hf), and that training starts when the batch is done (auto_retrain_share 1.0:
# an ML user pressing "Retrain" as soon as the batch is labelled).
SCRIPTED_KNOBS: dict[str, Any] = {"auto_retrain_share": 1.0}


def seed_accounts(*, annotators: list[str], token: str, password: str) -> dict[str, int]:
    """ML staff ``ml`` with an API token, a lead ``lead`` and the annotators, all with ``password``."""
    from django.contrib.auth.models import Group, User

    from annotate.models import ApiToken

    users = {}
    for name, role in (("ml", "ml"), ("lead", "lead"), *((a, "annotator") for a in annotators)):
        user, _ = User.objects.get_or_create(username=name)
        user.set_password(password)
        user.save()
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        users[name] = user.pk
    ApiToken.objects.get_or_create(
        user_id=users["ml"], digest=hashlib.sha256(token.encode()).hexdigest(), defaults={"name": "deployed-run"}
    )
    return users


def create_project(*, name: str, data_dir: str, model_dir: str, engine: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """A project with the app's defaults (Project's field defaults), the data set's labels with codes
    for ``model_dir``'s tokenizer, ``engine``, and ``knobs`` over them; its defaults as resolved."""
    from annotate.models import Project
    from annotate.services.projects import project_create
    from annotate.simulation.harness import _label_inputs, read_rows

    names = sorted({label for _, label in read_rows(Path(data_dir) / "train.csv")})
    project = project_create(
        name=name,
        labels=_label_inputs(model_dir, names),
        model_dir=model_dir,
        engine=engine,
        **{**SCRIPTED_KNOBS, **knobs},
    )
    fields = ["engine", "seed", "batch_size", "ensemble_k", "cold_start_batches", "scratch_every", "candidate_sample"]
    fields += ["random_share", "mass_threshold", "test_set_size", "auto_retrain_share", "uncertainty"]
    row = Project.objects.get(pk=project.pk)
    return {"project": project.pk, "labels": len(names), "knobs": {f: getattr(row, f) for f in fields}}


def mark_test_set(*, project: int, prefix: str = "test-") -> int:
    """The imported test split (ids ``test-…``) becomes the fixed test set, its gold labels final, as in
    the simulation, and the project's test-set size says so; the number marked. The project is created
    with a test-set size of 0, so that the import draws no test set from the pool (imports.py)."""
    from django.db import transaction
    from django.db.models import F
    from django.utils import timezone

    from annotate.models import Item, Project

    with transaction.atomic():
        if Item.objects.filter(project_id=project, is_test=True).exclude(external_id__startswith=prefix).exists():
            raise RuntimeError("the import drew a test set from the pool: create the project with test_set_size 0")
        marked = Item.objects.filter(project_id=project, external_id__startswith=prefix).update(
            is_test=True, final_label=F("gold_label"), finalized_at=timezone.now()
        )
        Project.objects.filter(pk=project).update(test_set_size=marked)
    return marked


def import_status(*, project: int) -> list[dict[str, Any]]:
    from annotate.models import ImportJob

    rows = ImportJob.objects.filter(project_id=project).order_by("id")
    return [{"id": j.id, "status": j.status, "rows": j.rows_created, "error": j.error} for j in rows]


def round_facts(*, project: int) -> list[dict[str, Any]]:
    """Per round: status, fingerprint, timestamps, the processes that scored its shards (and when),
    and the adapter directories it trained."""
    from annotate.models import AdapterVersion, Round, ScoreShard

    facts = []
    for row in Round.objects.filter(project_id=project).order_by("number"):
        shards = ScoreShard.objects.filter(round=row).order_by("shard")
        facts.append(
            {
                "number": row.number,
                "status": row.status,
                "failure": row.failure_reason,
                "fingerprint": row.config_fingerprint,
                "created_at": row.created_at.timestamp(),
                "finished_at": row.finished_at.timestamp() if row.finished_at else None,
                "shards": [
                    {"shard": s.shard, "items": s.n_items, "seconds": s.seconds, "worker": s.worker} for s in shards
                ],
                "adapters": [
                    {"arm": a.arm, "k": a.k, "path": a.path}
                    for a in AdapterVersion.objects.filter(round=row).order_by("arm", "k")
                ],
            }
        )
    return facts


# -- the scoring throughput of the deployed shape (bench/deployed_loop.py --throughput) -------------------


def throughput_project(
    *, source: int, name: str, texts_csv: str, model_dir: str, engine: str, knobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A project for the throughput runs: ``source``'s label set (so ``source``'s prompt), every row of
    ``texts_csv`` (columns id,text, and label: kept as the item's hidden gold label) imported by the
    import service, no test set, no cold start, and ``source``'s latest production ensemble as its round
    1 (a finished round holding copies of those adapters' rows: the same directories, the same content
    hashes). Each later round it is asked for scores the whole pool (candidate_sample 0, or what
    ``set_project`` sets); ``knobs`` over these fields."""
    from annotate.models import Project
    from annotate.selectors import loop as loop_sel
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create

    src = Project.objects.get(pk=source)
    labels = [LabelInput(name=lab.name, code=lab.code, description=lab.description) for lab in src.labels.all()]
    adapters = loop_sel.prod_adapters(project=src)
    if not adapters:
        raise RuntimeError(f"project {source} has no finished round with adapters to score with")
    project = project_create(
        name=name,
        labels=labels,
        model_dir=model_dir,
        engine=engine,
        **{
            **SCRIPTED_KNOBS,
            "test_set_size": 0,
            "cold_start_batches": 0,
            "candidate_sample": 0,
            "ensemble_k": len(adapters),
            "mass_threshold": src.mass_threshold,  # the source's review rule (a rehearsal's tiny model: 0)
            **(knobs or {}),
        },
    )
    report = import_items(project=project, path=Path(texts_csv))
    _copy_ensemble(project, adapters, number=1)
    return {"project": project.pk, "items": report.created, "adapters": [a.path for a in adapters]}


def _copy_ensemble(project: Any, adapters: list[Any], *, number: int) -> Any:
    """A finished round ``number`` of ``project`` holding copies of ``adapters``' rows (the same
    directories and content hashes): the ensemble as if that round had trained it."""
    from django.utils import timezone

    from annotate.models import AdapterVersion, Round

    row = Round.objects.create(
        project=project, number=number, status=Round.Status.DONE, strategy="cold-start", finished_at=timezone.now()
    )
    for a in adapters:
        AdapterVersion.objects.create(
            project=project, round=row, arm=a.arm, k=a.k, path=a.path, content_hash=a.content_hash, n_labels=a.n_labels
        )
    return row


def set_project(*, project: int, **fields: Any) -> dict[str, Any]:
    from annotate.models import Project

    Project.objects.filter(pk=project).update(**fields)
    row = Project.objects.get(pk=project)
    return {f: getattr(row, f) for f in fields}


def gpu_consumers(*, on: list[str], off: list[str]) -> dict[str, Any]:
    """The gpu workers named in ``on`` consume the gpu queue, those in ``off`` stop consuming it
    (Celery's add_consumer / cancel_consumer broadcasts); each node's reply."""
    from config.celery import app

    replies: dict[str, Any] = {}
    if off:
        replies["off"] = app.control.cancel_consumer("gpu", destination=off, reply=True, timeout=5)
    if on:
        replies["on"] = app.control.add_consumer("gpu", destination=on, reply=True, timeout=5)
    active = app.control.inspect(destination=on + off, timeout=5).active_queues() or {}
    replies["queues"] = {node: sorted(q["name"] for q in qs) for node, qs in active.items()}
    return replies


def shard_state(*, round_id: int) -> list[dict[str, Any]]:
    """Every shard of a round: status, attempts, who scored it, seconds, items, and its file's mtime."""
    from annotate.models import ScoreShard

    rows = []
    for s in ScoreShard.objects.filter(round_id=round_id).order_by("shard"):
        path = Path(s.path) if s.path else None
        rows.append(
            {
                "shard": s.shard,
                "status": s.status,
                "attempts": s.attempts,
                "worker": s.worker,
                "seconds": s.seconds,
                "items": s.n_items,
                "path": s.path,
                "mtime": path.stat().st_mtime if path is not None and path.is_file() else None,
            }
        )
    return rows


def end_round(*, round_id: int, reason: str) -> bool:
    """A throughput round is over once scored (and its batch selected): failed with ``reason``, so that
    the project can be asked for the next one; nothing of it is labelled."""
    from annotate.services.round_state import round_fail

    return round_fail(round_id=round_id, reason=reason)


def drop_score_cache() -> dict[str, Any]:
    """Empty the score cache (SCORE_DIR/cache) before a throughput round, so that the round scores every
    item on the engines: without it a round over items an earlier round scored under the same adapters
    reads them back (session 19's kill round over the same 100,000 items as the round before it: read
    back in 10.8 s, no shard running long enough to kill). A round over items partly scored before is
    scored whole anyway (the pipeline scores a chunk unless every item of it is cached: session 19's
    tokens per item were equal in its 1-, 2- and 4-worker rounds), but the kill needs it dropped."""
    import shutil
    import time

    from django.conf import settings

    root = Path(settings.SCORE_DIR) / "cache"
    if not root.is_dir():
        return {"chunks": 0}
    chunks = sum(1 for _ in root.rglob("*.npz"))
    aside = root.with_name(f"cache-dropped-{time.time_ns()}")
    root.rename(aside)  # at once: a reader sees the whole cache or none of it
    shutil.rmtree(aside, ignore_errors=True)
    return {"chunks": chunks}


def compare_scores(*, round_a: int, round_b: int) -> dict[str, Any]:
    """Two rounds' shard files on their common items: argmax agreement of each member and of the
    ensemble mean, and |Δp| (the largest over the labels, per member and item: mean and max)."""
    import numpy as np

    from annotate.models import ScoreShard
    from scoring.pipeline import load_shards

    def load(round_id: int) -> tuple[Any, Any]:
        paths = [Path(p) for p in ScoreShard.objects.filter(round_id=round_id).values_list("path", flat=True) if p]
        ids, p, _mass, _full = load_shards(paths)
        return ids, p

    ids_a, p_a = load(round_a)
    ids_b, p_b = load(round_b)
    common, ia, ib = np.intersect1d(ids_a, ids_b, return_indices=True)
    if not len(common):
        return {"items": 0}
    a, b = p_a[:, ia], p_b[:, ib]
    dp = np.abs(a - b).max(axis=-1)
    return {
        "items": int(len(common)),
        "members": int(a.shape[0]),
        "argmax_agreement_members": float((a.argmax(-1) == b.argmax(-1)).mean()),
        "argmax_agreement_mean": float((a.mean(0).argmax(-1) == b.mean(0).argmax(-1)).mean()),
        "mean_dp": float(dp.mean()),
        "max_dp": float(dp.max()),
        "identical_share": float((dp == 0).all(axis=0).mean()),
    }


def round_members(*, round_id: int) -> int:
    """How many adapters scored a round (the production ensemble before it): requests per item."""
    from annotate.models import Round
    from annotate.selectors import loop as loop_sel

    row = Round.objects.get(pk=round_id)
    return len(loop_sel.prod_adapters(project=row.project, before_number=row.number))


# -- the auto-labelling bulk job in the deployed shape (bench/deployed_loop.py --autolabel) -------------


def held_out_counts(*, project: int) -> dict[str, Any]:
    """The gold set and the calibration split the ML page drew: drawn and labelled (final label)."""
    from annotate.models import GoldItem, Project
    from annotate.selectors import autolabel as auto_sel

    row = Project.objects.get(pk=project)
    gold = GoldItem.objects.filter(project=row, purpose=GoldItem.Purpose.GOLD)
    return {
        "gold": {"drawn": gold.count(), "labelled": gold.filter(item__final_label__isnull=False).count()},
        "split": auto_sel.calibration_split_counts(project=row),
        "eval_items": len(auto_sel.eval_items(project=row).item_ids),
    }


def autolabel_open(*, project: int, prompt_hash: str, adapter_set_hash: str) -> dict[str, int]:
    """What a run launched now would score (the unlabelled pool less the items decided under this key),
    and how many of those were decided under another key: the items a prompt change must re-do."""
    from annotate.models import AutoLabel, Project
    from annotate.selectors import autolabel as auto_sel

    pool = auto_sel.unlabelled_pool(project=Project.objects.get(pk=project))
    rows = AutoLabel.objects.filter(item__project_id=project)
    decided = rows.filter(prompt_hash=prompt_hash, adapter_set_hash=adapter_set_hash).values("item_id")
    undecided = pool.exclude(id__in=decided)
    elsewhere = rows.exclude(prompt_hash=prompt_hash, adapter_set_hash=adapter_set_hash).values("item_id")
    return {
        "pool": pool.count(),
        "to_score": undecided.count(),
        "decided_under_another_key": undecided.filter(id__in=elsewhere).count(),
    }


def autolabel_facts(*, run_id: int) -> dict[str, Any]:
    """A run read back from the database: every planned item (items.npy) against the result rows under
    the run's (prompt hash, adapter set) — lost: no row and no dead letter; written twice: a second row
    (the unique key forbids it) or a progress count past the planned items (a chunk committed twice) —,
    each shard's claims, the dead letters with their reasons, the tiers."""
    from collections import Counter

    import numpy as np
    from django.db.models import F

    from annotate.models import AutoLabel, AutolabelRun, DeadLetter
    from annotate.selectors import autolabel as auto_sel
    from annotate.services.round_state import autolabel_run_dir

    run = AutolabelRun.objects.get(pk=run_id)
    items_file = autolabel_run_dir(run) / "items.npy"
    planned = set(np.load(items_file).tolist()) if items_file.is_file() else set()
    keyed = AutoLabel.objects.filter(prompt_hash=run.prompt_hash, adapter_set_hash=run.adapter_set_hash)
    rows = list(keyed.filter(item__project_id=run.project_id).values_list("item_id", "run_id", "decision", "audit"))
    per_item = Counter(item for item, *_ in rows)
    letters = DeadLetter.objects.filter(run__project_id=run.project_id, run__prompt_hash=run.prompt_hash)
    dead = set(letters.filter(run__adapter_set_hash=run.adapter_set_hash).values_list("item_id", flat=True))
    mine = [r for r in rows if r[1] == run.id]
    accepted = keyed.filter(run=run, decision=AutoLabel.Decision.ACCEPTED, item__gold_label__isnull=False)
    return {
        "run": run.id,
        "status": run.status,
        "reason": run.reason,
        "planned": len(planned),
        "n_items": run.n_items,
        "items_done": run.items_done,
        "rows_of_run": len(mine),
        "rows_planned": sum(1 for item in planned if per_item[item]),
        "lost": sorted(item for item in planned if not per_item[item] and item not in dead)[:50],
        "n_lost": sum(1 for item in planned if not per_item[item] and item not in dead),
        "duplicate_rows": sum(n - 1 for n in per_item.values() if n > 1),
        "progress_overcount": max(0, run.items_done - run.n_items),
        "decisions": dict(Counter(d for _, _, d, _ in mine)),
        "audit_pending": sum(1 for *_, a in mine if a == AutoLabel.Audit.PENDING),
        "oracle_correct": accepted.filter(label_id=F("item__gold_label_id")).count(),
        "oracle_checked": accepted.count(),
        "tiers": auto_sel.tier_counts(run=run),
        "shards": [
            {"shard": s.shard, "status": s.status, "attempts": s.attempts, "worker": s.worker, "items": s.n_items}
            for s in run.shards.order_by("shard")
        ],
        "dead_letters": _dead_letters(DeadLetter.objects.filter(run=run)),
        "seconds": run.seconds,
        "tokens": run.tokens,
        "wall": (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else None,
    }


def _dead_letters(rows: Any, listed: int = 20) -> dict[str, Any]:
    from collections import Counter

    fields = ("item__external_id", "reason", "detail", "attempts", "resolved")
    found = list(rows.order_by("id").values_list(*fields))
    return {
        "n": len(found),
        "by_reason": dict(Counter(r[1] for r in found)),
        "first": [dict(zip(("item", *fields[1:]), r, strict=True)) for r in found[:listed]],
    }


def autolabel_shards(*, run_id: int) -> list[dict[str, Any]]:
    """The run's shards as the kill needs them: status, attempts, holder (``host:pid`` of the pool child)."""
    from annotate.models import AutolabelShard

    rows = AutolabelShard.objects.filter(run_id=run_id).order_by("shard")
    return [{"shard": s.shard, "status": s.status, "attempts": s.attempts, "worker": s.worker} for s in rows]


def edit_instructions(*, project: int, instructions: str) -> dict[str, Any]:
    """The instructions edited as the ML settings page saves them (services.setup.project_update, the
    label set unchanged)."""
    from annotate.models import Project
    from annotate.services.projects import LabelInput
    from annotate.services.setup import project_update

    row = Project.objects.get(pk=project)
    labels = [LabelInput(name=lab.name, code=lab.code, description=lab.description) for lab in row.labels.all()]
    before = row.instructions
    project_update(project=row, labels=labels, instructions=instructions)
    return {"before": before, "after": Project.objects.get(pk=project).instructions}


def promote_ensemble(*, project: int) -> dict[str, Any]:
    """The production ensemble again as a new finished round, its configuration frozen now (so with the
    edited prompt): what the next trained round would carry, without training — the same adapter
    weights, new adapter rows (so the adapter set hash changes with the prompt hash)."""
    from annotate.loopconfig import round_frozen
    from annotate.models import Project, Round
    from annotate.selectors import loop as loop_sel

    row = Project.objects.get(pk=project)
    adapters = loop_sel.prod_adapters(project=row)
    number = (Round.objects.filter(project=row).order_by("-number").values_list("number", flat=True).first() or 0) + 1
    made = _copy_ensemble(row, adapters, number=number)
    frozen = round_frozen(made)
    return {"round": number, "instructions": frozen["loop"]["prompt"]["instructions"], "adapters": len(adapters)}
