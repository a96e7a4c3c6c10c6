"""Import throughput: a 200,000-row CSV into SQLite and into PostgreSQL through the production import
service (validate pass + chunked insert in one transaction). Prints one markdown table.

    python bench/import_bench.py --rows 200000 [--pg postgres://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELS = ["abbreviation", "description", "entity", "human", "location", "numeric"]


def make_csv(path: Path, rows: int) -> None:
    """Real TREC questions (cycled, numbered so texts differ) when ../shared/data is there, else synthetic."""
    trec = ROOT.parent / "shared" / "data" / "trec" / "train.csv"
    base: list[tuple[str, str]] = []
    if trec.is_file():
        with trec.open(newline="", encoding="utf-8") as f:
            base = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    if not base:
        base = [(f"synthetic question number {i} about things ?", LABELS[i % 6]) for i in range(1000)]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label", "source"])
        for i in range(rows):
            text, label = base[i % len(base)]
            writer.writerow([f"r{i}", f"{text} #{i // len(base)}", label, "bench"])


def run_one(db_url: str, csv_path: Path) -> dict[str, float]:
    """In a child process (settings are read at import): migrate a fresh DB, import, report."""
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from annotate.models import Item
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create

    call_command("migrate", verbosity=0)
    project = project_create(name="bench", labels=[LabelInput(n, c) for n, c in zip(LABELS, "ABCDEF", strict=True)])
    started = time.perf_counter()
    report = import_items(project=project, path=csv_path)
    seconds = time.perf_counter() - started
    assert Item.objects.filter(project=project).count() == report.created
    return {"rows": report.created, "seconds": seconds, "rows_per_s": report.created / seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child[0], Path(args.child[1]))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "pool.csv"
        make_csv(csv_path, args.rows)
        pg_db = f"alann_import_bench_{os.getpid()}"
        admin = args.pg
        subprocess.run(["psql", admin, "-qc", f"CREATE DATABASE {pg_db}"], check=True)
        targets = {"SQLite": f"sqlite:///{tmp}/bench.sqlite3", "PostgreSQL": admin.rsplit("/", 1)[0] + "/" + pg_db}
        results = {}
        try:
            for name, url in targets.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--child", url, str(csv_path)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {pg_db}"], check=False)
    size_mb = csv_path.stat().st_size / 1e6 if csv_path.exists() else 0
    print(f"\nImport of a {args.rows:,}-row CSV ({size_mb:.0f} MB) through annotate.services.imports.import_items\n")
    print("| database | rows | seconds | rows/s | goal ≥ 20,000 rows/s |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        ok = "met" if r["rows_per_s"] >= 20_000 else "NOT met"
        print(f"| {name} | {r['rows']:,} | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | {ok} |")


if __name__ == "__main__":
    main()
