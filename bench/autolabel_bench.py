"""Auto-labelling benchmarks through the production services. Prints markdown tables.

import (CPU): a 2-million-row CSV streamed into a fresh database by the production import service;
    rows/s and the peak RSS of the importing process (bounded memory: the rows are never all held).

    python bench/autolabel_bench.py import --rows 2000000 [--pg postgres://postgres@127.0.0.1:5432/postgres]

run (GPU): a project of N items (TREC train texts, cycled and numbered) with TREC's test split as its
    labelled test set; calibrate, then the bulk job over the whole pool, in this process (the task
    bodies run inline: one gpu worker's throughput, no broker needed). Items/s of the run, GPU busy
    share (nvidia-smi sampled every 0.5 s while the run scores), peak GPU memory, tier counts, the
    measured prefix-cache hit rate, dead letters.

    python bench/autolabel_bench.py run --items 200000 --model /path/smollm2 --engine vllm \\
        [--adapters /sim/var/adapters/project_1/round_8] [--cascade agreement] \\
        [--loop-options '{"engine_options": {"gpu_memory_utilization": 0.5}}']

Needs torch, transformers, peft (+ vllm for --engine vllm), Django and Celery importable (no Redis,
no PostgreSQL unless --pg). Each measurement runs in a child process with its own VAR_DIR and database.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TREC_CODES = {"abbreviation": "A", "description": "D", "entity": "E", "human": "H", "location": "L", "numeric": "N"}


def data_dir(arg: str) -> Path:
    for candidate in [arg, str(ROOT.parent / "shared" / "data"), str(ROOT / "shared-data")]:
        if candidate and (Path(candidate) / "trec" / "train.csv").is_file():
            return Path(candidate)
    raise SystemExit("TREC not found: pass --data-dir (a folder holding trec/train.csv and trec/test.csv)")


def write_pool(path: Path, rows: int, data: Path) -> None:
    """TREC questions cycled and numbered (so every text differs), streamed to disk."""
    with (data / "trec" / "train.csv").open(newline="", encoding="utf-8") as f:
        base = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label", "source"])
        for i in range(rows):
            text, label = base[i % len(base)]
            writer.writerow([f"r{i}", f"{text} #{i // len(base)}", label, "bench"])


def django_child(db_url: str, var_dir: Path) -> None:
    os.environ["VAR_DIR"] = str(var_dir)
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if db_url:
        os.environ["DATABASE_URL"] = db_url
    else:
        os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# -- import ---------------------------------------------------------------------------------------


def import_child(args: argparse.Namespace) -> dict[str, Any]:
    django_child(args.db, Path(args.var))
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create

    project = project_create(name="bench-import", labels=[LabelInput(n, c) for n, c in TREC_CODES.items()])
    before = peak_rss_mb()
    started = time.perf_counter()
    report = import_items(project=project, path=Path(args.csv))
    seconds = time.perf_counter() - started
    return {
        "rows": report.rows,
        "seconds": seconds,
        "rows_per_s": report.rows / seconds,
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_mb": before,
    }


def bench_import(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="alann-autolabel-import-"))
    path = work / "pool.csv"
    started = time.perf_counter()
    write_pool(path, args.rows, data_dir(args.data_dir))
    print(f"wrote {args.rows:,} rows ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.0f} s")
    targets = [("SQLite", "")] + ([("PostgreSQL", pg_database(args.pg))] if args.pg else [])
    try:
        import_table(work, path, targets)
    finally:
        if args.pg:
            pg_drop(args.pg, targets[-1][1])
        shutil.rmtree(work, ignore_errors=True)


def pg_drop(admin_url: str, url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')  # type: ignore[arg-type]


def import_table(work: Path, path: Path, targets: list[tuple[str, str]]) -> None:
    print(
        "\n| database | rows | seconds | rows/s | peak RSS (MB) | RSS before import (MB) |\n|---|---|---|---|---|---|"
    )
    for name, url in targets:
        var = work / f"var-{name}"
        var.mkdir()
        out = child(["import-child", "--csv", str(path), "--db", url, "--var", str(var)])
        print(
            f"| {name} | {out['rows']:,} | {out['seconds']:.1f} | {out['rows_per_s']:,.0f} | {out['peak_rss_mb']:.0f} "
            f"| {out['rss_before_mb']:.0f} |",
            flush=True,
        )


def pg_database(admin_url: str) -> str:
    import psycopg

    name = f"alann_autolabel_bench_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def child(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# -- the GPU run --------------------------------------------------------------------------------------


class GpuSampler:
    """nvidia-smi every 0.5 s: utilization and memory used of the visible GPUs."""

    def __init__(self) -> None:
        self.util: list[float] = []
        self.memory: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        while not self._stop.wait(0.5):
            try:
                line = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
            except (OSError, IndexError, subprocess.TimeoutExpired):
                continue
            util, mem = (float(x) for x in line.split(","))
            self.util.append(util)
            self.memory.append(mem)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["ALANN_LOOP_OPTIONS"] = args.loop_options
    django_child(args.db, Path(args.var))
    project, timings = setup_project(args)
    from annotate.models import AutolabelRun, Calibration
    from annotate.selectors import autolabel as auto_sel
    from annotate.services import autolabel as auto

    started = time.perf_counter()
    holder: list[Any] = []
    auto.run_inline(
        lambda send: holder.append(auto.calibration_request(project=project, cascade=args.cascade, dispatch=send))
    )
    calibration = Calibration.objects.get(id=holder[0].id)
    if calibration.status != "done":
        raise SystemExit(f"calibration failed: {calibration.error}")
    timings["calibrate_s"] = time.perf_counter() - started
    budget = auto_sel.budget(project=project, calibration=calibration)
    runs: list[Any] = []
    with GpuSampler() as gpu:
        started = time.perf_counter()
        auto.run_inline(
            lambda send: runs.append(auto.run_request(project=project, chunk_size=args.chunk, dispatch=send))
        )
        wall = time.perf_counter() - started
    run = AutolabelRun.objects.get(id=runs[0].id)
    progress = auto_sel.run_progress(run=run)
    torch_peak = 0.0
    try:
        import torch

        torch_peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    except ImportError:
        pass
    return {
        **timings,
        "items": run.items_done,
        "status": run.status,
        "reason": run.reason,
        "run_wall_s": wall,
        "items_per_s": run.items_done / wall,
        "engine_s": run.seconds,
        "tokens_per_s": run.tokens / run.seconds if run.seconds else 0.0,
        "prefix_cache_hit_rate": progress.prefix_cache_hit_rate,
        "gpu_busy_share": sum(gpu.util) / len(gpu.util) / 100 if gpu.util else None,
        "gpu_peak_memory_gib": max(gpu.memory) / 1024 if gpu.memory else None,
        "torch_peak_allocated_gib": torch_peak,
        "tiers": progress.tiers,
        "dead_letters": progress.dead_letters,
        "budget_estimate_1_worker_h": budget["rows"][0]["wall_hours"] if budget["rows"] else None,
        "calibration": {"ece_before": calibration.before["ece"], "ece_after": calibration.after["ece"]},
        "peak_rss_mb": peak_rss_mb(),
    }


def setup_project(args: argparse.Namespace) -> tuple[Any, dict[str, float]]:
    """The project, its pool, its labelled test set and (with --adapters) a finished round holding them."""
    from django.db.models import F
    from django.utils import timezone

    from annotate.models import AdapterVersion, Item, Project, Round
    from annotate.services.imports import import_items
    from annotate.services.projects import LabelInput, project_create

    data = data_dir(args.data_dir)
    timings: dict[str, float] = {}
    project = project_create(
        name="bench-autolabel",
        labels=[LabelInput(n, c) for n, c in TREC_CODES.items()],
        model_dir=args.model,
        engine=args.engine,
        mass_threshold=0.0,
    )
    work = Path(args.var)
    pool, test = work / "pool.csv", work / "test.csv"
    write_pool(pool, args.items, data)
    with (data / "trec" / "test.csv").open(newline="", encoding="utf-8") as f, test.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text", "label"])
        writer.writerows((f"test-{i}", r["text"], r["label"]) for i, r in enumerate(csv.DictReader(f)))
    started = time.perf_counter()
    import_items(project=project, path=pool)
    import_items(project=project, path=test)
    timings["import_s"] = time.perf_counter() - started
    Item.objects.filter(project=project, external_id__startswith="test-").update(
        is_test=True, final_label=F("gold_label"), finalized_at=timezone.now()
    )
    if args.adapters:
        done = Round.objects.create(project=project, number=1, status=Round.Status.DONE, finished_at=timezone.now())
        dirs = sorted(Path(args.adapters).glob("prod_*"), key=lambda p: int(p.name.split("_")[1]))
        for k, path in enumerate(dirs):
            AdapterVersion.objects.create(
                project=project, round=done, arm="prod", k=k, path=str(path), content_hash=f"bench{k:04d}" * 4
            )
    return Project.objects.get(pk=project.pk), timings


def hf_model(model: str) -> str:
    """A .gguf is dequantized once into a sibling HF directory (kept for the next run)."""
    if not model.endswith(".gguf"):
        return model
    sys.path.insert(0, str(ROOT))
    from scoring.bundled import prepare_llm

    out = Path(tempfile.gettempdir()) / f"alann-{Path(model).stem}-hf"
    prepare_llm(out, gguf=Path(model))
    return str(out)


def bench_run(args: argparse.Namespace) -> None:
    args.model = hf_model(args.model)
    var = Path(tempfile.mkdtemp(prefix="alann-autolabel-run-"))
    argv = ["run-child", "--var", str(var), "--db", pg_database(args.pg) if args.pg else "", "--items", str(args.items)]
    argv += ["--model", args.model, "--engine", args.engine, "--cascade", args.cascade, "--chunk", str(args.chunk)]
    argv += ["--loop-options", args.loop_options, "--data-dir", str(data_dir(args.data_dir))]
    if args.adapters:
        argv += ["--adapters", args.adapters]
    out = child(argv)
    print(json.dumps(out))
    busy = "—" if out["gpu_busy_share"] is None else f"{out['gpu_busy_share']:.0%}"
    peak = "—" if out["gpu_peak_memory_gib"] is None else f"{out['gpu_peak_memory_gib']:.1f}"
    hit = "—" if out["prefix_cache_hit_rate"] is None else f"{out['prefix_cache_hit_rate']:.2f}"
    print(
        "\n| items | engine | run wall (s) | items/s | tokens/s (engine) | GPU busy | GPU peak memory (GiB) "
        "| prefix-cache hit rate | accepted (tier 1 / tier 2) | dead letters |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    tiers = out["tiers"]
    accepted = " / ".join(str(t["accepted"]) for t in tiers)
    print(
        f"| {out['items']:,} | {args.engine} | {out['run_wall_s']:.0f} | {out['items_per_s']:,.0f} "
        f"| {out['tokens_per_s']:,.0f} | {busy} | {peak} | {hit} | {accepted} | {out['dead_letters']} |"
    )


def provenance(argv: list[str]) -> None:
    """What produced the numbers: commit, command, machine, load."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    print(f"commit {commit}{' (uncommitted changes)' if dirty else ''}")
    print(f"command: python bench/autolabel_bench.py {' '.join(argv)}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, load {load}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    imp = sub.add_parser("import")
    imp.add_argument("--rows", type=int, default=2_000_000)
    imp.add_argument("--pg", default="", help="admin URL of a PostgreSQL server (a scratch database is made)")
    imp.add_argument("--data-dir", default="")
    ic = sub.add_parser("import-child")
    ic.add_argument("--csv", required=True)
    ic.add_argument("--db", default="")
    ic.add_argument("--var", required=True)
    for name in ("run", "run-child"):
        run = sub.add_parser(name)
        run.add_argument("--items", type=int, default=200_000)
        run.add_argument("--model", required=True, help="an HF model directory or a .gguf (dequantized once)")
        run.add_argument("--engine", choices=["hf", "vllm"], default="vllm")
        run.add_argument("--adapters", default="", help="a round folder holding prod_0..prod_{K-1}")
        run.add_argument("--cascade", choices=["none", "agreement", "permuted"], default="agreement")
        run.add_argument("--chunk", type=int, default=1024, help="items per engine call")
        run.add_argument("--loop-options", default='{"max_context": 256}')
        run.add_argument("--pg", default="")
        run.add_argument("--db", default="")
        run.add_argument("--var", default="")
        run.add_argument("--data-dir", default="")
    args = parser.parse_args()
    if args.mode in ("import", "run"):
        provenance(sys.argv[1:])
    if args.mode == "import":
        bench_import(args)
    elif args.mode == "import-child":
        print(json.dumps(import_child(args)))
    elif args.mode == "run":
        bench_run(args)
    else:
        print(json.dumps(run_child(args), default=str))


if __name__ == "__main__":
    main()
