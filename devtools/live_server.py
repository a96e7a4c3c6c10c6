"""A real server in a subprocess on loopback, over its own file database, for browser tests, the
concurrency test and the web benchmark.

    with LiveServer(kind="runserver") as live:      # or kind="gunicorn" (no static files)
        ids = live.call("devtools.live_server:seed_labeling_project", name="p", n_items=10, users=["ann"])
        session = login_session(live.url, "ann", live.password)

The database is a temp SQLite file (the settings' defaults: WAL, IMMEDIATE transactions) unless the
test process runs against PostgreSQL (DATABASE_URL=postgres://...), then a dedicated database
``alann_<purpose>_<pid>`` on that server, dropped on exit. ``call`` runs a function in a Django
subprocess against that database (seed data, read it back) and returns its JSON-able result."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlparse, urlunparse

import requests

ROOT = Path(__file__).resolve().parent.parent  # the repository root
PASSWORD = "live-server-pw-1"  # every seeded user's password (one hash computed, shared: logins stay fast)
_RESULT = "@@LIVE_RESULT@@"


def call_in_django(target: str, env: dict[str, str], /, **kwargs: Any) -> Any:
    """Run ``module:function(**kwargs)`` in a Django subprocess with ``env`` (its settings and database)
    and return its JSON-able result."""
    module, function = target.split(":")
    code = (
        "import json, sys, django; django.setup()\n"
        f"from {module} import {function} as f\n"
        f"print({_RESULT!r} + json.dumps(f(**json.loads(sys.argv[1]))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode or _RESULT not in done.stdout:
        raise RuntimeError(f"{target} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.split(_RESULT, 1)[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_url() -> str | None:
    """The PostgreSQL server the test run uses (DATABASE_URL), or None on SQLite."""
    url = os.environ.get("DATABASE_URL", "")
    return url if urlparse(url).scheme in {"postgres", "postgresql", "pgsql"} else None


class LiveServer:
    def __init__(
        self,
        *,
        kind: Literal["runserver", "gunicorn"] = "runserver",
        purpose: str = "live",
        workers: int = 2,
        threads: int = 8,
        debug: bool = True,
        database_url: str | None = None,
        keep_database: bool = False,
    ) -> None:
        self.kind, self.workers, self.threads, self.debug = kind, workers, threads, debug
        self.password = PASSWORD
        self.tmp = Path(tempfile.mkdtemp(prefix=f"alann-{purpose}-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.tmp / "server.log"
        self._pg_admin: str | None = None
        self._keep_database = keep_database
        self.database_url = database_url if database_url is not None else self._database_for(purpose)
        self._proc: subprocess.Popen[bytes] | None = None

    def _database_for(self, purpose: str) -> str:
        base = postgres_url()
        if base is None:
            return ""  # the settings' SQLite file under VAR_DIR
        parsed = urlparse(base)
        name = f"alann_{purpose}_{os.getpid()}"
        self._pg_admin = urlunparse(parsed._replace(path="/postgres"))
        self._pg_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        return urlunparse(parsed._replace(path=f"/{name}"))

    def _pg_execute(self, *statements: str) -> None:
        import psycopg

        assert self._pg_admin is not None
        with psycopg.connect(self._pg_admin, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_ALLOW_ASYNC"))}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DEBUG="1" if self.debug else "0",
            SECRET_KEY=env.get("SECRET_KEY") or "live-server-secret-key-for-tests-only-0123456789",
            VAR_DIR=str(self.tmp / "var"),
            PYTHONPATH=str(ROOT),
            LOG_LEVEL="WARNING",
        )
        env.pop("DATABASE_URL", None)
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        return env

    def manage(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def call(self, target: str, /, **kwargs: Any) -> Any:
        """Run ``module:function(**kwargs)`` in a Django subprocess on this server's database."""
        return call_in_django(target, self.env, **kwargs)

    def start(self) -> LiveServer:
        (self.tmp / "var").mkdir(exist_ok=True)
        self.manage("migrate", "--noinput")
        if self.kind == "gunicorn":
            cmd = [
                sys.executable, "-m", "gunicorn", "config.wsgi:application",
                "--bind", f"127.0.0.1:{self.port}", "--worker-class", "gthread",
                "--workers", str(self.workers), "--threads", str(self.threads),
                "--backlog", "2048", "--timeout", "120", "--log-level", "warning",
            ]  # fmt: skip
        else:  # runserver: threaded, serves static files (htmx) with DEBUG on
            cmd = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"]
        log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"live server exited ({self._proc.returncode}):\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/accounts/login/", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"live server not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)  # the server's own process group (gunicorn workers too)
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        self._proc = None
        if self._pg_admin is not None and not self._keep_database:
            name = urlparse(self.database_url).path.lstrip("/")
            self._pg_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LiveServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def login_session(base_url: str, username: str, password: str = PASSWORD) -> requests.Session:
    """A requests session logged in through the login form (CSRF token from the form)."""
    session = requests.Session()
    page = session.get(f"{base_url}/accounts/login/", timeout=30)
    token = _CSRF_INPUT.search(page.text)
    assert token, "no CSRF token on the login page"
    response = session.post(
        f"{base_url}/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token.group(1), "next": "/"},
        headers={"Referer": f"{base_url}/accounts/login/"},
        allow_redirects=False,
        timeout=60,
    )
    assert response.status_code == 302, f"login of {username} failed ({response.status_code})"
    return session


# --- functions run inside the server's environment through LiveServer.call -----------------------


def create_users(*, usernames: list[str], roles: list[str]) -> dict[str, int]:
    """Users with `roles` (groups) and the shared PASSWORD; existing ones are kept. {username: id}."""
    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import Group, User

    encoded = make_password(PASSWORD)
    groups = [Group.objects.get_or_create(name=role)[0] for role in roles]
    ids = {}
    for username in usernames:
        user, created = User.objects.get_or_create(username=username, defaults={"password": encoded})
        if created:
            user.groups.add(*groups)
        ids[username] = user.pk
    return ids


def seed_labeling_project(
    *,
    name: str,
    n_items: int,
    labels: list[str] | None = None,
    n_overlap: int = 0,
    overlap_annotators: int = 2,
    n_test: int = 0,
    n_pool: int = 0,
    users: list[str] | None = None,
    guidelines: str = "",
) -> dict[str, Any]:
    """A project with `labels`, a round in "labeling" whose batch is `n_items` items (the first
    `n_overlap` need `overlap_annotators` labels), `n_test` test-set items, `n_pool` more pool items
    outside the batch, and annotator `users`."""
    from annotate.models import BatchItem, Item, Round
    from annotate.services.projects import LabelInput, project_create

    labels = labels or ["positive", "negative", "neutral"]
    project = project_create(
        name=name,
        labels=[LabelInput(label, chr(ord("A") + i)) for i, label in enumerate(labels)],
        guidelines=guidelines,
        overlap_annotators=overlap_annotators,
        overlap_share=0.1 if n_overlap else 0.0,
    )
    items = Item.objects.bulk_create(
        Item(
            project=project,
            external_id=f"{name}-{i}",
            text=f"Item {i} of {name}: some text to label.",
            text_hash=f"{name}-{i}",
            is_test=n_items <= i < n_items + n_test,
            required_labels=overlap_annotators if i < n_overlap else 1,
        )
        for i in range(n_items + n_test + n_pool)
    )
    labeling = Round.objects.create(project=project, number=1, status=Round.Status.LABELING)
    BatchItem.objects.bulk_create(
        BatchItem(round=labeling, item=item, source="random", rank=rank) for rank, item in enumerate(items[:n_items])
    )
    user_ids = create_users(usernames=users or [], roles=["annotator"])
    return {
        "project": project.pk,
        "labels": {label.name: label.pk for label in project.labels.all()},
        "items": [item.pk for item in items[:n_items]],
        "test_items": [item.pk for item in items[n_items : n_items + n_test]],
        "users": user_ids,
    }


def labeling_state(*, project: int) -> dict[str, Any]:
    """Annotations, skips and leases of a project, as plain lists (for assertions)."""
    from annotate.models import Annotation, Lease, Skip

    annotations = Annotation.objects.filter(item__project_id=project).order_by("id")
    return {
        "annotations": [
            {"item": a.item_id, "user": a.annotator.username, "label": a.label.name, "revisions": a.revisions}
            for a in annotations.select_related("annotator", "label")
        ],
        "skips": [
            {"item": s.item_id, "user": s.annotator.username, "reason": s.reason}
            for s in Skip.objects.filter(item__project_id=project).select_related("annotator")
        ],
        "leases": list(Lease.objects.filter(item__project_id=project).values_list("item_id", "annotator__username")),
    }
