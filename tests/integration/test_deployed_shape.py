"""The deployment as docker-compose runs it, on this machine's CPUs: real PostgreSQL (a database this
test creates and drops), real Redis (this run's own database), the processes of config/processes.py
(the one definition compose and ``make demo`` start too): ``migrate``, gunicorn ``web``, a ``worker`` on
the default queue and a separate ``gpu-worker`` on the gpu queue started with the GPU profile forced
(``ALANN_LOOP_OPTIONS={"profile": "gpu"}``, as a GPU worker's environment says), and two oracle
annotators that label through HTTP only, the way a browser does (devtools/deployed.py). Three rounds
complete with a learning curve.

Before rounds froze their configuration (24e947c), the gpu worker derived the GPU profile's context
length from its own environment, its prompt hash disagreed with the one the CPU worker planned with,
and round 2 (the first scored round) failed: "annotate.gpu.score_shard: StaleScoresError: scores
were made with ..." (bench/raw/2026-12-03/deployed-shape-at-24e947c.txt)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from devtools.deployed import Deployment, gold_by_text, own_postgres_database, parent_pid, run_rounds
from devtools.live_server import PASSWORD, login_session
from tests import redis_owner
from tests.integration.round_helpers import TEST_OPTIONS
from tests.prerequisites import missing_prerequisite

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(900)]

PG_SERVER = os.environ.get("TEST_POSTGRES_SERVER", "postgres://postgres@127.0.0.1:5432/postgres")
ROUNDS = 3
ANNOTATORS = ("ann1", "ann2")
TOKEN = "deployed-shape-token-0123456789"


# -- run inside the deployment's environment (a Django subprocess on its database) ---------------


def seed_project(*, data_dir: str, work_dir: str, model_dir: str) -> dict[str, Any]:
    """A small TREC project (tiny model, K=2, B=8, one cold-start round, training starts by itself
    when a batch is done), its gold test set, an ML user with an API token and the annotators."""
    from django.contrib.auth.models import Group, User

    from annotate.models import ApiToken
    from devtools.oracle import trec_project

    project = trec_project(
        Path(data_dir), Path(work_dir), model_dir=Path(model_dir), pool=64, test=16, auto_retrain_share=1.0
    )
    users = {}
    for name, role in (("ml", "ml"), *((a, "annotator") for a in ANNOTATORS)):
        user = User.objects.create_user(username=name, password=PASSWORD)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        users[name] = user.pk
    ApiToken.objects.create(user_id=users["ml"], digest=hashlib.sha256(TOKEN.encode()).hexdigest(), name="e2e")
    return {"project": project.pk}


def round_facts(*, project: int) -> list[dict[str, Any]]:
    """Per round: status, frozen config and fingerprint, and the processes that scored its shards."""
    from annotate.models import Round, ScoreShard

    return [
        {
            "number": row.number,
            "status": row.status,
            "failure": row.failure_reason,
            "fingerprint": row.config_fingerprint,
            "config": row.config,
            "prompt_hash": row.prompt_hash,
            "shard_workers": sorted(set(ScoreShard.objects.filter(round=row).values_list("worker", flat=True))),
        }
        for row in Round.objects.filter(project_id=project).order_by("number")
    ]


def test_three_rounds_through_the_deployed_processes(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    owned = redis_owner.current()
    owned.flush()  # this run's own database: stray messages of earlier tests, never anyone else's
    work = tmp_path / "work"
    work.mkdir()
    with contextlib.ExitStack() as stack:
        try:
            database_url = stack.enter_context(own_postgres_database(PG_SERVER))
        except psycopg.OperationalError as exc:
            missing_prerequisite(f"PostgreSQL at {PG_SERVER} does not answer: {exc}")
        deployment = Deployment(
            database_url=database_url,
            redis_url=owned.url,
            var_dir=tmp_path / "var",
            log_dir=tmp_path,
            loop_options=TEST_OPTIONS,
        )
        try:
            deployment.run_once("migrate")
            project = deployment.call(
                "tests.integration.test_deployed_shape:seed_project",
                data_dir=str(shared_data),
                work_dir=str(work),
                model_dir=str(tiny_llama_dir),
            )["project"]
            # What a GPU worker's own environment says: the GPU profile (context 1024, 48 steps of 32).
            deployment.start_services(gpu_worker_env={"ALANN_LOOP_OPTIONS": json.dumps({"profile": "gpu"})})
            sessions = [login_session(deployment.url, name) for name in ANNOTATORS]
            records = run_rounds(
                deployment,
                project=project,
                token=TOKEN,
                rounds=ROUNDS,
                sessions=sessions,
                gold=gold_by_text(work / "pool.csv"),
            )
            facts = deployment.call("tests.integration.test_deployed_shape:round_facts", project=project)
            curve = login_session(deployment.url, "ml").get(f"{deployment.url}/p/{project}/ml/", timeout=60)
            htmx = requests.get(f"{deployment.url}/static/js/htmx.min.js", timeout=30)  # gunicorn serves static too
            # who scored: the processes named by the shards' claims, asked while they still run
            scorers = {parent_pid(int(w.rsplit(":", 1)[1])) for f in facts for w in f["shard_workers"]}
            gpu_pid, cpu_pid = deployment.pid("gpu-worker-0"), deployment.pid("worker")
        finally:
            logs = deployment.logs()
            deployment.stop_all()
    assert [r["number"] for r in records] == [1, 2, 3] and all("accuracy" in r["metrics"] for r in records), logs
    assert [r["labelled_over_http"] for r in records] == [8, 8, 8]  # B=8, every batch item through HTTP
    assert [f["status"] for f in facts] == ["done"] * ROUNDS, logs
    # One frozen configuration, the deployment's (CPU profile, the test's context length), for every round
    # and every process: the gpu worker's own GPU profile changed nothing.
    assert len({f["fingerprint"] for f in facts}) == 1 and facts[0]["fingerprint"]
    assert len({f["config"]["adapter_set"] for f in facts}) == ROUNDS  # each starts from the last one's adapters
    frozen = facts[0]["config"]
    assert frozen["profile"] == "cpu" and frozen["loop"]["max_context"] == json.loads(TEST_OPTIONS)["max_context"]
    scored = [f for f in facts if f["shard_workers"]]
    assert [f["number"] for f in scored] == [2, 3], facts  # round 1 is the cold start: nothing to score
    assert scorers == {gpu_pid} and cpu_pid not in scorers  # the gpu queue's worker (its prefork child) alone
    assert curve.status_code == 200 and 'id="learning-curve"' in curve.text and "<img" in curve.text
    assert curve.text.count('class="round-config"') == ROUNDS
    assert htmx.status_code == 200 and "htmx" in htmx.text[:2000]
