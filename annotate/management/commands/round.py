"""manage.py round start|final|status|run-sync|resume PROJECT [--strategy S] — rounds from the command line.

start     record the next round and enqueue it (a worker runs it)
final     record a final-model round and enqueue it: no batch, the adapters retrained from scratch on
          every label (refused while a round is active, or once the pool's end trained one)
status    the project's rounds with their progress counters and headline metrics
run-sync  run the current round's steps in this process, no broker (a labeling round is trained
          and evaluated; a new round is started when none is active). The process holds the round's
          drive claim meanwhile: a worker that starts leaves the round alone
resume    re-enqueue what the project's active rounds still need (after a worker died)

--strategy picks the new round's selection (start, and run-sync when it starts one): active (the
default), random, uncertainty-only, kcenter-only, margin-kcenter or portfolio. A cold-start round is
always random.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from acquisition.strategies import STRATEGIES
from annotate.api import round_json
from annotate.models import Project, Round
from annotate.selectors.projects import project_by_ref
from annotate.services import rounds


def _project(ref: str) -> Project:
    project = project_by_ref(ref)
    if project is None:
        raise CommandError(f"no project {ref!r} (give its id or name)")
    return project


class Command(BaseCommand):
    help = "Start, inspect, resume or run (synchronously) a project's rounds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["start", "final", "status", "run-sync", "resume"])
        parser.add_argument("project", help="project id or name")
        parser.add_argument("--strategy", choices=STRATEGIES, help="selection of a new round (default active)")

    def handle(self, *args: Any, **options: Any) -> None:
        project = _project(options["project"])
        action, strategy = options["action"], options["strategy"]
        if strategy and action not in ("start", "run-sync"):
            raise CommandError(f"--strategy applies to a new round (start, run-sync), not to {action}")
        try:
            if action == "start":
                row = rounds.round_request_start(project=project, user=None, strategy=strategy or "active")
                self.stdout.write(f"round {row.number} (id {row.id}, {row.strategy}) queued")
            elif action == "final":
                row = rounds.round_request_final(project=project, user=None)
                self.stdout.write(f"round {row.number} (id {row.id}, the final model) queued")
            elif action == "status":
                for row in Round.objects.filter(project=project).order_by("number"):
                    self.stdout.write(json.dumps(round_json(row), default=str))
            elif action == "resume":
                for row in Round.objects.filter(project=project, status__in=Round.ACTIVE_STATUSES):
                    sent = [str(work) for work in rounds.round_resume(round_id=row.id)]
                    self.stdout.write(f"round {row.number}: {sent}")
            else:
                self._run_sync(project, strategy)
        except rounds.RoundError as exc:
            raise CommandError(str(exc)) from exc

    def _run_sync(self, project: Project, strategy: str | None) -> None:
        current = Round.objects.filter(project=project, status__in=Round.ACTIVE_STATUSES).order_by("-number").first()
        if current is None:
            current = rounds.round_request_start(
                project=project, user=None, strategy=strategy or "active", run_here=True
            )
        elif strategy and strategy != current.strategy:
            self.stderr.write(
                f"round {current.number} goes on as {current.strategy}; --strategy applies to a new round"
            )
        row = rounds.round_run_sync(round_id=current.id)
        self.stdout.write(f"round {row.number}: {row.status} {row.failure_reason}".rstrip())
        self.stdout.write(json.dumps({"metrics": round_json(row)["metrics"], "cost": row.cost}, default=str)[:4000])
