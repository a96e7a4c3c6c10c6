"""Export labels or predictions of a project as CSV or JSONL (to a file or stdout)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.selectors.projects import project_by_ref
from annotate.services.exports import export_labels, export_predictions


class Command(BaseCommand):
    help = "Export labels or predictions: manage.py export PROJECT labels|predictions --format csv|jsonl [-o FILE]"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("project")
        parser.add_argument("what", choices=["labels", "predictions"])
        parser.add_argument("--format", choices=["csv", "jsonl"], default="csv")
        parser.add_argument("-o", "--output", default="-")

    def handle(self, *args: Any, **opts: Any) -> None:
        key = opts["project"]
        project = project_by_ref(key)
        if project is None:
            raise CommandError(f"no project {key!r} (give its id or name)")
        export = export_labels if opts["what"] == "labels" else export_predictions
        out = sys.stdout if opts["output"] == "-" else open(opts["output"], "w", encoding="utf-8", newline="")  # noqa: SIM115
        try:
            for chunk in export(project=project, fmt=opts["format"]):
                out.write(chunk)
        finally:
            if out is not sys.stdout:
                out.close()
