"""Per-step times of full rounds on CPU: TREC, the bundled SmolLM2, the demo configuration.

    DEBUG=1 python bench/round_bench.py [--pool 5452] [--candidates 1000] [--batch 20] [--k 2]

Round 1 is a cold start (no scoring), labelled by an oracle (the CSV's labels through the labeling
service), trained and evaluated; round 2 is a full round: score → select → label → train → evaluate.
Runs in a throwaway VAR_DIR with its own SQLite database; prints one table row per step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="alann-round-bench-"))
os.environ.setdefault("MODELS_DIR", str(ROOT / "var" / "models"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "trec"))
    parser.add_argument("--pool", type=int, default=5452)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--test", type=int, default=200)
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from annotate.models import Item, Round
    from annotate.services import rounds
    from devtools.oracle import annotator, label_batch, trec_project

    tmp = Path(os.environ["VAR_DIR"]) / "bench"
    tmp.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    project = trec_project(
        Path(args.data).parent,
        tmp,
        model_dir=Path(os.environ.get("LLM_DIR", ROOT / "var" / "models" / "smollm2-135m-instruct")),
        pool=args.pool,
        test=args.test,
        ensemble_k=args.k,
        batch_size=args.batch,
        candidate_sample=args.candidates,
        random_share=0.2,
        mass_threshold=0.0,
        scratch_every=5,
    )
    n_items = Item.objects.filter(project=project).count()
    print(f"setup: {n_items} items imported in {time.perf_counter() - started:.1f} s")
    rows: list[tuple[int, str, float, str]] = []
    user = annotator("oracle")
    for _ in range(2):
        row = rounds.round_request_start(project=project, user=None, run_here=True)
        for until, step in (("scoring", "begin"), ("selecting", "score"), ("labeling", "select")):
            if row.status == "labeling":
                break
            t0 = time.perf_counter()
            row = rounds.round_run_sync(round_id=row.id, until=(until, "selecting", "labeling", "failed"))
            rows.append((row.number, step, time.perf_counter() - t0, row.status))
        t0 = time.perf_counter()
        n = label_batch(project, user)
        rows.append((row.number, f"label ({n} oracle labels)", time.perf_counter() - t0, "labeling"))
        for until, step in (("evaluating", "train"), ("done", "evaluate")):
            t0 = time.perf_counter()
            row = rounds.round_run_sync(round_id=row.id, until=(until, "done", "failed"))
            rows.append((row.number, step, time.perf_counter() - t0, row.status))
        if row.status != "done":
            raise SystemExit(f"round {row.number} {row.status}: {row.failure_reason}")
    print()
    print("| round | step | seconds | status after |")
    print("|---|---|---|---|")
    for number, step, seconds, status in rows:
        print(f"| {number} | {step} | {seconds:.1f} | {status} |")
    full = sum(s for n, step, s, _ in rows if n == 2 and not step.startswith("label"))
    print(f"\nround 2 machine time (score + select + train + evaluate): {full:.1f} s")
    for row in Round.objects.filter(project=project).order_by("number"):
        m = row.metrics
        print(
            f"round {row.number}: labels {m.get('labels')} accuracy {m.get('accuracy', float('nan')):.3f} "
            f"macro-F1 {m.get('macro_f1', float('nan')):.3f} ECE {m.get('ece', float('nan')):.3f} "
            f"review {m.get('review_bucket', 0)} | {m.get('gain_text', '')}"
        )
        print(f"  cost: {row.cost}")


if __name__ == "__main__":
    main()
