"""Set up the demo: a TREC project (or DATA=path), four users with printed passwords (two annotators,
so overlap items get two labels and leads see disagreements; a lead; ML staff), the pool imported
with a fixed random test set, and round 1 requested. Idempotent: a second run keeps the project and
resets the demo passwords."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from annotate.models import Item, Project
from annotate.services.accounts import ensure_groups
from annotate.services.imports import ImportFailed, import_items
from annotate.services.projects import LabelInput, project_create, test_set_draw

TREC_LABELS = {
    "abbreviation": "asks for an abbreviation or what one stands for",
    "description": "asks for a definition, description, manner or reason",
    "entity": "asks for an entity: animal, colour, event, food, product, term, ...",
    "human": "asks for a person, a group or organisation, or a title",
    "location": "asks for a place: city, country, mountain, state, ...",
    "numeric": "asks for a number: count, date, distance, money, period, ...",
}
# Demo knobs: small enough that a CPU round (K=2 adapters on SmolLM2-135M) takes minutes.
DEMO_SETTINGS: dict[str, Any] = {
    "batch_size": 20,
    "oversample": 4.0,
    "random_share": 0.2,
    "ensemble_k": 2,
    "candidate_sample": 600,
    "test_set_size": 200,
    "cold_start_batches": 1,
    "auto_retrain_share": 1.0,  # the round retrains by itself once its batch is labelled
    "overlap_share": 0.2,  # 4 of each 20-item batch go to both annotators: agreement and disagreements to see
    "instructions": "Classify the question by the type of answer it expects. Answer with the label code only.",
    "guidelines": "# TREC question types\n\nPick the type of **answer** the question asks for, not its topic.\n\n"
    + "\n".join(f"- **{name}**: {desc}" for name, desc in TREC_LABELS.items()),
}


# username → role; two annotators so that the overlap share of each batch is labelled twice
DEMO_USERS = {"annotator": "annotator", "annotator2": "annotator", "lead": "lead", "ml": "ml"}


# Printed by `make demo` too (config.processes.demo runs this command in its terminal).
FIRST_RUN_NOTE = (
    "  Passwords: each user changes theirs under 'Password' at the top of every page.\n"
    "  Without the demo, an empty install (no user yet) opens /accounts/first-user/ on the first visit:\n"
    "  it creates the first ML-staff account, who then adds the team on the Team page."
)


class Command(BaseCommand):
    help = "Create the demo project, users and first round."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--data", default="../shared/data/trec", help="folder with train.csv, or a CSV/JSONL file")
        parser.add_argument("--name", default="TREC demo")

    def handle(self, *args: Any, **opts: Any) -> None:
        path = self._data_file(Path(opts["data"]))
        ensure_groups()
        project = Project.objects.filter(name=opts["name"]).first() or self._create(opts["name"], path)
        passwords = {name: self._demo_user(name, role) for name, role in DEMO_USERS.items()}
        from annotate.services.rounds import round_request_start

        if not project.rounds.exists():
            round_request_start(project=project, user=get_user_model().objects.get(username="ml"))
        self.stdout.write(self.style.SUCCESS(f"\nDemo project {project.name!r}: {project.items.count():,} items"))
        for name, password in passwords.items():
            self.stdout.write(f"  user {name:<10} password {password}")
        self.stdout.write(FIRST_RUN_NOTE)
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        (settings.VAR_DIR / "demo-passwords.txt").write_text(
            "".join(f"{name} {password}\n" for name, password in passwords.items())
        )

    def _data_file(self, data: Path) -> Path:
        path = data / "train.csv" if data.is_dir() else data
        if not path.is_file():
            raise CommandError(f"{path}: no data (pass DATA=folder-with-train.csv or DATA=file.csv)")
        return path

    def _create(self, name: str, path: Path) -> Project:
        labels = self._labels(path)
        with transaction.atomic():
            project = project_create(name=name, labels=labels, **DEMO_SETTINGS)
            try:
                report = import_items(project=project, path=path)
            except ImportFailed as exc:
                raise CommandError(str(exc)) from exc
            test_set_draw(project=project)
            # The demo's test set takes its gold labels from the file (as an import of gold labels
            # would), so round 1 is evaluated without anyone labelling 200 test items first.
            Item.objects.filter(project=project, is_test=True, gold_label__isnull=False).update(
                final_label=F("gold_label"), finalized_at=timezone.now()
            )
        self.stdout.write(f"imported {report.created:,} items from {path} in {report.seconds:.1f}s")
        return project

    def _labels(self, path: Path) -> list[LabelInput]:
        import csv

        from django.conf import settings
        from transformers import AutoTokenizer

        from scoring.labels import suggest_codes

        with path.open(newline="", encoding="utf-8") as f:
            names = sorted({row["label"] for row in csv.DictReader(f) if row.get("label")})
        if not names:
            raise CommandError(f"{path}: no label column to take the label set from")
        codes = suggest_codes(AutoTokenizer.from_pretrained(settings.LLM_DIR), names)
        return [LabelInput(n, c, TREC_LABELS.get(n, "")) for n, c in zip(names, codes, strict=True)]

    def _demo_user(self, name: str, role: str) -> str:
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(username=name)
        password = f"{name}-{secrets.token_hex(4)}"
        user.set_password(password)
        user.save()
        user.groups.set(Group.objects.filter(name=role))
        return password
