"""manage.py autolabel ACTION PROJECT — label the rest of the pool from the command line.

gold       top up the gold set by true class (--per-class N, default 50)
split      draw the calibration split: random pool items people label once (--split N, default 500)
calibrate  fit the calibrator and per-class thresholds (--target, --delta, --cascade, --second-model)
launch     label the pool (--audit-share, --in-flight, --per-worker, --chunk); prints the budget first
status     the latest calibration and run: thresholds, progress with ETA, tier counts, audit
retry      queue the open dead letters for another try
export     the final dataset with provenance (--format csv|jsonl|parquet, -o FILE)
batch-manifest  the items still to label as a batch-API request manifest (JSONL, -o FILE, --model NAME)
batch-results   import a batch API's results file (-i FILE, --audit-share): idempotent, another prompt version
           refused; answers with logprobs are decided on the latest calibration like the engine's scores

--sync runs the queued work in this process (no broker), printing progress with the ETA; without it
a worker runs it and ``status`` (or ``--follow``) shows where it is.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotate.models import AutolabelRun, Project
from annotate.selectors import autolabel as auto_sel
from annotate.selectors.projects import project_by_ref
from annotate.services import autolabel as auto
from annotate.services import batch_api
from annotate.services.exports_autolabel import export_dataset, export_dataset_parquet
from predictor.calibrate import DEFAULT_TARGET
from scoring.batch_manifest import ManifestError


def _project(ref: str) -> Project:
    project = project_by_ref(ref)
    if project is None:
        raise CommandError(f"no project {ref!r} (give its id or name)")
    return project


def progress_line(run: AutolabelRun) -> str:
    p = auto_sel.run_progress(run=run)
    eta = f", ETA {p.eta_seconds:.0f} s" if p.eta_seconds is not None else ""
    tiers = " · ".join(f"{t['tier']}: {t['accepted']}/{t['tried']} accepted" for t in p.tiers)
    return (
        f"run #{run.id} {run.status}: {run.items_done}/{run.n_items} items ({p.percent} %){eta}; {tiers}; "
        f"dead letters {p.dead_letters}{(' — ' + run.reason) if run.reason else ''}"
    )


ACTIONS = ["gold", "split", "calibrate", "launch", "status", "retry", "export", "batch-manifest", "batch-results"]


class Command(BaseCommand):
    help = "Gold set, calibration, the bulk auto-labelling job, its dead letters and the final export."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("project", help="project id or name")
        parser.add_argument("--sync", action="store_true", help="run the work in this process (no worker)")
        parser.add_argument("--follow", action="store_true", help="poll the run's progress until it ends")
        parser.add_argument("--per-class", type=int, default=50)
        parser.add_argument("--split", type=int, default=500, help="calibration-split items to draw")
        parser.add_argument("--target", type=float, default=DEFAULT_TARGET)
        parser.add_argument("--delta", type=float, default=0.05, help="chance a class's threshold misses the target")
        parser.add_argument("--cascade", choices=auto.CASCADES, default="agreement")
        parser.add_argument("--second-model", default="")
        parser.add_argument("--audit-share", type=float, default=0.02)
        parser.add_argument("--in-flight", type=int, default=4, help="shards queued or running at once")
        parser.add_argument("--per-worker", type=int, default=2, help="shards one worker holds at once")
        parser.add_argument("--chunk", type=int, default=256, help="items per engine call")
        parser.add_argument("--format", choices=["csv", "jsonl", "parquet"], default="csv")
        parser.add_argument("-o", "--output", default="-")
        parser.add_argument("-i", "--input", default="", help="the batch API's results file")
        parser.add_argument("--model", default="", help="model name written into the batch manifest")

    def handle(self, *args: Any, **options: Any) -> None:
        project = _project(options["project"])
        try:
            getattr(self, f"_{options['action'].replace('-', '_')}")(project, options)
        except (auto.AutolabelError, ManifestError) as exc:
            raise CommandError(str(exc)) from exc

    def _inline(self, options: dict[str, Any], first: Any) -> Any:
        """``first(dispatch)``: with --sync, it and every unit it sends run here; else on the workers."""
        holder: list[Any] = []
        if options["sync"]:
            auto.run_inline(lambda send: holder.append(first(send)))
        else:
            holder.append(first(auto.celery_dispatch))
        return holder[0]

    def _gold(self, project: Project, options: dict[str, Any]) -> None:
        added = auto.gold_draw(project=project, per_class=options["per_class"], seed=project.seed)
        self.stdout.write(f"{added} gold items drawn; each is double-labelled blind in the annotators' queue")

    def _split(self, project: Project, options: dict[str, Any]) -> None:
        added = auto.calibration_split_draw(project=project, n=options["split"], seed=project.seed)
        self.stdout.write(f"{added} random pool items in the calibration split; each is labelled once by people")

    def _calibrate(self, project: Project, options: dict[str, Any]) -> None:
        row = self._inline(
            options,
            lambda send: auto.calibration_request(
                project=project,
                target=options["target"],
                delta=options["delta"],
                cascade=options["cascade"],
                second_model_dir=options["second_model"],
                dispatch=send,
            ),
        )
        row.refresh_from_db()
        self.stdout.write(f"calibration #{row.id}: {row.status} {row.error}".rstrip())
        if row.status == "done":
            self._thresholds(row)

    def _thresholds(self, row: Any) -> None:
        self.stdout.write(f"ECE {row.before['ece']:.3f} → {row.after['ece']:.3f} on {row.n_items} items")
        for r in auto_sel.threshold_rows(calibration=row):
            t = "never" if r["threshold"] is None else f"{r['threshold']:.3f}"
            self.stdout.write(
                f"  {r['tier']:<12} {r['label']:<16} threshold {t:<6} coverage {r['coverage']:.0%} "
                f"expected precision {r['expected_precision']:.1%} (bound {1 - r['error_bound']:.1%}) {r['reason']}"
            )
        if row.bias:
            warn = " — WARNING: the model reads the codes" if row.bias.get("warn") else ""
            self.stdout.write(f"label-order flip rate {row.bias['flip_rate']:.2f}{warn}")

    def _launch(self, project: Project, options: dict[str, Any]) -> None:
        calibration = auto_sel.latest_calibration(project=project, done=True)
        if calibration is not None:
            plan = auto_sel.budget(project=project, calibration=calibration)
            for r in plan["rows"]:
                self.stdout.write(
                    f"  {r['workers']} worker(s): {r['gpu_hours']:.3f} GPU-hours, wall {r['wall_hours']:.3f} h"
                )
            self.stdout.write(f"budget for {plan['n_items']} items from {plan['source']}")
        request = lambda send: auto.run_request(  # noqa: E731
            project=project,
            audit_share=options["audit_share"],
            max_shards_in_flight=options["in_flight"],
            max_shards_per_worker=options["per_worker"],
            chunk_size=options["chunk"],
            dispatch=send,
        )
        if options["sync"]:
            self._launch_sync(request)
            return
        run = request(auto.celery_dispatch)
        self.stdout.write(f"run #{run.id} queued")
        if options["follow"]:
            self._follow(run.id)

    def _launch_sync(self, request: Any) -> None:
        holder: list[AutolabelRun] = []

        def report(task: str) -> None:
            if holder and task == "shard":
                self.stderr.write(progress_line(AutolabelRun.objects.get(id=holder[0].id)))

        auto.run_inline(lambda send: holder.append(request(send)), after_task=report)
        self.stdout.write(progress_line(AutolabelRun.objects.get(id=holder[0].id)))

    def _follow(self, run_id: int) -> None:
        while True:
            run = AutolabelRun.objects.get(id=run_id)
            self.stdout.write(progress_line(run))
            if run.status not in ("pending", "running"):
                return
            time.sleep(5)

    def _status(self, project: Project, options: dict[str, Any]) -> None:
        calibration = auto_sel.latest_calibration(project=project)
        if calibration is None:
            self.stdout.write("no calibration yet")
            return
        self.stdout.write(f"calibration #{calibration.id}: {calibration.status} {calibration.error}".rstrip())
        if calibration.status == "done":
            self._thresholds(calibration)
            for s in auto.audit_refresh(calibration=calibration):
                if s.audited:
                    alarm = " ALARM: auto-accept stopped" if s.alarm else ""
                    self.stdout.write(
                        f"  audit {s.label}: {s.correct}/{s.audited} right "
                        f"(95% CI {s.ci_low:.2f}–{s.ci_high:.2f}){alarm}"
                    )
        run = auto_sel.latest_run(project=project)
        if run is not None:
            self.stdout.write(progress_line(run))
            if options["follow"]:
                self._follow(run.id)

    def _retry(self, project: Project, options: dict[str, Any]) -> None:
        count = self._inline(options, lambda send: auto.dead_letter_retry(project=project, dispatch=send))
        self.stdout.write(f"{count} dead letters queued for retry")

    def _export(self, project: Project, options: dict[str, Any]) -> None:
        if options["format"] == "parquet":
            if options["output"] == "-":
                raise CommandError("Parquet is binary: give -o FILE")
            with open(options["output"], "wb") as f:
                for part in export_dataset_parquet(project=project):
                    f.write(part)
            return
        out = sys.stdout if options["output"] == "-" else open(options["output"], "w", encoding="utf-8")  # noqa: SIM115
        try:
            for chunk in export_dataset(project=project, fmt=options["format"]):
                out.write(chunk)
        finally:
            if out is not sys.stdout:
                out.close()

    def _batch_manifest(self, project: Project, options: dict[str, Any]) -> None:
        out = sys.stdout if options["output"] == "-" else open(options["output"], "w", encoding="utf-8")  # noqa: SIM115
        try:
            n = sum(out.write(line) > 0 for line in batch_api.manifest_export(project=project, model=options["model"]))
        finally:
            if out is not sys.stdout:
                out.close()
        self.stderr.write(f"{n} requests in the manifest")

    def _batch_results(self, project: Project, options: dict[str, Any]) -> None:
        if not options["input"]:
            raise CommandError("give the results file with -i FILE")
        with open(options["input"], encoding="utf-8") as f:
            done = batch_api.results_import(project=project, lines=f, audit_share=options["audit_share"])
        self.stdout.write(f"{done.answers} answers for prompt version {done.version}: {done.added} new")
        decided = done.decided
        if decided.refused:
            self.stderr.write(f"not decided: {decided.refused}")
        elif decided.run is not None:
            self.stdout.write(
                f"decided (run #{decided.run}): {decided.accepted} auto-accepted ({decided.audited} of them audited), "
                f"{decided.escalated} to people"
            )
        if decided.without_probs:
            self.stdout.write(f"{decided.without_probs} answers without logprobs: kept, not decided (no confidence)")
