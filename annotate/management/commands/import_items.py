"""Import a CSV/JSONL file into a project, with a progress bar; exits non-zero with the precise error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from annotate.selectors.projects import project_by_ref
from annotate.services.imports import ImportFailed, import_items
from annotate.services.projects import test_set_draw


class Command(BaseCommand):
    help = "Import items (columns: text, optional id, label, anything else as metadata) into a project."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("project", help="project name or id")
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--gold-for-test", action="store_true", help="file gives gold labels (id,label) of test items"
        )
        parser.add_argument(
            "--keep-duplicates",
            action="store_true",
            help="also import rows whose (normalised) text is already in the project; by default they are skipped",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        key = opts["project"]
        project = project_by_ref(key)
        if project is None:
            raise CommandError(f"no project {key!r} (give its id or name)")
        path: Path = opts["path"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        size = path.stat().st_size
        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"validating {path.name}")

        def progress(done: int, total: int) -> None:
            bar.update(done - bar.n)

        try:
            report = import_items(
                project=project,
                path=path,
                progress=progress,
                gold_for_test=opts["gold_for_test"],
                skip_duplicates=not opts["keep_duplicates"],
            )
        except ImportFailed as exc:
            bar.close()
            raise CommandError(str(exc)) from exc
        bar.update(size - bar.n)
        bar.close()
        test_size = 0 if opts["gold_for_test"] else test_set_draw(project=project)
        self.stdout.write(
            self.style.SUCCESS(
                f"imported {report.created:,} rows in {report.seconds:.1f}s "
                f"({report.rows / report.seconds:,.0f} rows/s)"
            )
        )
        if report.skipped:
            self.stdout.write(
                self.style.WARNING(f"{report.skipped:,} rows skipped: their text is already in the project")
            )
        if report.duplicate_texts:
            self.stdout.write(
                self.style.WARNING(f"{report.duplicate_texts:,} rows repeat an earlier text (kept, not merged):")
            )
            for line, item_id, first_id, first_line in report.duplicates_sample[:10]:
                where = f"line {first_line}" if first_line else "already in the project"
                self.stdout.write(f"  line {line} (id {item_id}) repeats id {first_id} ({where})")
        if test_size:
            self.stdout.write(f"test set: {test_size:,} items (fixed random sample)")
