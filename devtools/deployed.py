"""The deployment's processes on one host, as compose starts them (config/processes.py is the one
definition), with oracle annotators that label through HTTP only — for the multi-process end-to-end
test (tests/integration/test_deployed_shape.py) and, with the vLLM engine and the GPU profile, the same
loop on a GPU machine.

    with own_postgres_database(server) as url:
        deployment = Deployment(database_url=url, redis_url=..., var_dir=..., log_dir=..., loop_options=...)
        deployment.run_once("migrate"); ...; deployment.start_services(gpu_worker_env={...})
        records = run_rounds(deployment, project=..., rounds=3, annotators=[...], gold=...)

Nothing here imports Django: the processes do, and ``call`` runs a function inside their environment."""

from __future__ import annotations

import contextlib
import csv
import html
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import requests

from config import processes
from devtools.live_server import ROOT, call_in_django, free_port

ITEM = re.compile(r'<input type="hidden" name="item" value="(\d+)">')
TEXT = re.compile(r'<article class="item-text"[^>]*>(.*?)</article>', re.S)
BUTTON = re.compile(
    r'<button type="submit" name="label" value="(\d+)".*?>\s*(?:<kbd>[^<]*</kbd>\s*)?([^<]+?)</button>', re.S
)
# a project with more labels than buttons (issue 32: more than nine) offers the rest in the "Other labels" form,
# a search box with JavaScript and a plain select without: the oracle posts that form as a browser without JS
MORE_FORM = re.compile(r'<form class="label-more".*?</form>', re.S)
OPTION = re.compile(r'<option value="(\d+)"[^>]*>([^<]+)</option>')


def label_values(page: str) -> dict[str, str]:
    """label name → the value the annotate page posts for it: its buttons, then its "Other labels" select."""
    values = {html.unescape(name).strip(): value for value, name in BUTTON.findall(page)}
    more = MORE_FORM.search(page)
    if more is not None:
        for value, name in OPTION.findall(more.group(0)):
            values.setdefault(html.unescape(name).strip(), value)
    return values


def stop_groups(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process's own group (a Celery worker's prefork children too), SIGKILL after 20 s;
    ``procs`` is emptied."""
    for name in list(procs):
        proc = procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class Deployment:
    """The compose services as processes on this host (own process groups, logs under ``log_dir``)."""

    def __init__(
        self, *, database_url: str, redis_url: str, var_dir: Path, log_dir: Path, loop_options: str = ""
    ) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tag = uuid.uuid4().hex[:8]  # node names of this deployment's workers
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_ALLOW_ASYNC"))}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DEBUG="1",
            REDIS_URL=redis_url,
            VAR_DIR=str(var_dir),
            ALANN_LOOP_OPTIONS=loop_options,  # the deployment's options: the web and CPU worker read them
            # the repository first, then whatever the caller's path holds (a GPU machine's carried site)
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            LOG_LEVEL="INFO",
        )
        env.pop("DATABASE_URL", None)
        if database_url:
            env["DATABASE_URL"] = database_url
        self.env = env

    def run_once(self, role: str) -> None:
        done = subprocess.run(
            processes.process_argv(role), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=600
        )
        if done.returncode:
            raise RuntimeError(f"{role} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")

    def start(self, role: str, *, name: str = "", env: dict[str, str] | None = None, **kwargs: Any) -> None:
        """Start ``role`` (config.processes) as process ``name`` (default: the role's own name)."""
        name = name or role
        log = (self.log_dir / f"{name}.log").open("ab")
        full_env = {**self.env, **processes.process_env(role), **(env or {})}
        self.procs[name] = subprocess.Popen(
            processes.process_argv(role, **kwargs),
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_services(self, *, gpu_worker_env: dict[str, str] | None = None, gpu_workers: int = 1) -> None:
        """web (gunicorn), a CPU worker on the default and io queues, an io worker (imports), ``gpu_workers``
        workers on the gpu queue: compose's services."""
        self.start("web", bind=f"127.0.0.1:{self.port}")
        self.start("worker", concurrency=1, node=f"cpu-{self.tag}@%h")
        self.start("io-worker", node=f"io-{self.tag}@%h")
        for i in range(gpu_workers):
            self.start("gpu-worker", name=f"gpu-worker-{i}", env=gpu_worker_env, node=f"gpu{i}-{self.tag}@%h")
        self.wait_web()

    def wait_web(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/accounts/login/", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"web not ready after {timeout:.0f} s\n{self.logs()}")

    def call(self, target: str, /, **kwargs: Any) -> Any:
        return call_in_django(target, self.env, **kwargs)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def stop_all(self) -> None:
        stop_groups(self.procs)

    def logs(self, chars: int = 3000) -> str:
        tails = (f"== {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(self.log_dir.glob("*.log")))
        return "\n".join(tails)


@contextlib.contextmanager
def own_postgres_database(server: str) -> Iterator[str]:
    """A database of the caller's own (a unique name) on the PostgreSQL server ``server``, dropped after."""
    import psycopg

    parsed = urlparse(server)
    name = f"alann_deployed_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield urlunparse(parsed._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


# -- the oracle annotators: HTTP only ---------------------------------------------------------------


def gold_by_text(pool_csv: Path) -> dict[str, str]:
    """text → label of the data the project was imported from: what the oracle knows."""
    with pool_csv.open() as f:
        return {row["text"]: row["label"] for row in csv.DictReader(f)}


def label_over_http(session: requests.Session, base: str, project: int, gold: dict[str, str]) -> int:
    """Label every item the annotate page offers this annotator with its gold label, the way a browser
    posts the form (htmx partials); the number labelled."""
    url = f"{base}/p/{project}/annotate/"
    headers = {"HX-Request": "true", "X-CSRFToken": str(session.cookies["csrftoken"]), "Referer": url}
    page = session.get(url, timeout=60)
    page.raise_for_status()
    done = 0
    while match := ITEM.search(page.text):
        shown = TEXT.search(page.text)
        if shown is None:
            raise AssertionError("the annotate page shows no item text")
        text = html.unescape(shown.group(1).replace("<br>", "\n")).strip()
        labels = label_values(page.text)
        if gold[text] not in labels:
            raise AssertionError(f"the annotate page offers no label {gold[text]!r} ({len(labels)} offered)")
        data = {"item": match.group(1), "label": labels[gold[text]], "queue": "batch"}
        page = session.post(f"{base}/p/{project}/annotate/label/", data, headers=headers, timeout=60)
        page.raise_for_status()
        done += 1
    return done


def label_concurrently(sessions: list[requests.Session], base: str, project: int, gold: dict[str, str]) -> int:
    """Every annotator labels at once (one thread each) until none is offered an item; labels in all."""
    counts = [0] * len(sessions)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            counts[i] = label_over_http(sessions[i], base, project, gold)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


# -- rounds through the REST API -------------------------------------------------------------------------


def api(base: str, token: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, f"{base}{path}", headers={"Authorization": f"Token {token}"}, timeout=60, **kwargs)


def wait_round(deployment: Deployment, token: str, round_id: int, statuses: set[str], timeout: float) -> dict[str, Any]:
    """Poll GET /api/rounds/<id>/ until the round is in one of ``statuses``; a failed round raises."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = api(deployment.url, token, "GET", f"/api/rounds/{round_id}/").json()
        if body["status"] in statuses:
            return body
        if body["status"] == "failed":
            raise AssertionError(f"round {body['number']} failed: {body['failure_reason']}\n{deployment.logs()}")
        time.sleep(0.5)
    raise AssertionError(f"round {round_id} still {body.get('status')} after {timeout:.0f} s\n{deployment.logs()}")


def run_rounds(
    deployment: Deployment,
    *,
    project: int,
    token: str,
    rounds: int,
    sessions: list[requests.Session],
    gold: dict[str, str],
    step_timeout: float = 300,
) -> list[dict[str, Any]]:
    """``rounds`` rounds, each started through the API, its batch labelled over HTTP by every annotator
    at once; the project trains by itself once a batch is done (auto_retrain_share). One record per
    round: the API's final body, the labels the annotators gave and the seconds spent waiting for
    the machine (start → labelling, labelling done → done) and for the annotators."""
    records = []
    for _ in range(rounds):
        started = time.monotonic()
        response = api(deployment.url, token, "POST", f"/api/projects/{project}/rounds/")
        if response.status_code != 201:
            raise AssertionError(f"round start refused ({response.status_code}): {response.text}")
        round_id = response.json()["id"]
        wait_round(deployment, token, round_id, {"labeling"}, step_timeout)
        to_label = time.monotonic()
        labelled = label_concurrently(sessions, deployment.url, project, gold)
        labelled_at = time.monotonic()
        body = wait_round(deployment, token, round_id, {"done"}, step_timeout)
        finished = time.monotonic()
        records.append(
            {
                **body,
                "labelled_over_http": labelled,
                "seconds_until_labeling": round(to_label - started, 2),
                "seconds_labeling": round(labelled_at - to_label, 2),
                "seconds_after_labeling": round(finished - labelled_at, 2),
            }
        )
    return records


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
