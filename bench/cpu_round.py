"""A default CPU project's round at 200 labels, timed step by step (issue 32, problem 5: ≤ 90 s on
the 2-core machine).

    python bench/cpu_round.py [--data ../shared/data] [--labels 200] [--pool 5452] [--out bench/raw/<today>] \
        [--loop-options '{"arms_every": 2}' --tag arms]

The project is what the setup page creates on a CPU deployment: the model's defaults with the CPU
profile's starting values over them (annotate.loopconfig.NEW_PROJECT_DEFAULTS: K=1, batch 20, one
cold-start round, 300 scored candidates) and the CPU loop profile (top 4 layers, 48 steps of 16, the
comparison arms every 5th round), on the whole TREC train split with the default test set (500 items,
gold labels as final labels) and stop set. Round 1 is a cold start whose batch is widened to
``labels - batch`` items (untimed: it only brings the project to the label count), labelled by an
oracle (the CSV's labels through the labeling service), trained and evaluated. Round 2 is the timed
one, with the default batch: score the candidates, select, (the oracle labels the batch: not timed),
train on ``labels`` labels, evaluate. Every step runs in this process (the synchronous driver,
``round_run_sync``), as the one CPU worker would run it.

An arms round (``--loop-options '{"arms_every": 2}'``) trains and evaluates the comparison adapters
after the round with the CPU profile's ``arms_timing`` "deferred" (a worker does so while the next batch
is labelled): the round's time is its critical path (score, select, train and evaluate the prod
adapters), and the deferred arms are timed apart, after it (``round_compare_sync``): ``arms_deferred``
in the raw output. With ``"arms_timing": "in_round"`` the round trains and evaluates them itself, as before.

Prints a table (phase, seconds) and writes the raw numbers with the git commit and the options to
OUT/cpu-round-<commit>.json. Runs in a throwaway VAR_DIR with its own SQLite database.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="alann-cpu-round-"))
os.environ.setdefault("MODELS_DIR", str(ROOT / "var" / "models"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The deployment's default (the CPU profile) unless --loop-options says otherwise (set before Django reads it).
os.environ["ALANN_LOOP_OPTIONS"] = next(
    (sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--loop-options"), "{}"
)

# (status the step runs until, the phase's name): the round flow's order (annotate/services/rounds.py)
BEFORE_LABELING = (("scoring", "plan"), ("selecting", "score"), ("labeling", "select"))
AFTER_LABELING = (("evaluating", "train"), ("done", "evaluate"))


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return done.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def run_until_labeling(round_id: int, phases: list[tuple[int, str, float]]) -> Any:
    from annotate.services import rounds

    row = None
    for until, phase in BEFORE_LABELING:
        t0 = time.perf_counter()
        row = rounds.round_run_sync(round_id=round_id, until=(until, "selecting", "labeling", "failed"))
        phases.append((row.number, phase, time.perf_counter() - t0))
        if row.status in ("labeling", "failed"):
            break
    return row


def run_to_done(round_id: int, phases: list[tuple[int, str, float]]) -> Any:
    """The round's own steps after labelling; deferred comparison arms are left for ``run_arms``."""
    from annotate.services import rounds

    row = None
    for until, phase in AFTER_LABELING:
        t0 = time.perf_counter()
        row = rounds.round_run_sync(round_id=round_id, until=(until, "done", "failed"), comparison=False)
        phases.append((row.number, phase, time.perf_counter() - t0))
    if row is None or row.status != "done":
        raise SystemExit(f"round {round_id} did not finish: {row and row.status} {row and row.failure_reason}")
    return row


def run_arms(round_id: int) -> dict[str, Any]:
    """The round's deferred comparison arms (train, then evaluate on the test set), timed; empty when it
    has none (not an arms round, or arms_timing "in_round")."""
    from annotate.models import Round
    from annotate.services import rounds

    if not Round.objects.filter(id=round_id, claims__kind="arms_eval").exists():
        return {}
    t0 = time.perf_counter()
    row = rounds.round_compare_sync(round_id=round_id)
    steps = (row.cost or {}).get("steps", {})
    return {
        "seconds": round(time.perf_counter() - t0, 2),
        "train_seconds": (steps.get("comparison_training") or {}).get("seconds"),
        "train_steps": (steps.get("comparison_training") or {}).get("steps"),
        "evaluate_seconds": (steps.get("comparison_evaluating") or {}).get("seconds"),
        "state": (row.metrics or {}).get("comparison"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="holds trec/train.csv")
    parser.add_argument("--labels", type=int, default=200, help="labels the timed round trains on")
    parser.add_argument("--pool", type=int, default=5452, help="TREC train rows imported (5452: all)")
    parser.add_argument("--out", default="", help="folder of the raw JSON (default bench/raw/<today>/)")
    parser.add_argument(
        "--loop-options", default="{}", help="over the CPU profile, e.g. '{\"arms_every\": 2}' to time an arms round"
    )
    parser.add_argument("--tag", default="", help="added to the output file's name")
    args = parser.parse_args()

    load_before = os.getloadavg()  # the machine is shared: a busy one slows every phase alike
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from rawfiles import raw_dir

    from annotate.loopconfig import loop_options, new_project_defaults
    from annotate.models import Item, Project, Round
    from annotate.services import rounds
    from devtools.oracle import annotator, label_batch, trec_project

    defaults = new_project_defaults()
    model_fields = ("random_share", "mass_threshold", "scratch_every", "test_set_size", "seed")
    blank = Project()  # the model's defaults: what the setup page starts from
    knobs = {name: getattr(blank, name) for name in model_fields} | defaults
    work = Path(os.environ["VAR_DIR"]) / "bench"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model_dir = Path(os.environ.get("LLM_DIR", ROOT / "var" / "models" / "smollm2-135m-instruct"))
    project = trec_project(Path(args.data), work, model_dir=model_dir, pool=args.pool, **knobs)
    setup_s = time.perf_counter() - t0
    user = annotator("oracle")
    phases: list[tuple[int, str, float]] = []

    # Round 1 (untimed): a cold start widened to bring the project to labels - batch.
    batch = project.batch_size
    project.batch_size = args.labels - batch
    project.save(update_fields=["batch_size"])
    first = run_until_labeling(rounds.round_request_start(project=project, user=None, run_here=True).id, phases)
    t_label = time.perf_counter()
    label_batch(project, user)
    phases.append((first.number, "label (oracle)", time.perf_counter() - t_label))
    run_to_done(first.id, phases)
    project.batch_size = batch
    project.save(update_fields=["batch_size"])

    # Round 2 (timed): the default batch, scored.
    started = time.perf_counter()
    second = run_until_labeling(rounds.round_request_start(project=project, user=None, run_here=True).id, phases)
    machine_before = time.perf_counter() - started
    n = label_batch(project, user)
    t_train = time.perf_counter()
    second = run_to_done(second.id, phases)
    machine = machine_before + time.perf_counter() - t_train
    timed = [(phase, s) for number, phase, s in phases if number == second.number]
    arms_deferred = run_arms(second.id)  # after the round: a worker trains them while the next batch is labelled
    second.refresh_from_db()
    metrics = second.metrics or {}
    opts = loop_options()
    result = {
        "commit": commit(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "setup_seconds": round(setup_s, 1),
        "pool_items": Item.objects.filter(project=project, is_test=False).count(),
        "test_items": metrics.get("test_n"),
        "labels": metrics.get("labels"),
        "batch_labelled": n,
        "phases_round_2": {phase: round(s, 2) for phase, s in timed},
        # the round's critical path: score, select, train and evaluate (the prod adapters, and the comparison
        # arms too with arms_timing "in_round")
        "round_seconds": round(machine, 2),
        "arms_timing": opts.arms_timing,
        "arms_deferred": arms_deferred,  # the deferred arms after the round: seconds, train / evaluate split
        "test_accuracy": metrics.get("accuracy"),
        # the comparison arms of an arms round: each arm's test accuracy and the paired gain sentence
        "arms": {arm: (v or {}).get("accuracy") for arm, v in (metrics.get("arms") or {}).items()},
        "arms_gain": (metrics.get("gain") or {}).get("sentence"),
        "train_steps": second.train_steps_total,
        "round_1": {"phases": {p: round(s, 2) for k, p, s in phases if k == first.number}},
        "project_defaults": defaults,
        "loop_options": json.loads(args.loop_options),
        "loop_profile": opts.profile,
        "arms_every": opts.arms_every,
        "frozen_config": Round.objects.get(id=second.id).config,
        "cost": second.cost,
    }
    out = Path(args.out) if args.out else raw_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"cpu-round-{result['commit']}{'-' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"\nround {second.number} at {metrics.get('labels')} labels ({n} new), K={project.ensemble_k}:")
    print("| phase | seconds |\n|---|---|")
    for phase, s in timed:
        print(f"| {phase} | {s:.1f} |")
    print(f"| **round (all but labelling)** | **{machine:.1f}** |")
    if arms_deferred:
        print(
            f"| comparison arms after the round: train | {arms_deferred['train_seconds'] or 0:.1f} |\n"
            f"| comparison arms after the round: evaluate | {arms_deferred['evaluate_seconds'] or 0:.1f} |\n"
            f"| comparison arms after the round (wall) | {arms_deferred['seconds']:.1f} |"
        )
    print(f"test accuracy {metrics.get('accuracy', float('nan')):.3f} on {metrics.get('test_n')} items; raw: {path}")
    if result["arms"]:
        arms = ", ".join(f"{arm} {acc:.3f}" for arm, acc in result["arms"].items() if acc is not None)
        steps = second.train_steps_total + int(arms_deferred.get("train_steps") or 0)
        print(f"arms ({steps} training steps in all): {arms}; {result['arms_gain']}")


if __name__ == "__main__":
    main()
