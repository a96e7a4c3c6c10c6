"""Simulated annotation: R rounds per (strategy, seed) through the production services, the
annotator answering with the gold labels; records to OUT/records.jsonl, then the table and the plot.

    manage.py simulate --data ../shared/data/trec --strategy active,random --labels 1000 \\
        --seeds 3 --engine hf --out var/sim/trec --workers 6

B and the seed set default to a new project's shape (Project.batch_size, 50, and cold_start_batches
of those before the model chooses: 100), the shape bench/gpu_sim.sh measures (bench/RESULTS.md);
--batch / --seed-labels set others.

--workers 1 runs the jobs one after another in this process and its database (one project per
job). --workers W > 1 runs W jobs at a time, each in its own subprocess with its own VAR_DIR under
--work, so its own SQLite database, adapters and score cache (they never contend); the pool is
embedded once beforehand into WORK/embeddings, which every job's VAR_DIR/embeddings links to. No
broker is used: every round step runs synchronously in the job's process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotate.models import Project
from annotate.simulation import harness as sim
from annotate.simulation import report


def seed_labels(opts: dict[str, Any]) -> int:
    """--seed-labels, or a new project's cold start at this B: cold_start_batches batches of --batch
    (50 x 2 = 100 by default; --batch 25 alone: 50)."""
    if opts.get("seed_labels") is not None:
        return int(opts["seed_labels"])
    return int(opts["batch"]) * Project().cold_start_batches


class Command(BaseCommand):
    help = "Simulate annotation rounds per strategy and seed; report learning curves next to the baseline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--data", default="", help="folder with train.csv and test.csv (text,label)")
        parser.add_argument(
            "--strategy",
            default=f"active,random,{sim.RANDOM_COLDSTART}",  # both baselines: uniform and active's seed set
            help=f"comma list of {sim.ARMS} or 'all'",
        )
        parser.add_argument("--rounds", type=int, default=8, help="rounds per job, the seed-set round included")
        parser.add_argument("--labels", type=int, default=0, help="stop a job at this many labels (0: --rounds)")
        fresh = Project()  # a new project's defaults, never saved
        batch, cold = fresh.batch_size, fresh.cold_start_batches
        parser.add_argument(
            "--batch",
            type=int,
            default=batch,
            help=f"items per round after the seed set (B; a project's default: {batch})",
        )
        parser.add_argument(
            "--cold-rounds",
            type=int,
            default=1,
            help="label the seed set in this many cold-start rounds, each trained (a project's own shape: "
            f"{cold} rounds of B; the deployed run's); 1: the whole seed set in round 1",
        )
        parser.add_argument("--seeds", type=int, default=3, help="seeds per strategy: --first-seed .. +N-1")
        parser.add_argument("--first-seed", type=int, default=0, help="the first seed (more seeds in a later call)")
        parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
        parser.add_argument("--out", default=None, help="output folder (default VAR_DIR/sim/<data name>)")
        parser.add_argument("--work", default=None, help="jobs' databases, adapters (VAR_DIR/sim-work/<out>)")
        parser.add_argument("--k", type=int, default=2, help="ensemble size K")
        parser.add_argument("--model", default="", help="local HF model directory (default settings.LLM_DIR)")
        parser.add_argument("--pool-sample", type=int, default=0, help="fixed random sample of train as the pool")
        parser.add_argument("--test-sample", type=int, default=0, help="fixed random sample of test as the test set")
        parser.add_argument("--label-subset", type=int, default=0, help="only a fixed random N of the labels (0: all)")
        parser.add_argument(
            "--seed-labels",
            type=int,
            default=None,
            help=f"seed set labelled in round 1 (the cold start; default {cold} batches of B, as a project's {cold}"
            " cold-start rounds)",
        )
        parser.add_argument("--candidate-sample", type=int, default=0, help="items rescored per round (0: all)")
        parser.add_argument("--mass-threshold", type=float, default=0.05, help="label mass under it: review bucket")
        parser.add_argument("--workers", type=int, default=1, help="jobs at a time (>1: one subprocess each)")
        parser.add_argument("--full-data", action="store_true", help="also train once on the whole train split")
        parser.add_argument("--full-data-steps", type=int, default=0, help="optimiser steps of the full-data run")
        parser.add_argument("--loop-options", default="", help='JSON merged into the loop options, e.g. {"train": {}}')
        parser.add_argument("--baselines", default="", help="BASELINES.md to put next to our rows")
        parser.add_argument("--plots-dir", default="", help="where the PNG is copied (default bench/plots)")
        parser.add_argument("--no-report", action="store_true", help="records only (no table, no plot)")
        parser.add_argument(
            "--autolabel-targets",
            default="",
            help="after a job's last round, auto-label the rest of the pool at these target precisions, e.g."
            " 0.90,0.95, and check what was accepted against the oracle labels (OUT/autolabel.jsonl)",
        )
        parser.add_argument("--autolabel-calibration", type=int, default=500, help="calibration split items")
        parser.add_argument(
            "--deadline",
            type=float,
            default=0,
            help="seconds after a job's start after which it starts no new round (0: none); its auto-labelling"
            " (--autolabel-targets) still runs, on the adapters of the last round done",
        )
        parser.add_argument("--job", default="", help=argparse.SUPPRESS)  # worker subprocess: STRATEGY:SEED
        parser.add_argument("--spec", default="", help=argparse.SUPPRESS)  # worker subprocess: OUT/spec.json

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["job"]:  # a worker subprocess: one job in its own database, the parent's spec
            spec = sim.spec_from_json(json.loads(Path(opts["spec"]).read_text()))
            data = sim.spec_data(spec)
            call_command("migrate", verbosity=0, interactive=False)
            sim.run_job(spec=spec, data=data, job=sim.Job.parse(opts["job"]), log=self._log)
            return
        if not opts["data"]:
            raise CommandError("--data is required")
        spec = self._spec(opts)
        try:
            data = sim.spec_data(spec)
        except sim.SimulationError as exc:
            raise CommandError(str(exc)) from exc
        spec = self._with_context(spec, data)
        jobs = self._jobs(opts)
        if spec.records_path.exists():  # never mix two runs' records
            kept = spec.records_path.with_name(f"records-{int(spec.records_path.stat().st_mtime)}.jsonl")
            spec.records_path.rename(kept)
            self._log(f"earlier records moved to {kept}")
        (spec.out_dir / "spec.json").write_text(json.dumps(sim.spec_json(spec), indent=2))
        self._log(f"{len(jobs)} jobs on {data.name} ({data.n_pool} pool, {data.n_test} test) -> {spec.out_dir}")
        started = time.perf_counter()
        if opts["workers"] <= 1:
            failed = self._run_in_process(spec, data, jobs)
        else:
            failed = self._run_workers(spec, data, jobs, opts["workers"])
        self._log(f"all jobs finished in {time.perf_counter() - started:.0f}s")
        if not opts["no_report"]:
            self._report(spec, opts["baselines"], opts["plots_dir"])
        if failed:
            raise CommandError(f"{len(failed)} jobs failed: {', '.join(failed)}")

    def _log(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _spec(self, opts: dict[str, Any]) -> sim.SimSpec:
        if opts["seeds"] < 1 or opts["first_seed"] < 0:  # before anything is created
            seeds, first = opts["seeds"], opts["first_seed"]
            raise CommandError(f"--seeds must be >= 1 and --first-seed >= 0, got {seeds} and {first}")
        data_dir = Path(opts["data"]).resolve()
        out = Path(opts["out"]).resolve() if opts["out"] else Path(settings.VAR_DIR) / "sim" / data_dir.name
        out.mkdir(parents=True, exist_ok=True)
        work = Path(opts["work"]).resolve() if opts["work"] else Path(settings.VAR_DIR) / "sim-work" / out.name
        try:
            loop_options = json.loads(opts["loop_options"]) if opts["loop_options"] else {}
        except json.JSONDecodeError as exc:
            raise CommandError(f"--loop-options is not JSON: {exc}") from exc
        model_dir = Path(opts["model"] or settings.LLM_DIR).resolve()
        if not (model_dir / "config.json").is_file():
            raise CommandError(f"{model_dir} is no HF model directory (pass --model, or run prepare_models)")
        opts["seed_labels"] = seed_labels(opts)
        if opts["rounds"] < 1 or opts["batch"] < 1 or opts["seed_labels"] < 1:
            raise CommandError("--rounds, --batch and --seed-labels must be positive")
        if opts["cold_rounds"] < 1 or opts["seed_labels"] % opts["cold_rounds"]:
            raise CommandError("--cold-rounds must be positive and divide the seed set (--seed-labels)")
        if min(opts["pool_sample"], opts["test_sample"], opts["candidate_sample"]) < 0:
            raise CommandError("--pool-sample, --test-sample and --candidate-sample must be 0 (all) or positive")
        try:
            targets = tuple(float(t) for t in opts["autolabel_targets"].split(",") if t.strip())
        except ValueError as exc:
            raise CommandError(f"--autolabel-targets takes numbers, e.g. 0.90,0.95: {exc}") from exc
        if opts["deadline"] < 0:
            raise CommandError("--deadline must be 0 (none) or a number of seconds")
        if any(not 0.5 <= t < 1.0 for t in targets) or opts["autolabel_calibration"] < 1:
            raise CommandError("--autolabel-targets must lie in [0.5, 1) and --autolabel-calibration be positive")
        return sim.SimSpec(
            data_dir=data_dir,
            out_dir=out,
            work_dir=work,
            rounds=opts["rounds"],
            batch=opts["batch"],
            seed_labels=opts["seed_labels"],
            cold_rounds=opts["cold_rounds"],
            k=opts["k"],
            engine=opts["engine"],
            model_dir=str(model_dir),  # resolved here: a worker's own VAR_DIR would move the default LLM_DIR
            pool_sample=opts["pool_sample"],
            test_sample=opts["test_sample"],
            label_subset=opts["label_subset"],
            candidate_sample=opts["candidate_sample"],
            mass_threshold=opts["mass_threshold"],
            full_data_steps=opts["full_data_steps"],
            loop_options=loop_options,
            max_labels=opts["labels"],
            autolabel_targets=targets,
            autolabel_calibration=opts["autolabel_calibration"],
            deadline_s=opts["deadline"],
            commit=_commit(),
        )

    def _with_context(self, spec: sim.SimSpec, data: sim.SimData) -> sim.SimSpec:
        """max_context "auto" (or unset): the prefix plus the longest pool or test item."""
        if spec.loop_options.get("max_context", "auto") != "auto":
            return spec
        texts = [text for path in (data.pool_csv, data.test_csv) for text, _ in sim.read_rows(path)]
        needed = sim.context_for(model_dir=spec.model_dir, labels=data.label_names, texts=texts)
        self._log(f"max_context {needed}: the prompt prefix plus the longest of {len(texts)} items")
        return replace(spec, loop_options={**spec.loop_options, "max_context": needed})

    def _jobs(self, opts: dict[str, Any]) -> list[sim.Job]:
        names = sim.ARMS if opts["strategy"] == "all" else tuple(s.strip() for s in opts["strategy"].split(","))
        unknown = [s for s in names if s not in sim.ARMS]
        if unknown:
            raise CommandError(f"unknown strategies {unknown}; expected {', '.join(sim.ARMS)} or 'all'")
        jobs = [sim.Job(sim.FULL_DATA, 0)] if opts["full_data"] else []  # first: the longest single job
        # Seed-major: with fewer workers than jobs, every strategy gets its first seed early.
        seeds = range(opts["first_seed"], opts["first_seed"] + opts["seeds"])
        return jobs + [sim.Job(s, seed) for seed in seeds for s in names]

    def _run_in_process(self, spec: sim.SimSpec, data: sim.SimData, jobs: list[sim.Job]) -> list[str]:
        failed = []
        for job in jobs:
            try:
                sim.run_job(spec=spec, data=data, job=job, log=self._log)
            except sim.SimulationError as exc:
                self._log(f"[{job.tag}] FAILED: {exc}")
                failed.append(job.tag)
        return failed

    def _run_workers(self, spec: sim.SimSpec, data: sim.SimData, jobs: list[sim.Job], workers: int) -> list[str]:
        shared = spec.work_dir / "embeddings"
        started = time.perf_counter()
        self._log(f"embedded {sim.pre_embed(data, shared)} pool texts in {time.perf_counter() - started:.1f}s")
        # CPU threads per job: the cores shared out, or ALANN_SIM_THREADS (several harness runs at once).
        threads = int(os.environ.get("ALANN_SIM_THREADS") or 0) or max(1, (os.cpu_count() or 1) // workers)
        pending = list(jobs)
        running: list[tuple[sim.Job, subprocess.Popen[bytes]]] = []
        failed: list[str] = []
        # A SIGTERM (timeout, a killed session) ends the jobs too; their finished rounds stay recorded.
        signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            while pending or running:
                while pending and len(running) < workers:
                    job = pending.pop(0)
                    running.append((job, self._spawn(job, spec, shared, threads)))
                time.sleep(0.5)
                for job, proc in [(j, p) for j, p in running if p.poll() is not None]:
                    running.remove((job, proc))
                    self._finished(job, proc.returncode, spec, failed)
        except KeyboardInterrupt:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the cleanup short
            self._log(f"interrupted: stopping {len(running)} jobs; {len(pending)} never started")
            failed += [job.tag for job, _ in running] + [job.tag for job in pending]
            for _, proc in running:
                proc.terminate()
            for _, proc in running:
                proc.wait(timeout=30)
        return failed

    def _finished(self, job: sim.Job, code: int, spec: sim.SimSpec, failed: list[str]) -> None:
        log = spec.out_dir / "logs" / f"{job.tag}.log"
        if code:
            failed.append(job.tag)
            tail = log.read_text(errors="replace")[-2000:]
            self._log(f"[{job.tag}] FAILED (exit {code}); end of {log}:\n{tail}")
        else:
            done = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("[")]
            self._log(done[-1] if done else f"[{job.tag}] done")

    def _spawn(self, job: sim.Job, spec: sim.SimSpec, shared: Path, threads: int) -> subprocess.Popen[bytes]:
        var = spec.work_dir / "jobs" / job.tag
        var.mkdir(parents=True, exist_ok=True)
        (spec.out_dir / "logs").mkdir(exist_ok=True)
        link = var / "embeddings"
        if not link.exists():
            link.symlink_to(shared, target_is_directory=True)
        env = {**os.environ, "VAR_DIR": str(var), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        env.pop("DATABASE_URL", None)  # SQLite at VAR_DIR/db.sqlite3: a database per job
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        cmd = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "simulate"]
        cmd += ["--job", f"{job.strategy}:{job.seed}", "--spec", str(spec.out_dir / "spec.json")]
        with (spec.out_dir / "logs" / f"{job.tag}.log").open("ab") as log:
            return subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)

    def _report(self, spec: sim.SimSpec, baselines: str, plots_dir: str) -> None:
        text = report.write_report(
            spec.records_path,
            out_dir=spec.out_dir,
            plots_dir=Path(plots_dir) if plots_dir else Path(settings.BASE_DIR) / "bench" / "plots",
            baselines=Path(baselines) if baselines else report.DEFAULT_BASELINES,
        )
        self.stdout.write(text)


def _commit() -> str:
    """The code's commit: ALANN_COMMIT (set where the tree travels without .git), else git's HEAD,
    with "+dirty" when tracked files differ from it."""
    if os.environ.get("ALANN_COMMIT"):
        return os.environ["ALANN_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=settings.BASE_DIR, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=settings.BASE_DIR, capture_output=True)
    except OSError:
        return "unknown"
    if head.returncode:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
