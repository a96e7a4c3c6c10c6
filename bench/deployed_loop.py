"""The product as deployed, end to end: the processes of config/processes.py (migrate, gunicorn web, a
CPU worker on the default queue, GPU workers on the gpu queue), projects created with the app's
defaults, their data uploaded through the web's import page, and oracle annotators that label only
through HTTP, all at once, round after round until each project holds ``--labels`` labels (issue 35).

    python bench/deployed_loop.py --data trec=../shared/data/trec --engine vllm --gpu-workers 2 \\
        --database-url postgres://... --redis-url redis://127.0.0.1:6390/0 --work /root/run --out /root/run/out

Every project runs in its own thread against the same deployment (the GPU workers serve both queues'
work as it comes). Written as it goes under ``--out``: ``records-<name>.jsonl`` (one line per round:
the API's body with the round's cost per step, and the wall-clock of its phases), ``facts-<name>.json``
(shards and who scored them, adapter directories), ``gpu.csv`` / ``gpu-apps.csv`` (nvidia-smi samples),
``processes.json`` (pid → process), ``run.json`` (options, commit, versions, outcome) and the
processes' logs. ``bench/deployed_report.py`` turns them into the tables of bench/RESULTS.md.

On a CPU machine the same script runs with ``--engine hf`` and a small ``--pool-sample`` (the rehearsal
of the GPU sitting); nothing here imports Django (the processes do, and Deployment.call)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.deployed import (  # noqa: E402
    Deployment,
    api,
    gold_by_text,
    label_concurrently,
    parent_pid,
    wait_round,
)
from devtools.live_server import PASSWORD, login_session  # noqa: E402

TOKEN = "deployed-loop-token-0123456789abcdef"
SAMPLE_SEED = 0  # annotate.simulation.harness.POOL_SAMPLE_SEED: the same sample as the simulation's
_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_DEBUG_ERROR = re.compile(r'<title>(.*?)</title>|<pre class="exception_value">(.*?)</pre>', re.S)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [deployed_loop] {message}", flush=True)


# -- data: the simulation's files (ids train-<row>, test-<row>) ---------------------------------------


def _rows(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [(r["text"], r["label"]) for r in csv.DictReader(f)]


def _sample(n: int, size: int) -> list[int]:
    if 0 < size < n:
        return sorted(int(i) for i in np.random.default_rng(SAMPLE_SEED).choice(n, size=size, replace=False))
    return list(range(n))


def write_split(source: Path, target: Path, prefix: str, sample: int) -> int:
    rows = _rows(source)
    keep = _sample(len(rows), sample)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])
        writer.writerows((f"{prefix}-{i}", rows[i][0], rows[i][1]) for i in keep)
    return len(keep)


# -- monitors -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def gpu_monitors(out: Path, suffix: str = "") -> Iterator[None]:
    """nvidia-smi every 0.5 s (GPU busy %, memory) and every 1 s (memory per process), if there is one."""
    if shutil.which("nvidia-smi") is None:
        yield
        return
    queries = {
        f"gpu{suffix}.csv": ["--query-gpu=timestamp,utilization.gpu,memory.used", "-lms", "500"],
        f"gpu-apps{suffix}.csv": ["--query-compute-apps=timestamp,pid,used_memory", "-lms", "1000"],
    }
    procs = [
        subprocess.Popen(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            stdout=(out / name).open("w"),
            stderr=subprocess.DEVNULL,
        )
        for name, args in queries.items()
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()


def process_table(deployment: Deployment) -> dict[str, str]:
    """pid → name of every process of the deployment and their children (the Celery pool children
    and vLLM's, which hold the GPU), read from /proc."""
    names = {proc.pid: name for name, proc in deployment.procs.items()}
    table: dict[str, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            pid = int(entry.name)
            chain = [pid]
            while chain[-1] > 1 and chain[-1] not in names and len(chain) < 8:
                stat = (Path("/proc") / str(chain[-1]) / "stat").read_text()
                chain.append(int(stat.rsplit(")", 1)[1].split()[1]))
            if chain[-1] in names:
                table[str(pid)] = names[chain[-1]] + ("" if pid == chain[-1] else f" (child, depth {len(chain) - 1})")
    return table


# -- one project ------------------------------------------------------------------------------------------


def upload(session: requests.Session, base: str, project: int, path: Path) -> None:
    """The web's import page, as a browser posts it (multipart, CSRF from the form)."""
    url = f"{base}/p/{project}/import/"
    page = session.get(url, timeout=60)
    page.raise_for_status()
    token = _CSRF.search(page.text)
    if token is None:
        raise RuntimeError(f"no CSRF token on {url}")
    with path.open("rb") as f:
        response = session.post(
            url,
            # every row, as the simulation imports them (import_items keeps duplicates): the same pool and
            # test set as its records; the upload form's default skips texts already in the project
            data={"csrfmiddlewaretoken": token.group(1), "keep_duplicates": "on"},
            files={"file": (path.name, f, "text/csv")},
            headers={"Referer": url},
            timeout=300,
        )
    if response.status_code >= 400 or "/import/" not in response.url:
        raise RuntimeError(f"upload of {path.name} refused ({response.status_code}): {page_error(response.text)}")


def page_error(text: str) -> str:
    """The exception of Django's debug page (its title and value), else the start of the page."""
    found = [" ".join((m.group(1) or m.group(2) or "").split()) for m in _DEBUG_ERROR.finditer(text)]
    return " | ".join(found)[:2000] if found else text[:500]


def wait_imports(deployment: Deployment, project: int, n: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = deployment.call("devtools.deployed_project:import_status", project=project)
        if any(j["status"] == "failed" for j in jobs):
            raise RuntimeError(f"import failed: {jobs}")
        if len(jobs) >= n and all(j["status"] == "done" for j in jobs):
            return list(jobs)
        time.sleep(1.0)
    raise RuntimeError(f"imports of project {project} not done after {timeout:.0f} s")


class ProjectRun:
    """One project's rounds, from its upload to ``labels`` labels, in a thread of its own."""

    def __init__(self, *, name: str, data_dir: Path, args: argparse.Namespace, deployment: Deployment) -> None:
        self.name, self.data_dir, self.args, self.deployment = name, data_dir, args, deployment
        self.out = args.out / f"records-{name}.jsonl"
        self.project = 0
        self.labels = 0
        self.rounds = 0
        self.outcome = "not started"
        self.pool_csv = args.work / "data" / name / "pool.csv"

    def prepare(self) -> dict[str, Any]:
        a = self.args
        n_pool = write_split(self.data_dir / "train.csv", self.pool_csv, "train", a.pool_sample)
        n_test = write_split(self.data_dir / "test.csv", self.pool_csv.with_name("test.csv"), "test", a.test_sample)
        # 0 until the test split is marked (mark_test_set): an import draws a test set of this size otherwise
        knobs = {**json.loads(a.knobs), "test_set_size": 0}
        made = self.deployment.call(
            "devtools.deployed_project:create_project",
            name=f"{self.name} (deployed run)",
            data_dir=str(self.data_dir),
            model_dir=a.model_dir,
            engine=a.engine,
            knobs=knobs,
        )
        self.project = int(made["project"])
        log(f"{self.name}: project {self.project}, {made['labels']} labels, pool {n_pool}, test {n_test}")
        return {**made, "pool": n_pool, "test": n_test}

    def import_data(self, ml: requests.Session) -> list[dict[str, Any]]:
        started = time.monotonic()
        # one after the other: a second import into a project while one runs is refused ("try again")
        upload(ml, self.deployment.url, self.project, self.pool_csv)
        wait_imports(self.deployment, self.project, 1, self.args.step_timeout)
        upload(ml, self.deployment.url, self.project, self.pool_csv.with_name("test.csv"))
        jobs = wait_imports(self.deployment, self.project, 2, self.args.step_timeout)
        marked = self.deployment.call("devtools.deployed_project:mark_test_set", project=self.project)
        log(f"{self.name}: imported {[j['rows'] for j in jobs]} rows in {time.monotonic() - started:.1f} s")
        return [*jobs, {"test_marked": marked, "seconds": round(time.monotonic() - started, 2)}]

    def run(self, sessions: list[requests.Session], stop_at: float) -> None:
        try:
            self._rounds(sessions, stop_at)
        except Exception as exc:  # noqa: BLE001 - recorded; the other projects go on
            self.outcome = f"error: {type(exc).__name__}: {exc}"[:4000]
            log(f"{self.name}: {self.outcome}\n{traceback.format_exc()}")

    def _rounds(self, sessions: list[requests.Session], stop_at: float) -> None:
        a, d = self.args, self.deployment
        gold = gold_by_text(self.pool_csv)
        while self.labels < a.labels or self.rounds < a.min_rounds:
            if time.time() > stop_at or (a.stop_file and Path(a.stop_file).exists()):
                self.outcome = f"stopped by the deadline: {self.rounds} rounds, {self.labels} labels"
                return
            t0 = time.time()
            response = api(d.url, TOKEN, "POST", f"/api/projects/{self.project}/rounds/")
            if response.status_code != 201:
                self.outcome = f"round start refused ({response.status_code}): {response.text[:500]}"
                return
            round_id = response.json()["id"]
            wait_round(d, TOKEN, round_id, {"labeling"}, a.step_timeout)
            t1 = time.time()
            labelled = label_concurrently(sessions, d.url, self.project, gold)
            t2 = time.time()
            body = wait_round(d, TOKEN, round_id, {"done"}, a.step_timeout)
            t3 = time.time()
            self.rounds += 1
            self.labels += labelled
            record = {
                "set": self.name,
                "project": self.project,
                "labelled_over_http": labelled,
                "labels_total": self.labels,
                "t_request": t0,
                "t_labeling": t1,
                "t_labelled": t2,
                "t_done": t3,
                **body,
            }
            with self.out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            accuracy = (body.get("metrics") or {}).get("accuracy")
            log(
                f"{self.name}: round {body['number']} done: {self.labels} labels, accuracy {accuracy},"
                f" machine {t1 - t0 + t3 - t2:.1f} s (labelling {t2 - t1:.1f} s)"
            )
        self.outcome = f"done: {self.rounds} rounds, {self.labels} labels"


# -- the scoring throughput of the deployed shape (issue 35, points 5 and 6) ----------------------------


def throughput_texts(data: list[tuple[str, str]], n: int, target: Path) -> int:
    """``n`` distinct texts for the throughput pool: every data set's train and test texts in turn, and
    once they run out the same texts again with a suffix `` (copy N)`` (a different item, the same length
    to a token or two); written as id,text."""
    base: list[str] = []
    for _name, folder in data:
        for split in ("train.csv", "test.csv"):
            base += [text for text, _ in _rows(Path(folder) / split)]
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        for i in range(n):
            copy, j = divmod(i, len(base))
            writer.writerow((f"tp-{i}", base[j] if copy == 0 else f"{base[j]} (copy {copy})"))
    return n


def parse_throughput(spec: str) -> list[tuple[int, int]]:
    """``"1:25000,3:60000,6:100000"`` → [(gpu workers, pool items scored), ...]."""
    steps = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        workers, _, items = part.partition(":")
        steps.append((int(workers), int(items)))
    return steps


def kill_outcome(killed: dict[str, Any]) -> str:
    """How a kill round's kill went, for the log: a round scored before any shard was seen running at
    ``--kill-at`` (a fast round: each look at the shards is a Django subprocess) killed nothing."""
    if killed.get("worker"):
        return f" with {killed['worker']} killed (shard {killed['shard']})"
    return f" with no kill: {killed.get('error') or 'no shard was running once --kill-at was reached'}"


class Throughput:
    """Rounds of a project whose pool is the whole throughput set and whose ensemble is the source
    project's: each round asks for scores of ``items`` pool items (candidate_sample) with ``n`` gpu
    workers consuming the gpu queue (the others stop consuming it: Celery's cancel_consumer), is timed
    from the request to the end of its scoring (its status leaves ``scoring``), then ended (failed with
    a reason: nothing of it is labelled). With ``kill``, one more round like the largest, in which one
    gpu worker that holds a shard is SIGKILLed (its whole process group) once ``kill_at`` of the items
    are scored, and a fresh worker with the same name is started: it re-sends what the round lacks
    when it is ready (annotate.jobs_resume), and the round must finish with every shard done once."""

    def __init__(self, *, deployment: Deployment, args: argparse.Namespace, gpu_env: dict[str, str]) -> None:
        self.d, self.a, self.gpu_env = deployment, args, gpu_env
        self.out = args.out / "throughput.jsonl"
        self.host = socket.gethostname()
        self.rounds: list[dict[str, Any]] = []

    def node(self, i: int) -> str:
        return f"gpu{i}-{self.d.tag}@{self.host}"

    def run(self, source: int) -> None:
        a, d = self.a, self.d
        steps = parse_throughput(a.throughput)
        csv_path = a.work / "data" / "throughput.csv"
        n_items = max(items for _, items in steps)
        throughput_texts(a.throughput_data or a.data, n_items, csv_path)
        t0 = time.time()
        made = d.call(
            "devtools.deployed_project:throughput_project",
            source=source,
            name="throughput (deployed run)",
            texts_csv=str(csv_path),
            model_dir=a.model_dir,
            engine=a.engine,
        )
        log(f"throughput: project {made['project']} with {made['items']} items in {time.time() - t0:.1f} s")
        self._write({"kind": "project", **made, "seconds": round(time.time() - t0, 2)})
        plan = [(n, items, False) for n, items in steps]
        if a.kill:
            plan.append((max(n for n, _ in steps), n_items, True))
        reference = 0
        for n, items, kill in plan:
            record = self.one_round(made["project"], n, items, kill)
            if reference and record.get("round_id"):
                record["vs_reference"] = d.call(
                    "devtools.deployed_project:compare_scores", round_a=reference, round_b=record["round_id"]
                )
            if not reference and items == n_items:
                reference = record.get("round_id", 0)
            self._write(record)
        d.call("devtools.deployed_project:gpu_consumers", on=[self.node(i) for i in range(a.gpu_workers)], off=[])

    def one_round(self, project: int, n: int, items: int, kill: bool) -> dict[str, Any]:
        a, d = self.a, self.d
        on = [self.node(i) for i in range(min(n, a.gpu_workers))]
        off = [self.node(i) for i in range(len(on), a.gpu_workers)]
        consumers = d.call("devtools.deployed_project:gpu_consumers", on=on, off=off)
        d.call("devtools.deployed_project:set_project", project=project, candidate_sample=items)
        record: dict[str, Any] = {"kind": "round", "gpu_workers": len(on), "items": items, "kill": kill}
        record["consumers"] = consumers.get("queues")
        # every item on the engines: no round reads back what an earlier one scored under the same adapters
        record["cache_dropped"] = d.call("devtools.deployed_project:drop_score_cache")
        t0 = record["t_request"] = time.time()
        response = api(d.url, TOKEN, "POST", f"/api/projects/{project}/rounds/", json={"strategy": "uncertainty-only"})
        if response.status_code != 201:
            record["error"] = f"round start refused ({response.status_code}): {response.text[:500]}"
            return record
        round_id = int(response.json()["id"])
        record["round_id"] = round_id
        samples: list[tuple[float, str, int, int]] = []
        killed: dict[str, Any] = {}
        status, body = "pending", {}
        while time.time() - t0 < a.step_timeout:
            body = api(d.url, TOKEN, "GET", f"/api/rounds/{round_id}/").json()
            status = body["status"]
            progress = body["progress"]
            samples.append((time.time() - t0, status, progress["items_scored"], progress["items_to_score"]))
            if status not in ("pending", "scoring"):
                break
            if (
                kill
                and not killed
                and progress["items_to_score"]
                and (progress["items_scored"] >= a.kill_at * progress["items_to_score"])
            ):
                killed = self.kill_one(round_id)
            time.sleep(0.25)
        record["t_scored"] = next((t for t, s, _, _ in samples if s not in ("pending", "scoring")), None)
        record["t_scoring"] = next((t for t, s, _, _ in samples if s == "scoring"), None)
        record["status_after"] = status
        record["failure"] = body.get("failure_reason", "")
        record["samples"] = samples
        record["cost"] = body.get("cost")
        record["config_engine"] = (body.get("config") or {}).get("engine")
        scored = record["t_scored"]
        to_score = samples[-1][3] if samples else 0
        if scored:
            members = d.call("devtools.deployed_project:round_members", round_id=round_id)
            record["members"] = members
            record["requests"] = to_score * members
            record["requests_per_s"] = round(to_score * members / scored, 1)
        record["killed"] = killed
        record["shards"] = d.call("devtools.deployed_project:shard_state", round_id=round_id)
        if status in ("selecting", "labeling"):
            # scored: the round goes on to its batch, then is ended so that the next one may start (a
            # failure after its scoring is recorded; its scoring figures stand)
            try:
                wait_round(d, TOKEN, round_id, {"labeling"}, a.step_timeout)
            except AssertionError as exc:
                record["after_scoring"] = str(exc).split("\n", 1)[0]
            d.call(
                "devtools.deployed_project:end_round", round_id=round_id, reason="throughput run: scored, not labelled"
            )
        log(
            f"throughput: {len(on)} gpu workers, {to_score} items: scored in {scored} s"
            f" ({record.get('requests_per_s')} requests/s){kill_outcome(killed) if kill else ''}"
        )
        return record

    def kill_one(self, round_id: int) -> dict[str, Any]:
        """SIGKILL the process group of a gpu worker whose pool child holds a running shard; start a
        fresh worker under the same name."""
        shards = self.d.call("devtools.deployed_project:shard_state", round_id=round_id)
        running = [s for s in shards if s["status"] == "running" and s["worker"]]
        if not running:
            return {}
        return self.kill_process(running[0], shards)

    def kill_process(self, running: dict[str, Any], shards: list[dict[str, Any]]) -> dict[str, Any]:
        """SIGKILL the deployment's gpu worker whose pool child (``host:pid``) holds the shard ``running``
        (its whole process group), then start a fresh one under the same name."""
        pid = int(running["worker"].rpartition(":")[2])
        owner = parent_pid(pid)
        name = next((n for n, p in self.d.procs.items() if p.pid in (owner, pid)), "")
        if not name:
            return {"error": f"no deployment process owns pid {pid}"}
        at = time.time()
        os.killpg(self.d.procs[name].pid, signal.SIGKILL)
        self.d.procs[name].wait(timeout=30)
        index = int(name.rsplit("-", 1)[1])
        started = time.time()
        self.d.start("gpu-worker", name=name, env=self.gpu_env, node=f"gpu{index}-{self.d.tag}@%h")
        log(f"SIGKILLed {name} (pool child {pid}, shard {running['shard']}); a fresh one started")
        return {
            "worker": name,
            "pid": pid,
            "shard": running["shard"],
            "at": at,
            "started": started,
            "shards_before": shards,
        }

    def _write(self, record: dict[str, Any]) -> None:
        self.rounds.append(record)
        with self.out.open("a") as f:
            f.write(json.dumps(record) + "\n")


# -- the auto-labelling bulk job in the deployed shape (issue 31) --------------------------------------------


def autolabel_texts(data_dir: Path, n: int, target: Path) -> dict[str, str]:
    """``n`` items from the set's train split repeated with a per-copy suffix ("<text> #<copy>" from the
    second copy on: a different item, the same length to a token or two), each with its text's true
    label (the import keeps a ``label`` column as the item's hidden gold label); written as
    id,text,label. Returns text → label: what the oracle annotators know."""
    rows = _rows(data_dir / "train.csv")
    gold: dict[str, str] = {}
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])
        for i in range(n):
            copy, j = divmod(i, len(rows))
            text = rows[j][0] if copy == 0 else f"{rows[j][0]} #{copy}"
            gold[text] = rows[j][1]
            writer.writerow((f"al-{i}", text, rows[j][1]))
    return gold


def eta_errors(samples: list[list[Any]], t_end: float, n: int, at: tuple[float, ...]) -> dict[str, Any]:
    """The ETA the app showed once each share ``at`` of the items was done against the actual end:
    predicted and actual seconds left, and the error as a share of the actual (None where no sample
    with an ETA passed that share). ``samples``: [t, status, items_done, n_items, eta_seconds]."""
    out: dict[str, Any] = {}
    for share in at:
        seen = next((s for s in samples if n and s[2] >= share * n and s[4] is not None), None)
        if seen is None:
            out[f"{round(share * 100)}%"] = None
            continue
        actual = t_end - seen[0]
        out[f"{round(share * 100)}%"] = {
            "t": round(seen[0], 2),
            "done": seen[2],
            "predicted_left": round(seen[4], 2),
            "actual_left": round(actual, 2),
            "error": round((seen[4] - actual) / actual, 3) if actual > 0 else None,
        }
    return out


class Autolabel:
    """ "Label the pool" as a team runs it, through the gpu queue of the deployment: a bulk project
    holding the first project's production ensemble (K as deployed) over ``items`` items; the gold set
    and the calibration split drawn on the ML page and labelled over HTTP by the oracle annotators; the
    calibration and the run requested and read over the REST API (annotate/api_autolabel.py). With
    ``kill``, a gpu worker holding a running shard is SIGKILLed once ``kill_at`` of the items are done
    and a fresh one started under its name (Throughput.kill_one). Then the database's word on the run
    (0 lost, 0 written twice, shards, dead letters, tiers), a re-run that must score nothing, and a
    prompt change that must re-score exactly what it changed. One JSON line per step in autolabel.jsonl."""

    ETA_AT = (0.1, 0.25, 0.5)

    def __init__(
        self,
        *,
        deployment: Deployment,
        args: argparse.Namespace,
        gpu_env: dict[str, str],
        sessions: list[requests.Session],
        ml: requests.Session,
        commit: str,
    ) -> None:
        self.d, self.a, self.sessions, self.ml, self.commit = deployment, args, sessions, ml, commit
        self.killer = Throughput(deployment=deployment, args=args, gpu_env=gpu_env)
        self.out = args.out / "autolabel.jsonl"
        self.project = 0
        self.k = 0
        self.gold: dict[str, str] = {}

    def run(self, source: int) -> None:
        self.make_project(source)
        self.calibrate("calibration")
        first = self.one_run("run", kill=self.a.autolabel_kill)
        self.check(first)
        self.one_run("rerun", kill=False)
        self.prompt_change(first)

    def _write(self, step: str, record: dict[str, Any]) -> dict[str, Any]:
        record = {"step": step, "commit": self.commit, "project": self.project, **record}
        with self.out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        return record

    def make_project(self, source: int) -> None:
        a, d = self.a, self.d
        name, folder = a.data[0]
        csv_path = a.work / "data" / "autolabel.csv"
        self.gold = autolabel_texts(Path(folder), a.autolabel, csv_path)
        t0 = time.time()
        made = d.call(
            "devtools.deployed_project:throughput_project",
            source=source,
            name="auto-labelling (deployed run)",
            texts_csv=str(csv_path),
            model_dir=a.model_dir,
            engine=a.engine,
            # labelling the gold set and the calibration split never trains: the run scores with the
            # source's ensemble (K as deployed); only an ML user's "Retrain now" would train this project
            knobs={"auto_retrain_share": 0.0},
        )
        self.project = int(made["project"])
        self.k = len(made["adapters"])
        pool = f"{name}'s train split ({len(_rows(Path(folder) / 'train.csv'))} texts) repeated with ' #<copy>'"
        self._write(
            "project", {**made, "k": len(made["adapters"]), "pool": pool, "seconds": round(time.time() - t0, 2)}
        )
        log(f"autolabel: project {self.project}, {made['items']} items ({pool}), K={len(made['adapters'])}")

    def _ml_post(self, path: str, data: dict[str, Any]) -> int:
        """A form of the ML page's auto-labelling panel, posted as a browser does (CSRF from the cookie)."""
        url = f"{self.d.url}/p/{self.project}/ml/autolabel/{path}/"
        headers = {"X-CSRFToken": str(self.ml.cookies["csrftoken"]), "Referer": url}
        return self.ml.post(url, data, headers=headers, timeout=300).status_code

    def calibrate(self, step: str) -> dict[str, Any]:
        """The gold set and the calibration split drawn on the ML page (once: later calibrations reuse
        them), labelled over HTTP by the oracle annotators; the calibration requested over the API and
        waited for (it runs on the gpu queue)."""
        a, d = self.a, self.d
        t0 = time.time()
        record: dict[str, Any] = {}
        if step == "calibration":
            record["draws"] = {
                "gold": self._ml_post("gold", {"per_class": a.autolabel_gold}),
                "split": self._ml_post("split", {"n": a.autolabel_split}),
            }
            record["labelled_over_http"] = label_concurrently(self.sessions, d.url, self.project, self.gold)
            record["t_labelled"] = round(time.time() - t0, 2)
        record["held_out"] = d.call("devtools.deployed_project:held_out_counts", project=self.project)
        response = api(d.url, TOKEN, "POST", f"/api/projects/{self.project}/calibrations/", json={})
        if response.status_code != 201:
            raise RuntimeError(f"calibration refused ({response.status_code}): {response.text[:500]}")
        body = self._wait(f"/api/calibrations/{response.json()['id']}/", ("done", "failed"))
        if body["status"] != "done":
            raise RuntimeError(f"calibration {body['id']} {body['status']}: {body.get('error')}")
        record["seconds"] = round(time.time() - t0, 2)
        record["calibration"] = {k: body.get(k) for k in ("id", "n_items", "n_calibration", "ece_before", "ece_after")}
        record["key"] = {"prompt_hash": body["prompt_hash"], "adapter_set_hash": body["adapter_set_hash"]}
        record["budget"] = body.get("budget")
        record["thresholds"] = [
            {k: r.get(k) for k in ("tier", "label", "threshold", "needed")} for r in body.get("thresholds") or []
        ]
        self._write(step, record)
        log(f"autolabel: {step} {body['id']} done in {record['seconds']} s ({record['held_out']})")
        return body

    def _wait(self, path: str, end: tuple[str, ...]) -> dict[str, Any]:
        deadline = time.monotonic() + self.a.step_timeout
        while time.monotonic() < deadline:
            body: dict[str, Any] = api(self.d.url, TOKEN, "GET", path).json()
            if body["status"] in end:
                return body
            time.sleep(0.5)
        raise RuntimeError(f"{path} not {'/'.join(end)} after {self.a.step_timeout:.0f} s")

    def one_run(self, step: str, *, kill: bool) -> dict[str, Any]:
        """A run requested over the API and polled every 0.5 s to its end (progress, the ETA the app
        shows), with the kill once ``--autolabel-kill-at`` of its items are done."""
        a, d = self.a, self.d
        t0 = time.time()
        response = api(d.url, TOKEN, "POST", f"/api/projects/{self.project}/autolabel/", json={})
        record: dict[str, Any] = {"kill": kill, "t_request": t0, "http": response.status_code}
        if response.status_code != 201:  # a refusal is what the app does (a re-run may be refused)
            record["refused"] = response.text[:1000]
            log(f"autolabel: {step} refused ({response.status_code}): {response.text[:200]}")
            return self._write(step, record)
        run_id = int(response.json()["id"])
        samples: list[list[Any]] = []
        killed: dict[str, Any] = {}
        body: dict[str, Any] = {}
        while time.time() - t0 < a.step_timeout:
            body = api(d.url, TOKEN, "GET", f"/api/autolabel/{run_id}/").json()
            p = body["progress"]
            samples.append(
                [round(time.time() - t0, 2), body["status"], p["items_done"], p["n_items"], body["eta_seconds"]]
            )
            if body["status"] not in ("pending", "running"):
                break
            if kill and not killed and p["n_items"] and p["items_done"] >= a.autolabel_kill_at * p["n_items"]:
                killed = self.kill(run_id)
            time.sleep(0.5)
        t_end = samples[-1][0] if samples else None
        running = next((s[0] for s in samples if s[1] == "running"), None)
        n = body.get("progress", {}).get("n_items", 0)
        record.update(run=run_id, status=body.get("status"), reason=body.get("reason"), t_end=t_end, n_items=n)
        record.update(items_done=body.get("progress", {}).get("items_done"), killed=killed, samples=samples)
        record.update(tiers=body.get("tiers"), dead_letters=body.get("dead_letters"))
        record["prefix_cache_hit_rate"] = body.get("prefix_cache_hit_rate")
        record["app_items_per_second"] = body.get("items_per_second")
        if t_end and n and body.get("status") == "done":
            k = self.k
            record.update(k=k, items_per_s=round(n / t_end, 2), requests_per_s=round(n * k / t_end, 2))
            record["t_running"] = running
            record["eta"] = eta_errors(samples, t_end, n, self.ETA_AT)
        log(
            f"autolabel: {step} {run_id} {body.get('status')}: {n} items in {t_end} s"
            f" ({record.get('items_per_s')} items/s){kill_outcome(killed) if kill else ''}"
        )
        return self._write(step, record)

    def kill(self, run_id: int) -> dict[str, Any]:
        """SIGKILL the gpu worker whose pool child holds a running shard of the run, start a fresh one
        under its name (Throughput.kill_one, on the run's shards)."""
        shards = self.d.call("devtools.deployed_project:autolabel_shards", run_id=run_id)
        running = [s for s in shards if s["status"] == "running" and s["worker"]]
        if not running:
            return {}  # looked again at the next poll
        return self.killer.kill_process(running[0], shards)

    def check(self, first: dict[str, Any]) -> None:
        if not first.get("run"):
            return
        facts = self.d.call("devtools.deployed_project:autolabel_facts", run_id=first["run"])
        budget = self._budget_row()
        record = {"run": first["run"], **facts, "budget_vs_actual": {"estimate": budget, "actual_wall": first["t_end"]}}
        self._write("checks", record)
        log(
            f"autolabel: checks of run {first['run']}: {facts['rows_planned']}/{facts['planned']} planned items"
            f" decided, lost {facts['n_lost']}, twice {facts['duplicate_rows'] + facts['progress_overcount']},"
            f" dead letters {facts['dead_letters']['by_reason']}, decisions {facts['decisions']}"
        )

    def _budget_row(self) -> dict[str, Any] | None:
        """The first calibration's budget for this deployment's gpu workers (the row of the largest
        worker count not above them)."""
        for line in self.out.read_text().splitlines():
            record = json.loads(line)
            if record["step"] == "calibration" and record.get("budget"):
                rows = [r for r in record["budget"].get("rows", []) if r["workers"] <= self.a.gpu_workers]
                if rows:
                    return {
                        **rows[-1],
                        "wall_s": round(rows[-1]["wall_hours"] * 3600, 1),
                        "n": record["budget"]["n_items"],
                    }
        return None

    def prompt_change(self, first: dict[str, Any]) -> None:
        """The instructions edited as the ML page does. The adapters' round froze the prompt they were
        trained under, so a run right after the edit still renders the old one (nothing to re-do); the
        edit reaches auto-labelling with the next production round (here the same ensemble as a new
        finished round frozen after the edit, untrained): a run is then refused until recalibrated, and
        after that must re-score every item still open in the pool, each once."""
        d = self.d
        edited = d.call(
            "devtools.deployed_project:edit_instructions",
            project=self.project,
            instructions="Classify the text into exactly one label. Read the whole text before answering.",
        )
        self._write("prompt_edit", {"edit": edited})
        self.one_run("after_edit", kill=False)
        promoted = d.call("devtools.deployed_project:promote_ensemble", project=self.project)
        refused = self.one_run("drifted", kill=False)
        body = self.calibrate("recalibration")
        key = {"prompt_hash": body["prompt_hash"], "adapter_set_hash": body["adapter_set_hash"]}
        expected = d.call("devtools.deployed_project:autolabel_open", project=self.project, **key)
        again = self.one_run("prompt_change", kill=False)
        facts = d.call("devtools.deployed_project:autolabel_facts", run_id=again["run"]) if again.get("run") else {}
        record = {
            "promoted": promoted,
            "drift_reason": refused.get("reason"),
            "expected": expected,
            "rows_written": facts.get("rows_of_run"),
            "planned": facts.get("planned"),
            "n_lost": facts.get("n_lost"),
            "duplicate_rows": facts.get("duplicate_rows"),
            "dead_letters": (facts.get("dead_letters") or {}).get("n"),
        }
        self._write("prompt_change_checks", record)
        log(f"autolabel: prompt change: {record['rows_written']} rows written, expected {expected['to_score']}")


# -- the run -----------------------------------------------------------------------------------------------


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in ("torch", "transformers", "peft", "vllm", "django", "celery", "numpy"):
        try:
            found[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001 - a version table, not a requirement
            found[name] = f"not importable: {type(exc).__name__}"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    found["commit"] = os.environ.get("RUN_COMMIT") or commit or "unknown"
    return found


def gpu_worker_versions(gpu_env: dict[str, str]) -> str:
    """The versions the gpu workers import (their own path: a GPU machine's carried vLLM site)."""
    code = "\n".join(
        (
            "import torch, transformers, peft",
            "try:\n import vllm; v = vllm.__version__",
            "except Exception as e: v = repr(e)",
            "print(torch.__version__, transformers.__version__, peft.__version__, 'vllm', v)",
        )
    )
    env = {**os.environ, **gpu_env}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False, timeout=300
    )
    return (done.stdout or done.stderr).strip()[-500:]


def wait_for(path: str, timeout: float) -> None:
    if not path:
        return
    log(f"waiting for {path} before starting the gpu workers")
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(2)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(f"signal {signum}")  # `timeout` or a kill: the finally below stops the processes


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    stop_at = time.time() + a.deadline if a.deadline else float("inf")
    run: dict[str, Any] = {"options": {k: str(v) for k, v in vars(a).items()}, "versions": versions()}
    run_path = a.out / "run.json"
    run_path.write_text(json.dumps(run, indent=1))
    deployment = Deployment(
        database_url=a.database_url,
        redis_url=a.redis_url,
        var_dir=a.work / "var",
        log_dir=a.out,
        loop_options=a.loop_options,
    )
    projects = [ProjectRun(name=n, data_dir=Path(p), args=a, deployment=deployment) for n, p in a.data]
    annotators = [f"ann{i}" for i in range(1, a.annotators + 1)]
    try:
        t0 = time.time()
        deployment.run_once("migrate")
        deployment.call(
            "devtools.deployed_project:seed_accounts", annotators=annotators, token=TOKEN, password=PASSWORD
        )
        run["projects"] = {p.name: p.prepare() for p in projects}
        cpu_env = json.loads(a.cpu_env)
        deployment.start("web", env=cpu_env, bind=f"127.0.0.1:{deployment.port}")
        deployment.start("worker", env=cpu_env, concurrency=a.cpu_concurrency, node=f"cpu-{deployment.tag}@%h")
        deployment.wait_web()
        run["t_web_ready"] = time.time() - t0
        ml = login_session(deployment.url, "ml")
        run["imports"] = {p.name: p.import_data(ml) for p in projects}
        wait_for(a.wait_for, a.wait_timeout)
        gpu_env = json.loads(a.gpu_env)
        run["gpu_worker_versions"] = gpu_worker_versions(gpu_env)
        run["t_gpu_workers_started"] = {}
        for i in range(a.gpu_workers):
            deployment.start("gpu-worker", name=f"gpu-worker-{i}", env=gpu_env, node=f"gpu{i}-{deployment.tag}@%h")
            run["t_gpu_workers_started"][f"gpu-worker-{i}"] = time.time()
        run_path.write_text(json.dumps(run, indent=1))
        sessions = [login_session(deployment.url, name) for name in annotators]
        with gpu_monitors(a.out):
            threads = [threading.Thread(target=p.run, args=(sessions, stop_at), name=p.name) for p in projects]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                (a.out / "processes.json").write_text(json.dumps(process_table(deployment), indent=1))
                time.sleep(5)
        for p in projects:
            facts = deployment.call("devtools.deployed_project:round_facts", project=p.project)
            (a.out / f"facts-{p.name}.json").write_text(json.dumps(facts, indent=1))
        if a.after_projects:
            # e.g. the engine parity on the adapters just trained, before the throughput rounds: a short
            # sitting keeps what matters most (session 23 lost parity that ran last)
            log(f"after the projects: {a.after_projects}")
            t1 = time.time()
            rc = subprocess.run(a.after_projects, shell=True, check=False).returncode
            run["after_projects"] = {"command": a.after_projects, "exit": rc, "seconds": round(time.time() - t1, 1)}
            run_path.write_text(json.dumps(run, indent=1))
        if a.throughput:
            with gpu_monitors(a.out, suffix="-throughput"):
                Throughput(deployment=deployment, args=a, gpu_env=gpu_env).run(projects[0].project)
            run["throughput"] = "done"
        if a.autolabel:
            if a.autolabel_wait_for:  # e.g. other GPU work of the sitting: the bulk job's figures alone on the GPU
                t1 = time.time()
                wait_for(a.autolabel_wait_for, a.wait_timeout)
                run["autolabel_waited_s"] = round(time.time() - t1, 1)
            with gpu_monitors(a.out, suffix="-autolabel"):
                Autolabel(
                    deployment=deployment,
                    args=a,
                    gpu_env=gpu_env,
                    sessions=sessions,
                    ml=ml,
                    commit=run["versions"]["commit"],
                ).run(projects[0].project)
            run["autolabel"] = "done"
    except (Exception, SystemExit) as exc:
        run["error"] = f"{type(exc).__name__}: {exc}"[:4000]
        log(f"run failed: {run['error']}\n{traceback.format_exc()}")
    finally:
        run["outcomes"] = {p.name: p.outcome for p in projects}
        run["t_end"] = time.time()
        run_path.write_text(json.dumps(run, indent=1))
        if not a.keep_running:
            deployment.stop_all()
    log(f"outcomes: {run['outcomes']}")
    ok = "error" not in run and all(p.outcome.startswith("done") for p in projects)
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data",
        action="append",
        required=True,
        type=lambda s: tuple(s.split("=", 1)),
        help="NAME=DIR with train.csv and test.csv; repeat for several projects at once",
    )
    p.add_argument("--engine", default="vllm", choices=("hf", "vllm"))
    p.add_argument("--model-dir", default=os.environ.get("LLM_DIR", ""))
    p.add_argument("--labels", type=int, default=1000, help="labels a project collects before it stops")
    p.add_argument("--min-rounds", type=int, default=10)
    p.add_argument("--annotators", type=int, default=8, help="concurrent HTTP annotators (every project)")
    p.add_argument("--gpu-workers", type=int, default=1)
    p.add_argument("--gpu-env", default="{}", help="JSON: the gpu workers' own environment")
    p.add_argument("--cpu-concurrency", type=int, default=2, help="the default queue worker's pool (compose: 2)")
    p.add_argument(
        "--cpu-env",
        default='{"CUDA_VISIBLE_DEVICES": ""}',
        help="JSON: the web's and the CPU worker's own environment (default: no GPU, as their compose containers)",
    )
    p.add_argument("--loop-options", default='{"profile": "gpu"}', help="ALANN_LOOP_OPTIONS of every process")
    p.add_argument("--knobs", default="{}", help="JSON: project fields over the app's defaults")
    p.add_argument("--pool-sample", type=int, default=0, help="pool rows (0: the whole train split)")
    p.add_argument("--test-sample", type=int, default=0, help="test rows (0: the whole test split)")
    p.add_argument("--database-url", default="")
    p.add_argument("--redis-url", required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--wait-for", default="", help="a file that must exist before the gpu workers start")
    p.add_argument("--wait-timeout", type=float, default=1200)
    p.add_argument("--step-timeout", type=float, default=900)
    p.add_argument("--deadline", type=float, default=0, help="seconds after which no new round starts (0: none)")
    p.add_argument("--stop-file", default="", help="once this file exists, no project starts a new round")
    p.add_argument("--keep-running", action="store_true", help="leave the processes up (a later kill test)")
    p.add_argument(
        "--throughput",
        default="",
        help="after the projects: WORKERS:ITEMS,... rounds scoring ITEMS pool items with WORKERS gpu workers"
        " (the first --data project's ensemble, a pool made of every --data set's texts)",
    )
    p.add_argument(
        "--throughput-data",
        action="append",
        default=[],
        type=lambda s: tuple(s.split("=", 1)),
        help="NAME=DIR whose train and test texts make the throughput pool (default: the --data sets)",
    )
    p.add_argument(
        "--after-projects",
        default="",
        help="a shell command run (and waited for) once the projects' facts are written, before --throughput",
    )
    p.add_argument("--kill", action="store_true", help="then one more round like the largest, with a gpu worker killed")
    p.add_argument("--kill-at", type=float, default=0.4, help="share of the items scored when the kill comes")
    p.add_argument(
        "--autolabel",
        type=int,
        default=0,
        help="after the projects (and --throughput): the auto-labelling bulk job over ITEMS items (the first"
        " --data set's train texts repeated with a per-copy suffix) with the first project's ensemble",
    )
    p.add_argument("--autolabel-kill", action="store_true", help="SIGKILL a gpu worker holding a running shard")
    p.add_argument("--autolabel-wait-for", default="", help="a file that must exist before the --autolabel phase")
    p.add_argument("--autolabel-kill-at", type=float, default=0.3, help="share of the run's items done at the kill")
    p.add_argument("--autolabel-gold", type=int, default=10, help="gold items per class (the ML page's draw)")
    p.add_argument("--autolabel-split", type=int, default=500, help="calibration split items (the ML page's draw)")
    a = p.parse_args(argv)
    if not a.model_dir:
        p.error("--model-dir (or LLM_DIR) names the base model's directory")
    return a


if __name__ == "__main__":
    sys.exit(main())
