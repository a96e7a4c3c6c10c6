"""What the ML page says about a round: elapsed time and an estimate of what is left, a notice when
a step waits on a worker that is not there, the cost of a round and its metrics in words."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate.models import Round
from annotate.selectors.round_display import cost_lines, duration, metric_lines, round_views
from annotate.services.accounts import user_create
from annotate.services.projects import LabelInput, project_create

pytestmark = pytest.mark.django_db


def test_durations_read_like_a_clock() -> None:
    assert [duration(s) for s in (4.4, 65, 3725, None)] == ["4 s", "1 min 05 s", "1 h 02 min", "—"]


def test_elapsed_and_estimate_of_a_scoring_and_a_training_step() -> None:
    project = project_create(name="eta", labels=[LabelInput("a", "A"), LabelInput("b", "B")])
    now = timezone.now()
    scoring = Round.objects.create(project=project, number=1, status="scoring", items_to_score=400, items_scored=100)
    # training: 10 steps left at the 2.0 s a step the worker measured (training.eta)
    training = Round.objects.create(
        project=project, number=2, status="training", train_steps_total=30, train_steps_done=20, unit_seconds=2.0
    )
    Round.objects.filter(pk=scoring.pk).update(updated_at=now - timedelta(seconds=60))
    Round.objects.filter(pk=training.pk).update(updated_at=now - timedelta(seconds=40))
    views = {v.row.number: v for v in round_views(rounds=list(Round.objects.order_by("number")), now=now)}
    assert (views[1].elapsed, views[1].eta) == ("1 min 00 s", "3 min 00 s")  # 100 of 400 in a minute
    assert (views[2].elapsed, views[2].eta) == ("40 s", "20 s")
    assert not views[1].stalled and not views[2].stalled  # both under the stall limit


def test_a_step_without_a_worker_is_noticed_on_the_ml_page() -> None:
    """No worker consumes this run's Redis database here: the ping gets no answer."""
    cache.delete("alann:workers-alive")
    project = project_create(name="stalled", labels=[LabelInput("a", "A"), LabelInput("b", "B")])
    row = Round.objects.create(project=project, number=1, status="training", train_steps_total=20, train_steps_done=1)
    Round.objects.filter(pk=row.pk).update(updated_at=timezone.now() - timedelta(minutes=7))
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    page = client.get(reverse("ml_home", args=[project.pk])).content.decode()
    assert "No worker is running: this step has waited 7 min" in page
    assert "the round resumes where it stopped" in page


def test_cost_and_metrics_in_words_and_units() -> None:
    cost = {
        "steps": {
            "scoring": {"seconds": 12.5, "device": "gpu", "tokens": 120000},
            "training": {"seconds": 70.6, "device": "gpu"},
            "selecting": {"seconds": 2.0, "device": "cpu"},
        },
        "human_minutes": 12.25,
        "labels": 50,
    }
    assert cost_lines(cost) == [
        ("CPU time", "2 s"),
        ("GPU time", "1 min 23 s"),
        ("Tokens scored", "120,000"),
        ("Annotator time", "12.2 min for 50 labels"),
    ]
    metrics = {
        "accuracy": 0.8123,
        "macro_f1": 0.7,
        "labels": 40,
        "test_n": 200,
        "kappa_model_human_n": 0,
        "arms": {"active": {"accuracy": 0.8, "labels": 20}, "random": {"accuracy": 0.75, "labels": 20}},
    }
    lines = dict(metric_lines(metrics))
    assert lines["Test accuracy"] == "81.2 %" and lines["Trained on"] == "40 labels"
    assert lines["Active vs random"] == "80.0 % vs 75.0 % at 20 labels each"
    assert not any("_" in name for name in lines)  # no raw keys such as kappa_model_human_n
    assert "Predictor" not in lines  # no blend recorded (blend off, or a round from before it)
    metrics["blend"] = {
        "weight": 0.7,
        "heldout_n": 150,
        "heldout_accuracy": {"llm": 0.8, "proxy": 0.76, "blend": 0.84},
        "reason": "w = 0.7 on the adapters predicted 150 held-out labels best (84.0 % vs 80.0 %, 76.0 %)",
        "test_accuracy": {"llm": 0.79, "proxy": 0.74, "blend": 0.8123},
    }
    predictor = dict(metric_lines(metrics))["Predictor"]
    # In words (issue 32, problem 11), not the fit's terse "w = 0.7 … 76.0 %".
    assert predictor == (
        "70 % adapters + 30 % embedding proxy, because that mix got the most of 150 held-out labels right "
        "(84.0 %; the adapters alone 80.0 %, the embedding proxy alone 76.0 %). On the test set the adapters "
        "alone got 79.0 % right, the proxy alone 74.0 %"
    )
    metrics["blend"] = {"weight": 1.0, "heldout_n": 0, "reason": "no held-out labels yet: adapters alone"}
    assert dict(metric_lines(metrics))["Predictor"] == (
        "the adapters alone, because no held-out labels exist yet and a mix is fitted from 10 on"
    )
    assert "Picked by" not in dict(metric_lines(metrics))  # committee "members", the default: nothing to say
    metrics["committee"] = {"mode": "blend", "weight": 0.3}
    assert dict(metric_lines(metrics))["Picked by"] == "the uncertainty of the blended predictor (30 % adapters)"
    metrics["committee"] = {"mode": "blend", "weight": None}
    assert dict(metric_lines(metrics))["Picked by"].endswith("as equal members (no blend weight fitted yet)")


def test_the_adapters_line_says_what_was_trained_and_why_more_layers() -> None:
    metrics: dict = {"accuracy": 0.7, "labels": 40, "test_n": 100}
    assert "Adapters" not in dict(metric_lines(metrics))  # a round from before the line existed
    eight = {"k": 2, "rank": 8, "layers": [8], "model_layers": 30, "steps": 48, "batch_size": 32, "wide": False}
    metrics["adapters"] = eight
    assert dict(metric_lines(metrics))["Adapters"] == (
        "2 LoRA adapters (rank 8) on the top 8 of 30 layers; each trained 48 steps of 32 labels"
    )
    metrics["adapters"] = eight | {"layers": [16], "wide": True, "wide_labels": 50}
    assert dict(metric_lines(metrics))["Adapters"] == (
        "2 LoRA adapters (rank 8) on the top 16 of 30 layers (more layers: the project has more than 50 labels);"
        " each trained 48 steps of 32 labels"
    )
    metrics["adapters"] = eight | {"layers": [8, 16]}  # K raised later: the new member got another shape
    assert "on the top 8 / 16 of 30 layers (members differ)" in dict(metric_lines(metrics))["Adapters"]
    metrics["adapters"] = {"k": 1, "rank": 8, "layers": [0], "steps": 12, "batch_size": 4, "wide": False}
    assert dict(metric_lines(metrics))["Adapters"] == (
        "1 LoRA adapter (rank 8) on every layer; each trained 12 steps of 4 labels"
    )
    metrics["adapters"] = eight | {"step_modes": ["graph"]}
    assert dict(metric_lines(metrics))["Adapters"] == (
        "2 LoRA adapters (rank 8) on the top 8 of 30 layers; each trained 48 steps of 32 labels"
        " (each step replayed from one CUDA graph)"
    )
    metrics["adapters"] = eight | {"step_modes": ["eager", "graph"]}  # one member's capture failed
    assert dict(metric_lines(metrics))["Adapters"].endswith(
        "(fixed-shape steps without a CUDA graph / each step replayed from one CUDA graph)"
    )
    metrics["adapters"] = {"k": 2, "layers": [], "unreadable": 2, "steps": None}
    assert dict(metric_lines(metrics))["Adapters"] == "2 LoRA adapters on layers not recorded"
