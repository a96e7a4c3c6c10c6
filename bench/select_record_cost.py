"""What a selection's record costs on the CPU worker for a large label set: the round's predictions
upserted (one row a pool item, its distribution over every label as JSON) and the low-label-mass items
moved to the review bucket. CLINC150's deployed rounds spent 12.8 s selecting (session 28); this times
those two writes on a CLINC150-sized pool, on SQLite or on PostgreSQL (``DATABASE_URL``).

    .venv/bin/python bench/select_record_cost.py [--data ../shared/data/clinc150] [--n 15000] [--repeats 2]
        [--out bench/raw/DATE/select-record-cost-COMMIT-DB.json]

Random Dirichlet distributions and masses (the cost depends on the shapes only); a fresh database in a
temporary folder (SQLite) or the one ``DATABASE_URL`` names (PostgreSQL: give it a database of its own,
the script migrates it). Prints one markdown table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        )
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "clinc150")
    p.add_argument("--n", type=int, default=15_000, help="pool items with a prediction (CLINC150's pool: 15,000)")
    p.add_argument("--low-mass", type=float, default=0.05, help="share of them under the mass threshold")
    p.add_argument("--repeats", type=int, default=2, help="upserts (the second updates the first's rows)")
    p.add_argument("--out", type=Path, default=None, help="raw JSON")
    a = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="select-record-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["VAR_DIR"] = str(tmp / "var")
    os.environ.setdefault("DEBUG", "1")
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp}/db.sqlite3"
    import django

    django.setup()
    import numpy as np
    from django.core.management import call_command
    from django.db import connection

    from annotate.models import Item, Round
    from annotate.services import selection
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create

    call_command("migrate", verbosity=0)
    with (a.data / "train.csv").open() as f:
        rows = list(csv.DictReader(f))
    names = sorted({r["label"] for r in rows})
    project = project_create(
        name=f"select-record-{int(time.time())}",
        labels=[LabelInput(n, f"L{i}") for i, n in enumerate(names)],
        test_set_size=0,
    )
    pool = tmp / "pool.csv"
    with pool.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text"])
        writer.writeheader()
        writer.writerows({"id": f"c{i}", "text": r["text"]} for i, r in enumerate(rows))
    import_items(project=project, path=pool)
    row = Round.objects.create(project=project, number=1, status="selecting", seed=1)
    ids = np.array(list(Item.objects.filter(project=project).order_by("id").values_list("id", flat=True)[: a.n]))
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(len(names), 0.1), size=len(ids)).astype(np.float32)
    unc = rng.uniform(0, 1, len(ids))
    mass = np.where(rng.uniform(0, 1, len(ids)) < a.low_mass, 0.01, 0.9)

    timings: dict[str, float] = {}
    for rep in range(a.repeats):
        t = time.perf_counter()
        selection.predictions_upsert(
            round=row, item_ids=ids, probs=probs, mass_mean=mass, uncertainty=unc, prompt_hash="p", adapter_set_hash="a"
        )
        timings[f"predictions upsert {rep + 1}"] = round(time.perf_counter() - t, 2)
    low = ids[mass < 0.05].tolist()
    t = time.perf_counter()
    moved = selection.review_bucket_move(
        item_ids=low, mass={int(i): float(m) for i, m in zip(ids, mass, strict=True)}, threshold=0.05
    )
    timings["review bucket move"] = round(time.perf_counter() - t, 2)

    facts = {
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "database": connection.vendor,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
        "options": {"data": str(a.data), "n": int(len(ids)), "labels": len(names), "low_mass": a.low_mass},
        "moved_to_review": moved,
        "seconds": timings,
    }
    print(f"| {facts['commit']} on {connection.vendor}, {len(ids)} items x {len(names)} labels | seconds |")
    print("|---|---:|")
    for name, value in timings.items():
        print(f"| {name} | {value} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(facts, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
