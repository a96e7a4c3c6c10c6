"""The auto-labelling measurement (annotate/simulation/autolabel_eval.py) on a simulation job that was
stopped before it got there (its budget ran out mid-run): the job's project as it stands, with the
adapters of its last finished round; a round still open is marked failed first (its labels stay, it
trained nothing that counts). Records go to <out>/after-cut/autolabel.jsonl, as the harness writes
them (with the labels the adapters were trained on), apart from the records of jobs that got there.

    VAR_DIR=<the job's VAR_DIR> python bench/sim_autolabel_after.py --out <simulate --out folder> [--job active:0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the simulate --out folder (spec.json)")
    p.add_argument("--job", default="active:0")
    a = p.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from annotate.models import Project, Round
    from annotate.simulation import harness as sim

    spec = sim.spec_from_json(json.loads((a.out / "spec.json").read_text()))
    if not spec.autolabel_targets:
        spec = sim.replace(spec, autolabel_targets=(0.90, 0.95))
    data = sim.spec_data(spec)
    job = sim.Job.parse(a.job)
    project = Project.objects.order_by("-id").first()
    if project is None:
        print("no project in this database", file=sys.stderr)
        return 1
    open_rounds = Round.objects.filter(project=project).exclude(status__in=[Round.Status.DONE, Round.Status.FAILED])
    cut = open_rounds.update(
        status=Round.Status.FAILED, failure_reason="simulation stopped by its budget", finished_at=timezone.now()
    )
    print(f"project {project.pk}: {cut} open round(s) marked failed", flush=True)
    annotator, _ = get_user_model().objects.get_or_create(username=sim.ANNOTATOR)
    # a folder of their own: never mixed with the records of jobs that reached the end
    spec = sim.replace(spec, out_dir=spec.out_dir / "after-cut")
    with sim.loop_options(spec.loop_options):
        found = sim._autolabel(spec=spec, data=data, job=job, project=project, annotator=annotator, log=print)
    print(f"{len(found)} records in {spec.autolabel_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
