"""Crash at every step (issue 15 point 8): a real Celery worker SIGKILLed in the middle of a cold
selection, an evaluation, a scoring shard (after its first chunk was scored and cached, before the
shard finished) and a scored selection — and, separately, in the middle of an import's insert. Each
time a fresh worker resumes the work on its own (worker start → jobs_resume), and
the end state equals an uninterrupted twin run of the same data and seed in a separate database and
cache: batch rows, predictions, score shards, adapter hashes, metrics, item states; for the import,
every item and the job's counts.

The kill points are the worker's crash-test hooks (annotate/steppoints.py, run by devtools/stall.py): the
worker announces that it reached the point and waits there, so the kill lands exactly mid-step."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from annotate.models import AdapterVersion, BatchItem, ImportJob, Item, Prediction, Project, Round, ScoreShard
from annotate.services.imports import import_create
from annotate.services.projects import LabelInput, project_create
from annotate.services.rounds import round_request_retrain, round_request_start
from devtools.stall import stall_env
from tests.integration.round_helpers import (
    TEST_OPTIONS,
    Workers,
    annotator,
    label_batch,
    live_loop,
    trec_project,
    use_loop_options,
    wait_for,
)

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.data, pytest.mark.timeout(900)]

POOL = 600  # two shards of ~290 candidates: more than one scoring chunk (256) each, so a kill can land mid-shard


def _status(round_id: int) -> str:
    return str(Round.objects.values_list("status", flat=True).get(id=round_id))


def _until(round_id: int, statuses: tuple[str, ...], workers: Workers, timeout: float = 240) -> Round:
    try:
        wait_for(lambda: _status(round_id) in statuses, timeout, f"round {round_id} to reach {statuses}", poll=0.2)
    except AssertionError:
        raise AssertionError(workers.logs()) from None
    row = Round.objects.get(id=round_id)
    assert row.status != "failed", row.failure_reason + workers.logs()
    return row


class Killer:
    """Kills the running worker where it stalls and starts the next one (w1, w2, ...)."""

    def __init__(self, workers: Workers, stall_dir: Path) -> None:
        self.workers, self.stall_dir, self.n = workers, stall_dir, 1
        workers.start("w1")

    def at(self, marker: str) -> None:
        try:
            wait_for(lambda: (self.stall_dir / marker).exists(), 240, f"a worker to reach {marker}", poll=0.05)
        except AssertionError:
            raise AssertionError(self.workers.logs()) from None
        self.workers.kill(f"w{self.n}")
        self.n += 1

    def restart(self) -> None:
        self.workers.start(f"w{self.n}")


def _digest(path: str) -> str:
    with np.load(path) as data:
        return hashlib.sha256(b"".join(np.ascontiguousarray(data[k]).tobytes() for k in sorted(data.files))).hexdigest()


def _metrics(row: Round) -> dict[str, Any]:
    """What the round measured; not the SVGs (their titles name the project) nor wall-clock times."""
    return {k: v for k, v in (row.metrics or {}).items() if not k.endswith("_svg")}


def fingerprint(project: Project) -> dict[str, Any]:
    """The run's outcome by external ids; an adapter-set hash (it covers the adapters' paths, which
    differ between the two runs' directories) by the round that scored with it, the adapters
    themselves by content hash."""
    rounds = Round.objects.filter(project=project).order_by("number")
    named = {r.adapter_set_hash: f"set of round {r.number}" for r in rounds if r.adapter_set_hash}
    predictions = Prediction.objects.filter(item__project=project).values_list(
        "item__external_id", "round__number", "prompt_hash", "adapter_set_hash", "label__name", "mass", "uncertainty"
    )
    return {
        "rounds": [
            (r.number, r.status, r.strategy, named.get(r.adapter_set_hash), r.prompt_hash, r.items_scored)
            for r in rounds
        ],
        "metrics": [_metrics(r) for r in rounds],
        "batch": list(
            BatchItem.objects.filter(round__project=project)
            .order_by("round__number", "rank")
            .values_list("round__number", "item__external_id", "source", "rank", "uncertainty")
        ),
        "adapters": sorted(
            AdapterVersion.objects.filter(project=project).values_list("round__number", "arm", "k", "content_hash")
        ),
        "predictions": sorted((ext, n, ph, named.get(h, h), lab, m, u) for ext, n, ph, h, lab, m, u in predictions),
        "probs": sorted(
            (ext, json.dumps(probs))
            for ext, probs in Prediction.objects.filter(item__project=project).values_list("item__external_id", "probs")
        ),
        "shards": sorted(
            (s.round.number, s.shard, s.status, s.n_items, _digest(s.path))
            for s in ScoreShard.objects.filter(round__project=project).select_related("round")
        ),
        "items": sorted(
            Item.objects.filter(project=project).values_list("external_id", "state", "is_test", "final_label__name")
        ),
    }


def _two_rounds(
    data: Path, model: Path, where: Path, workers: Workers, killer: Killer | None
) -> dict[str, Any]:  # fmt: skip
    """Cold round → labels → retrain → evaluation → a scored round 2; with a killer, a kill mid-way
    through each of: cold selection, evaluation, a scoring shard, the scored selection."""
    project = trec_project(data, where, model_dir=model, pool=POOL)
    user = annotator()
    first = round_request_start(project=project, user=user)
    if killer:
        killer.at("select-1")
        assert _status(first.id) == "selecting" and not BatchItem.objects.filter(round=first).exists()
        killer.restart()
    _until(first.id, ("labeling",), workers)
    assert label_batch(project, user) == 8
    round_request_retrain(project=project, user=user)
    if killer:
        killer.at("evaluate-1")
        assert _status(first.id) == "evaluating"
        killer.restart()
    _until(first.id, ("done",), workers)
    second = round_request_start(project=project, user=user)
    if killer:
        killer.at("score-2")
        row = Round.objects.get(id=second.id)
        undone = ScoreShard.objects.filter(round=second).exclude(status="done").count()
        assert row.status == "scoring" and 0 < row.items_scored < row.items_to_score and undone >= 1, "not mid-shard"
        killer.restart()
        killer.at("select-2")
        assert _status(second.id) == "selecting" and not BatchItem.objects.filter(round=second).exists()
        killer.restart()
    _until(second.id, ("labeling",), workers)
    return fingerprint(project)


def test_a_round_killed_at_every_step_ends_like_an_uninterrupted_twin(
    shared_data: Path,
    tiny_llama_dir: Path,
    tmp_path: Path,
    settings: Any,
    django_db_blocker: Any,
    monkeypatch: Any,
    artifacts_dir: Path,
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    (tmp_path / "twin").mkdir()
    with live_loop(tmp_path / "twin", settings, django_db_blocker) as workers:  # its own database and caches
        workers.start("w1")
        twin = _two_rounds(shared_data, tiny_llama_dir, tmp_path / "twin", workers, None)

    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("select,score,evaluate", stall_dir).items():
        monkeypatch.setenv(name, value)
    (tmp_path / "crash").mkdir()
    with live_loop(tmp_path / "crash", settings, django_db_blocker) as workers:
        crashed = _two_rounds(shared_data, tiny_llama_dir, tmp_path / "crash", workers, Killer(workers, stall_dir))
    assert sorted(p.name for p in stall_dir.iterdir()) == ["evaluate-1", "score-2", "select-1", "select-2"]

    assert crashed["batch"] and crashed["predictions"] and len(crashed["shards"]) == 2
    differ = {key: (crashed[key], twin[key]) for key in twin if crashed[key] != twin[key]}
    if differ:  # both outcomes, for a diff by hand
        (artifacts_dir / "kill-every-step.json").write_text(json.dumps({"crashed": crashed, "twin": twin}, default=str))
    assert not differ, f"differs from the uninterrupted twin: {sorted(differ)}\n{str(differ)[:4000]}"


def _import_file(path: Path, rows: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        f.write("id,text,label,source\n")
        for n in range(rows):
            f.write(f'r{n},"text {n}, with ""quotes"" and ünïcode {n % 7}",{("pos", "neg", "")[n % 3]},s{n % 5}\n')
    return path


def _import_state(project: Project) -> dict[str, Any]:
    job = ImportJob.objects.get(project=project)
    return {
        "job": (job.status, job.error, job.rows_done, job.rows_created, job.duplicate_texts, job.processed_bytes),
        "items": list(
            Item.objects.filter(project=project)
            .order_by("id")
            .values_list("external_id", "text", "text_hash", "metadata", "gold_label__name", "is_test", "state")
        ),
    }


def test_an_import_killed_mid_insert_resumes_to_the_same_items(
    tmp_path: Path, settings: Any, django_db_blocker: Any, monkeypatch: Any
) -> None:
    rows = 12_000  # three insert chunks: the kill lands after the first, inside the transaction
    source = _import_file(tmp_path / "items.csv", rows)
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    for name, value in stall_env("import", stall_dir).items():
        monkeypatch.setenv(name, value)
    with live_loop(tmp_path, settings, django_db_blocker) as workers:
        states = {}
        for name in ("crash", "twin"):  # the twin's import passes the point: its marker exists by then
            project = project_create(
                name=name, labels=[LabelInput("pos", "A"), LabelInput("neg", "B")], test_set_size=50
            )
            job = import_create(project=project, path=source, filename="items.csv")
            if name == "crash":
                workers.start("w1")
                wait_for(lambda: (stall_dir / "import-items.csv").exists(), 120, "the import's first chunk", poll=0.05)
                workers.kill("w1")
                assert ImportJob.objects.get(id=job.id).status == "running"
                assert not Item.objects.filter(project=project).exists()  # the killed transaction left nothing
                workers.start("w2")  # its start resumes the job
            finished = lambda j=job.id: ImportJob.objects.get(id=j).status in ("done", "failed")  # noqa: E731
            wait_for(finished, 120, "the import", poll=0.2)
            states[name] = _import_state(project)
    crash, twin = states["crash"], states["twin"]
    assert crash["job"][:4] == ("done", "", rows, rows), crash["job"]
    assert crash == twin
