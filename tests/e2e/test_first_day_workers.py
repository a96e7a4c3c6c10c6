"""Issue 32, problems 4 and 5 in headless Chromium, against a live server and real Celery workers (on a
Redis database this test owns), each worker held at a named step point by the crash tests' stall hook
(devtools/stall.py) so that the browser looks at the page while the work is under way:

4. "An upload made while a round trains sits at 'pending · 0 bytes read' for minutes with no reason": the
   round's worker (default and gpu queues) is held halfway through training; an upload on the Import page
   is read and finished by the io worker while the Rounds page still says the round trains.
5. "evaluation 4.5–9.5 min, with no progress or ETA during evaluation": the worker is held after the first
   chunk of the evaluation; the ML page shows how many of the evaluation's prompts are done, of how many,
   and about how long is left, then the finished round without a reload."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.stall import stall_env
from tests import redis_owner
from tests.e2e.login import log_in
from tests.integration.round_helpers import TEST_OPTIONS, Workers, wait_for, wait_workers
from tests.live_server import LiveServer

pytestmark = [pytest.mark.e2e, pytest.mark.celery, pytest.mark.slow, pytest.mark.data]


# -- run in the live server's database (live.call) ---------------------------------------------------


def trec(*, shared: str, work: str, model_dir: str, pool: int, test: int) -> int:
    from devtools.oracle import trec_project

    return trec_project(Path(shared), Path(work), model_dir=Path(model_dir), pool=pool, test=test).pk


def start_round(*, project: int) -> int:
    from annotate.models import Project
    from annotate.services.rounds import round_request_start
    from devtools.oracle import annotator

    return round_request_start(project=Project.objects.get(pk=project), user=annotator()).id


def round_status(*, round_id: int) -> str:
    from annotate.models import Round

    return str(Round.objects.values_list("status", flat=True).get(id=round_id))


def label_and_retrain(*, project: int) -> int:
    """The oracle labels the batch; "Retrain now"."""
    from annotate.models import Project
    from annotate.services.rounds import round_request_retrain
    from devtools.oracle import annotator, label_batch

    row = Project.objects.get(pk=project)
    done = label_batch(row, annotator())
    round_request_retrain(project=row, user=annotator())
    return done


def imported(*, project: int, prefix: str) -> int:
    from annotate.models import Item

    return Item.objects.filter(project_id=project, text__startswith=prefix).count()


# -----------------------------------------------------------------------------------------------------


@pytest.fixture
def app(tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A live server on a fresh database with one ML user; the test starts its workers (``Workers``)."""
    owned = redis_owner.current()
    owned.flush()
    monkeypatch.setenv("REDIS_URL", owned.url)
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with LiveServer(kind="runserver", purpose="firstdayworkers", database_url="") as live:
        live.call("tests.live_server:create_users", usernames=["maya"], roles=["ml"])
        workers = Workers(live.tmp / "var", owned.url, tmp_path)
        workers.env.update(live.env, REDIS_URL=owned.url, DJANGO_SETTINGS_MODULE="config.settings")
        redis_owner.point_celery_at(owned.url)  # wait_workers pings them from this process
        try:
            yield {"live": live, "workers": workers, "model_dir": str(tiny_llama_dir)}
        finally:
            workers.stop_all()
            owned.flush()


def _page(browser: Any, live: LiveServer) -> Any:
    context = browser.new_context(base_url=live.url, viewport={"width": 1200, "height": 900})
    context.set_default_timeout(60_000)
    return log_in(context, "maya")


def _held(stall_dir: Path, point: str, workers: Workers, timeout: float = 240) -> None:
    try:
        wait_for(lambda: any(stall_dir.glob(f"{point}-*")), timeout, f"a worker held at {point}", poll=0.2)
    except AssertionError:
        raise AssertionError(workers.logs()) from None


def test_problem_4_an_upload_finishes_while_the_round_trains(
    app: dict[str, Any], browser: Any, shared_data: Path, tmp_path: Path, artifacts_dir: Path
) -> None:
    live, workers = app["live"], app["workers"]
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    workers.env.update(stall_env("train", stall_dir), ALANN_TEST_STALL_S="600")  # still training at the end
    workers.start("busy", queues="default,gpu")  # the round's worker: it never reads the io queue
    workers.start("io", queues="io")
    wait_workers(["busy", "io"], timeout=120)
    work = tmp_path / "work"
    work.mkdir()
    project = live.call("tests.e2e.test_first_day_workers:trec", shared=str(shared_data), work=str(work),
                        model_dir=app["model_dir"], pool=60, test=16)  # fmt: skip
    first = live.call("tests.e2e.test_first_day_workers:start_round", project=project)
    wait_for(
        lambda: live.call("tests.e2e.test_first_day_workers:round_status", round_id=first) == "labeling",
        180,
        "round 1's batch",
        poll=1.0,
    )
    assert live.call("tests.e2e.test_first_day_workers:label_and_retrain", project=project) == 8
    _held(stall_dir, "train", workers)

    page = _page(browser, live)
    upload = tmp_path / "second.csv"
    upload.write_text("text\n" + "".join(f"a second upload's row {n}\n" for n in range(50)))
    page.goto(f"/p/{project}/import/")
    page.set_input_files("input[name=file]", str(upload))
    page.get_by_role("button", name="Upload and import").click()
    try:
        page.locator("#import-job .status-done, #import-job .status-failed").wait_for(timeout=60_000)
    except Exception:
        page.screenshot(path=str(artifacts_dir / "problem4-import-waits.png"), full_page=True)
        raise AssertionError(f"the upload did not finish while the round trained\n{workers.logs()}") from None
    job = page.locator("#import-job").inner_text()
    assert "50" in job and "pending" not in job.lower(), job
    assert live.call("tests.e2e.test_first_day_workers:imported", project=project, prefix="a second upload") == 50

    page.goto(f"/p/{project}/ml/")
    assert live.call("tests.e2e.test_first_day_workers:round_status", round_id=first) == "training"
    page.get_by_text("Training", exact=False).first.wait_for()  # the round still trains: it did not wait for it
    page.screenshot(path=str(artifacts_dir / "problem4-import-while-training.png"), full_page=True)


SHOWN = re.compile(r"Evaluation (\d[\d,]*) / (\d[\d,]*) prompts")
# [done, total] of each round's evaluation line on the ML page, as the browser shows it now
EVAL_COUNTS = (
    "[...document.querySelectorAll('.eval-progress .num')]"
    ".map(n => n.textContent.split('/').map(s => parseInt(s.replace(/,/g, ''), 10)))"
)


def test_problem_5_the_ml_page_shows_the_evaluation_advancing_with_what_is_left(
    app: dict[str, Any], browser: Any, shared_data: Path, tmp_path: Path, artifacts_dir: Path
) -> None:
    live, workers = app["live"], app["workers"]
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    # held 40 s after the evaluation's first chunk (128 texts x 2 adapters), then it goes on
    workers.env.update(stall_env("evaluate_progress", stall_dir), ALANN_TEST_STALL_S="40")
    workers.start("w1", queues="default,io,gpu")
    wait_workers(["w1"], timeout=120)
    work = tmp_path / "work"
    work.mkdir()
    project = live.call("tests.e2e.test_first_day_workers:trec", shared=str(shared_data), work=str(work),
                        model_dir=app["model_dir"], pool=300, test=150)  # fmt: skip
    first = live.call("tests.e2e.test_first_day_workers:start_round", project=project)
    wait_for(
        lambda: live.call("tests.e2e.test_first_day_workers:round_status", round_id=first) == "labeling",
        180,
        "round 1's batch",
        poll=1.0,
    )
    assert live.call("tests.e2e.test_first_day_workers:label_and_retrain", project=project) == 8
    page = _page(browser, live)
    page.goto(f"/p/{project}/ml/")  # the ML page, open while the round trains and evaluates
    _held(stall_dir, "evaluate_progress", workers)

    # the page updates itself (no reload) from "0 / N" at the evaluation's start to the held worker's count
    try:
        page.wait_for_function(f"() => {EVAL_COUNTS}.some(([a, b]) => a > 0)", timeout=25_000)
    except Exception:
        raise AssertionError(f"no evaluation progress past 0 on the page: {page.inner_text('body')[:2000]}") from None
    shown = SHOWN.search(page.get_by_text(SHOWN).first.inner_text())
    assert shown is not None
    done, total = (int(g.replace(",", "")) for g in shown.groups())
    assert 0 < done < total, (done, total)  # part of the evaluation, while it is under way
    assert re.search(r"about [^<\n]+ left", page.content()), "no time left shown beside the evaluation's progress"
    page.screenshot(path=str(artifacts_dir / "problem5-evaluation-progress.png"), full_page=True)

    wait_for(
        lambda: live.call("tests.e2e.test_first_day_workers:round_status", round_id=first) == "done",
        180,
        "round 1 to finish after the hold",
        poll=1.0,
    )
    # the page, never reloaded, follows the evaluation to its end
    page.wait_for_function(f"() => {EVAL_COUNTS}.some(([a, b]) => b > 0 && a === b)", timeout=60_000)
