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
