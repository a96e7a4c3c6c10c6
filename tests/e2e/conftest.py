"""Browser fixtures: a real server in a subprocess (tests.live_server.LiveServer, runserver: it serves
the static files) and headless Debian Chromium driven by Playwright's sync API (never a downloaded
browser). `user_page("name", roles=[...])` logs a user in through the login form and returns the page.

    def test_x(live_app, user_page):
        seeded = live_app.call("tests.live_server:seed_labeling_project", name="x", n_items=5)
        page = user_page("ann")                      # an annotator, logged in
        page.goto(f"/p/{seeded['project']}/annotate/")  # base_url is the live server

Pages of a failed test are screenshotted into test-artifacts/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from devtools.deployed import stop_groups
from tests.e2e.login import log_in
from tests.live_server import ROOT, LiveServer
from tests.prerequisites import missing_prerequisite

# Playwright's sync API runs an event loop in this thread; ORM calls from here would trip Django's check.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")  # Debian's; CHROMIUM= to point elsewhere
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="package")
def live_app() -> Iterator[LiveServer]:
    """One server (and database) for the browser tests of this package; tests seed their own projects."""
    with LiveServer(kind="runserver", purpose="e2e") as live:
        yield live


@pytest.fixture(scope="module")
def app_with_worker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, Path]]:
    """A live server of the module's own and one Celery worker on it (all queues): both inherit this
    run's own Redis database (REDIS_URL, claimed by tests/conftest.py). Yields the server and the
    directory holding the worker's log (``worker.log``)."""
    from tests.integration.round_helpers import TEST_OPTIONS

    name = request.module.__name__.rpartition(".")[2]
    logs = tmp_path_factory.mktemp(name)
    with LiveServer(kind="runserver", purpose=name) as live:
        env = {**live.env, "ALANN_LOOP_OPTIONS": TEST_OPTIONS, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "default,io,gpu", "-c", "1"]
        cmd += ["--pool", "prefork", "--prefetch-multiplier", "1", "-n", f"{name}@%h", "--loglevel", "INFO"]
        log = (logs / "worker.log").open("ab")
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            yield live, logs
        finally:
            stop_groups({"worker": worker})


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        missing_prerequisite(f"{CHROMIUM} not installed (make browser)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_prerequisite("playwright is not installed (make install)")

    playwright = sync_playwright().start()
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()
    playwright.stop()


UserPage = Callable[..., Any]


@pytest.fixture
def user_page(
    browser: Any, live_app: LiveServer, artifacts_dir: Path, request: pytest.FixtureRequest
) -> Iterator[UserPage]:
    """Factory: ``user_page(username, roles=("annotator",), javascript=True)`` → a logged-in Page."""
    opened: list[tuple[str, Any, Any]] = []

    def login(username: str, *, roles: Sequence[str] = ("annotator",), javascript: bool = True) -> Any:
        live_app.call("tests.live_server:create_users", usernames=[username], roles=list(roles))
        context = browser.new_context(
            base_url=live_app.url, java_script_enabled=javascript, viewport={"width": 1200, "height": 900}
        )
        context.set_default_timeout(15_000)
        page = log_in(context, username)
        opened.append((username, context, page))
        return page

    yield login
    failed = getattr(request.node, "report_call", None)
    for username, context, page in opened:
        if failed is not None and failed.failed:
            page.screenshot(path=str(artifacts_dir / f"{request.node.name}-{username}-failed.png"), full_page=True)
        context.close()
