"""What the ML page says about each round, in words: the step it is in with elapsed time and an
estimate of what is left, what holds up a labelling batch (and what to press), a stalled step (no
worker), the headline metrics and the cost of the round."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from annotate.models import Project, Round
from annotate.selectors.progress import BatchStatus, batch_items_finished, batch_status
from predictor.blend import MIN_HELDOUT
from training.eta import eta_seconds

AUTOMATED = (
    Round.Status.PENDING,
    Round.Status.SCORING,
    Round.Status.SELECTING,
    Round.Status.TRAINING,
    Round.Status.EVALUATING,
)
STEP_WORDS = {
    "pending": "waiting for a worker to begin",
    "scoring": "scoring the pool with the model",
    "selecting": "choosing the batch",
    "labeling": "labelling by annotators",
    "training": "training the adapters",
    "evaluating": "evaluating on the test set",
    "done": "done",
    "failed": "failed",
}
# A step that has shown no progress for this long is worth a look: is a worker running at all?
STALL_SECONDS = 90
_WORKERS_TTL = 20  # seconds a worker ping answer is reused (a ping waits up to a second)


def duration(seconds: float | None) -> str:
    """'45 s', '3 min 05 s', '1 h 02 min'."""
    if seconds is None:
        return "—"
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


@dataclass
class RoundView:
    """One row of the round table."""

    row: Round
    step: str
    elapsed: str = ""
    eta: str = ""
    batch: BatchStatus | None = None
    finished: int = 0  # batch items finished (labelled, decided or returned)
    stalled: str = ""
    metrics: list[tuple[str, str]] = field(default_factory=list)
    cost: list[tuple[str, str]] = field(default_factory=list)
    config: list[tuple[str, str]] = field(default_factory=list)  # the frozen configuration, in words
    config_changed: bool = False  # its fingerprint differs from the round before's
    training: str = ""  # how its prod members were trained (warm start or from scratch, and why)


def _elapsed(row: Round, now: datetime) -> float:
    return (now - row.updated_at).total_seconds()


def _eta(done: int, total: int, elapsed: float) -> str:
    if done <= 0 or total <= done:
        return ""
    return duration(elapsed * (total - done) / done)


def _measured_eta(done: int, total: int, unit_seconds: float) -> str:
    """Training and evaluation: what is left at the rate the worker measured (training.eta), so the
    ETA falls while the work advances instead of growing at each adapter's start-up."""
    left = eta_seconds(done=done, total=total, unit_seconds=unit_seconds)
    return "" if left is None else duration(left)


def _workers_alive() -> bool | None:
    """Whether any Celery worker answers a ping (cached). None when the broker cannot be asked."""
    cached = cache.get("alann:workers-alive")
    if cached is not None:
        return bool(cached)
    try:
        from config.celery import app

        answer = app.control.inspect(timeout=1.0).ping()
    except Exception:  # noqa: BLE001 - a broker that is down is reported as "cannot tell"
        return None
    alive = bool(answer)
    cache.set("alann:workers-alive", alive, _WORKERS_TTL)
    return alive


def _stalled(row: Round, elapsed: float) -> str:
    if row.status not in AUTOMATED or elapsed < STALL_SECONDS:
        return ""
    no_progress = (row.status == Round.Status.SCORING and row.items_scored == 0) or (
        row.status == Round.Status.TRAINING and row.train_steps_done == 0
    )
    alive = _workers_alive()
    if alive is False:
        return (
            f"No worker is running: this step has waited {duration(elapsed)}. Start them (make demo does; or "
            "python -m config.processes run worker, and run gpu-worker); the round resumes where it stopped."
        )
    if no_progress or row.status in (Round.Status.PENDING, Round.Status.SELECTING):
        return f"No progress for {duration(elapsed)}: check that a worker is running and its log."
    return ""


def _pct(value: Any) -> str:
    return f"{100 * float(value):.1f} %" if isinstance(value, int | float) else "—"


def metric_lines(metrics: dict[str, Any], *, min_test: int = 0) -> list[tuple[str, str]]:
    """The round's evaluation in words and units (never raw keys). Measured on fewer than ``min_test``
    labelled test items, its accuracy is withheld and the line says how many were missing."""
    if not isinstance(metrics, dict) or "accuracy" not in metrics:
        note = metrics.get("note") if isinstance(metrics, dict) else None
        return [("Note", str(note))] if note else []
    test_n = int(metrics.get("test_n", 0))
    if test_n < min_test:
        withheld = f"withheld: {test_n} labelled test item{'s' * (test_n != 1)}, {min_test - test_n} missing"
        lines = [("Test accuracy", withheld)]
    else:
        lines = [("Test accuracy", _pct(metrics.get("accuracy"))), ("Macro-F1", _pct(metrics.get("macro_f1")))]
    lines += [("Trained on", f"{int(metrics.get('labels', 0))} labels"), ("Test items", f"{test_n}")]
    adapters = metrics.get("adapters") or {}
    if adapters.get("k"):
        lines.append(("Adapters", adapters_sentence(adapters)))
    blend = metrics.get("blend") or {}
    if isinstance(blend.get("weight"), int | float):
        lines.append(("Predictor", blend_sentence(blend)))
    version = (metrics.get("predictor") or {}).get("fingerprint")
    if isinstance(version, str):  # predictor/model.py: the Prediction rows' and auto-labels' model version
        lines.append(("Model version", version[:12]))
    committee = metrics.get("committee") or {}
    if committee.get("mode") == "blend":
        weight = committee.get("weight")
        lines.append(
            (
                "Picked by",
                f"the uncertainty of the blended predictor ({100 * float(weight):.0f} % adapters)"
                if isinstance(weight, int | float)
                else "the adapters and the proxy as equal members (no blend weight fitted yet)",
            )
        )
    arms = metrics.get("arms") or {}
    if "active" in arms and "random" in arms:
        lines.append(
            (
                "Active vs random",
                f"{_pct(arms['active'].get('accuracy'))} vs {_pct(arms['random'].get('accuracy'))} "
                f"at {int(arms['random'].get('labels', 0))} labels each",
            )
        )
    elif comparison_sentence(metrics):
        lines.append(("Comparison arms", comparison_sentence(metrics)))
    return lines


# The deferred comparison arms' state (annotate/services/round_state.py, metrics["comparison"]) in words.
COMPARISON_WORDS = {
    "waiting": "training after the round, once the next round's batch is out (their points then join the curve)",
    "running": "training after the round, now (their points join the curve when done)",
}


def comparison_sentence(metrics: dict[str, Any]) -> str:
    """Where a round's deferred comparison arms are ("" for a round that trained them in the round, or
    measured them): on their way, or why they are missing."""
    comparison = metrics.get("comparison") if isinstance(metrics, dict) else None
    if not isinstance(comparison, dict):
        return ""
    state = comparison.get("state")
    if state == "failed":
        return str(comparison.get("reason") or "not measured")
    return COMPARISON_WORDS.get(str(state), "")


# training.json's "fixed_step" in words (training.graphstep): "eager" is either asked for or what a
# failed CUDA-graph capture falls back to (the worker's log says which).
STEP_MODES = {
    "graph": "each step replayed from one CUDA graph",
    "eager": "fixed-shape steps without a CUDA graph",
    "per-batch": "per-batch steps",
}


def adapters_sentence(adapters: dict[str, Any]) -> str:
    """The round's ensemble in words: members, rank, the adapted layers (and why, when the label count
    widened them), each member's training steps."""
    k = int(adapters["k"])
    rank = f" (rank {adapters['rank']})" if adapters.get("rank") else ""
    layers = [int(n) for n in adapters.get("layers") or []]
    of = f" of {adapters['model_layers']}" if adapters.get("model_layers") else ""
    if not layers:
        where = "on layers not recorded"
    elif layers == [0]:
        where = "on every layer"
    else:
        counts = " / ".join(str(n) if n else "all" for n in layers)
        where = f"on the top {counts}{of} layers" + (" (members differ)" if len(layers) > 1 else "")
    if adapters.get("wide"):
        where += f" (more layers: the project has more than {adapters.get('wide_labels')} labels)"
    if adapters.get("unreadable") and layers:
        where += f" ({adapters['unreadable']} of {k} not readable)"
    steps = adapters.get("steps")
    trained = f"; each trained {int(steps)} steps of {int(adapters.get('batch_size', 0))} labels" if steps else ""
    modes = [STEP_MODES.get(str(m), str(m)) for m in adapters.get("step_modes") or []]
    how = f" ({' / '.join(modes)})" if modes and trained else ""
    return f"{k} LoRA adapter{'s' if k != 1 else ''}{rank} {where}{trained}{how}"


def blend_sentence(blend: dict[str, Any]) -> str:
    """Who predicts and why: the adapters' share of the blend with the embedding proxy, the held-out
    evidence it was fitted on, and each part's accuracy on the test set."""
    weight = float(blend["weight"])
    who = (
        "the adapters alone"
        if weight >= 1.0
        else "the embedding proxy alone"
        if weight <= 0.0
        else f"{100 * weight:.0f} % adapters + {100 * (1 - weight):.0f} % embedding proxy"
    )
    test = blend.get("test_accuracy") or {}
    parts = (
        f". On the test set the adapters alone got {_pct(test.get('llm'))} right, the proxy alone "
        f"{_pct(test.get('proxy'))}"
        if test
        else ""
    )
    return f"{who}, {_blend_why(blend)}{parts}"


def _blend_why(blend: dict[str, Any]) -> str:
    """Why that mix, in words, from the held-out evidence it was fitted on (predictor/blend.py); the
    fit's own terse reason ("w = 1.0 … proxy 5.0 %") only for a record without that evidence."""
    n = blend.get("heldout_n")
    heldout = blend.get("heldout_accuracy") or {}
    if isinstance(n, int) and n < MIN_HELDOUT:
        have = f"only {n} held-out labels exist" if n else "no held-out labels exist yet"
        return f"because {have} and a mix is fitted from {MIN_HELDOUT} on"
    if not isinstance(n, int) or heldout.get("blend") is None:
        return str(blend.get("reason") or "")
    return (
        f"because that mix got the most of {n} held-out labels right ({_pct(heldout.get('blend'))}; "
        f"the adapters alone {_pct(heldout.get('llm'))}, the embedding proxy alone {_pct(heldout.get('proxy'))})"
    )


def cost_lines(cost: dict[str, Any]) -> list[tuple[str, str]]:
    """Seconds per device, tokens scored, human labelling minutes."""
    if not isinstance(cost, dict):
        return []
    by_device: dict[str, float] = {}
    tokens = 0
    for entry in (cost.get("steps") or {}).values():
        if isinstance(entry, dict):
            device = str(entry.get("device", "cpu")).upper()
            by_device[device] = by_device.get(device, 0.0) + float(entry.get("seconds", 0.0))
            tokens += int(entry.get("tokens", 0) or 0)
    lines = [(f"{device} time", duration(seconds)) for device, seconds in sorted(by_device.items())]
    if tokens:
        lines.append(("Tokens scored", f"{tokens:,}"))
    if "human_minutes" in cost:
        lines.append(
            ("Annotator time", f"{float(cost['human_minutes']):.1f} min for {int(cost.get('labels', 0))} labels")
        )
    return lines


def round_views(*, rounds: list[Round], now: datetime | None = None, min_test: int = 0) -> list[RoundView]:
    now = now or timezone.now()
    views = []
    for row in rounds:
        elapsed = _elapsed(row, now)
        view = RoundView(row=row, step=STEP_WORDS.get(row.status, row.status))
        if row.status in (*AUTOMATED, Round.Status.LABELING):
            view.elapsed = duration(elapsed)
        if row.status == Round.Status.SCORING:
            view.eta = _eta(row.items_scored, row.items_to_score, elapsed)
        elif row.status == Round.Status.TRAINING:
            view.eta = _measured_eta(row.train_steps_done, row.train_steps_total, row.unit_seconds)
        elif row.status == Round.Status.EVALUATING:
            view.eta = _measured_eta(row.eval_items_done, row.eval_items_total, row.unit_seconds)
        if row.status == Round.Status.LABELING:
            view.batch = batch_status(round=row)
        view.finished = view.batch.finished if view.batch else batch_items_finished(round=row)
        view.stalled = _stalled(row, elapsed)
        view.metrics = metric_lines(row.metrics or {}, min_test=min_test)
        view.cost = cost_lines(row.cost or {})
        view.config = config_lines(row.config or {})
        view.training = training_sentence(row)
        views.append(view)
    by_number = {v.row.number: v.row.config_fingerprint for v in views}
    for view in views:
        before = by_number.get(view.row.number - 1)
        view.config_changed = bool(before and view.row.config_fingerprint and before != view.row.config_fingerprint)
    return views


def _context_words(max_context: Any) -> str:
    return f"context {max_context} tokens" if max_context else "context fitted to the prompt"


def training_sentence(row: Round) -> str:
    """How the round trained its prod members, and why from scratch when it did ("" before its plan)."""
    from training.ensemble import is_scratch_round

    if row.training_mode == Round.TrainingMode.WARM:
        return "warm start: each adapter went on from the previous round's"
    if row.training_mode != Round.TrainingMode.SCRATCH:
        return ""
    every = int(((row.config or {}).get("loop") or {}).get("consolidate_every") or 0)
    if row.pool_exhausted:
        why = "the final model, the pool being fully labelled"
    elif row.final_requested:
        why = "the final model, as asked"
    elif is_scratch_round(row.number, every):
        why = f"consolidation, every {every} rounds"
    else:
        why = "the first adapters"
    return f"trained from scratch on every label: {why}"


def config_lines(frozen: dict[str, Any]) -> list[tuple[str, str]]:
    """A round's frozen configuration (annotate.loopconfig.freeze_config) in words: what every
    process that worked on the round ran with. Empty for a round that has none yet."""
    loop = frozen.get("loop") if isinstance(frozen, dict) else None
    if not isinstance(loop, dict):
        return []
    train, sel, resc = loop.get("train") or {}, loop.get("selection") or {}, loop.get("rescoring") or {}
    layers = int(train.get("top_layers") or 0)
    steps = f"{train.get('min_steps') or 0}–{train.get('max_steps')}" if train.get("max_steps") else "by epochs"
    engine_options = ", ".join(f"{k}={v}" for k, v in sorted((loop.get("engine_options") or {}).items()))
    return [
        ("Profile", str(frozen.get("profile", "—"))),
        ("Model", Path(str(loop.get("model_dir", ""))).name or "—"),
        ("Engine", str(loop.get("engine")) + (f" ({engine_options})" if engine_options else "")),
        ("Ensemble", f"K={loop.get('k')}, " + _context_words(loop.get("max_context"))),
        (
            "Training",
            f"{steps} steps of {train.get('batch_size')}, lr {train.get('lr')}, "
            + (f"LoRA in the last {layers} layers" if layers else "LoRA in every layer")
            + f", rank {train.get('rank')}"
            + (f"; from scratch every {loop['consolidate_every']} rounds" if loop.get("consolidate_every") else ""),
        ),
        (
            "Selection",
            f"B={sel.get('batch_size')}, {sel.get('uncertainty')}, random share {sel.get('random_share')}, "
            f"cold start {sel.get('cold_start_batches')} × {sel.get('cold_mode')}",
        ),
        ("Candidates", f"{resc['candidate_sample']} a round" if resc.get("candidate_sample") else "the whole pool"),
        ("Predictor", "adapters + proxy blend" if loop.get("blend") == "auto" else "adapters alone"),
    ]


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def next_step_sentence(*, project: Project, batch: BatchStatus | None) -> str:
    """What to press while a round is labelling (used in the refusal of "Start next round")."""
    if batch is None:
        return ""
    auto = project.auto_retrain_share
    if batch.complete:
        if auto > 0:
            return "Its batch is done: training starts by itself in a moment."
        return "Its batch is done: press “Retrain now” to train on it."
    parts = [f"{batch.finished} of {batch.size} batch items are done"]
    if batch.need_labels:
        parts.append(f"{_n(batch.need_labels, 'still needs', 'still need')} annotators")
    if batch.waiting_for_lead:
        parts.append(f"{_n(batch.waiting_for_lead, 'waits', 'wait')} for a lead (Review queues)")
    when = (
        f"It trains by itself once {round(100 * auto)} % of its batch is done, or press “Retrain now”"
        if auto > 0
        else "Press “Retrain now” when enough is labelled (auto-retrain is off in Setup)"
    )
    return "; ".join(parts) + f". {when} to train on the {batch.finished} finished items."


__all__ = [
    "RoundView",
    "comparison_sentence",
    "cost_lines",
    "duration",
    "metric_lines",
    "next_step_sentence",
    "round_views",
]
