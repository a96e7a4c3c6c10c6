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
        pid = int(running[0]["worker"].rpartition(":")[2])
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
        log(f"throughput: SIGKILLed {name} (pool child {pid}, shard {running[0]['shard']}); a fresh one started")
        return {
            "worker": name,
            "pid": pid,
            "shard": running[0]["shard"],
            "at": at,
            "started": started,
            "shards_before": shards,
        }

    def _write(self, record: dict[str, Any]) -> None:
        self.rounds.append(record)
        with self.out.open("a") as f:
            f.write(json.dumps(record) + "\n")


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
    a = p.parse_args(argv)
    if not a.model_dir:
        p.error("--model-dir (or LLM_DIR) names the base model's directory")
    return a


if __name__ == "__main__":
    sys.exit(main())
