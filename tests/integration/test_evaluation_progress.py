"""Issue 32, problem 5: "evaluation 4.5–9.5 min, with no progress or ETA during evaluation". The
evaluation now scores in chunks and counts its prompts on the round; the ML page, read while it runs,
shows a progress bar with counts and what is left."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotate.models import Round
from annotate.services import evaluation
from annotate.services.accounts import user_create
from annotate.services.rounds import round_request_start, round_run_sync
from tests.integration.round_helpers import TEST_OPTIONS, annotator, label_batch, trec_project, use_loop_options

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]

SHOWN = re.compile(r"Evaluation <span class=\"num\">(\d+) / (\d+)</span> prompts")


def test_the_ml_page_shows_the_evaluation_advancing_with_an_eta(
    shared_data: Path, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    use_loop_options(monkeypatch, settings, TEST_OPTIONS)
    monkeypatch.setattr(evaluation, "EVAL_CHUNK", 8)  # many chunks on the tiny test set
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    row = round_run_sync(round_id=round_request_start(project=project, user=None, run_here=True).id)
    assert label_batch(project, annotator()) == 8
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    pages: list[str] = []
    make_engine = evaluation.ensemble.make_engine

    class Watched:
        """The real engine; after each of its calls the ML page is read, as a user polling it would."""

        def __init__(self, engine: Any) -> None:
            self.engine = engine

        def score(self, renderer: Any, texts: Any, adapters: Any) -> Any:
            result = self.engine.score(renderer, texts, adapters)
            if Round.objects.get(id=row.id).status == Round.Status.EVALUATING:
                pages.append(client.get(reverse("ml_home", args=[project.pk])).content.decode())
            return result

    monkeypatch.setattr(evaluation.ensemble, "make_engine", lambda config: Watched(make_engine(config)))
    row = round_run_sync(round_id=row.id)
    assert row.status == "done", row.failure_reason

    shown = [tuple(map(int, m.groups())) for page in pages if (m := SHOWN.search(page))]
    assert shown, "no evaluation progress on the page while it evaluated"
    totals = {total for _, total in shown}
    assert len(totals) == 1 and totals.pop() == row.eval_items_total > 0
    done = [d for d, _ in shown]
    assert done == sorted(done) and 0 < done[-1] < row.eval_items_total  # it advanced, page by page
    assert any(re.search(r"about [^<]+ left", page) for page in pages if "Evaluation <span" in page)
    assert row.eval_items_done == row.eval_items_total  # every prompt counted by the end
