"""Export a project as CSV or JSONL (to a file or stdout): ``dataset`` (what a training script reads:
id, text, final label, split, source, round, annotators, agreement, meta.* — items with a final label),
``labels`` (the audit of every label) or ``predictions``."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.selectors.projects import project_by_ref
from annotate.services.exports import export_labels, export_predictions
from annotate.services.exports_dataset import export_dataset


class Command(BaseCommand):
    help = "Export: manage.py export PROJECT dataset|labels|predictions --format csv|csv_raw|jsonl [-o FILE]"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("project")
        parser.add_argument("what", choices=["dataset", "labels", "predictions"])
        # csv: spreadsheet-safe (a leading ' before = + - @); csv_raw: texts exact (pandas)
        parser.add_argument("--format", choices=["csv", "csv_raw", "jsonl"], default="csv")
        parser.add_argument("-o", "--output", default="-")

    def handle(self, *args: Any, **opts: Any) -> None:
        key = opts["project"]
        project = project_by_ref(key)
        if project is None:
            raise CommandError(f"no project {key!r} (give its id or name)")
        export = {"dataset": export_dataset, "labels": export_labels, "predictions": export_predictions}[opts["what"]]
        out = sys.stdout if opts["output"] == "-" else open(opts["output"], "w", encoding="utf-8", newline="")  # noqa: SIM115
        try:
            for chunk in export(project=project, fmt=opts["format"]):
                out.write(chunk)
        finally:
            if out is not sys.stdout:
                out.close()
