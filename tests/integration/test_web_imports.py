"""The web process never loads torch (or any other heavy library): importing its entry points (the WSGI
app, the URL conf and every view) and answering the requests that touch the round flow — an
annotator's labels that start training by themselves, the ML page's retrain and start buttons — leave
``sys.modules`` without torch. Run in a fresh interpreter, so nothing the test session imported counts;
that interpreter has not loaded the task modules either, and the start button's task still reaches
the broker (the run's own Redis database), named and routed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import redis_owner

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "vllm", "faiss", "sentence_transformers", "sklearn", "matplotlib")

SCRIPT = r"""
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)

import config.wsgi, config.urls  # the entry points gunicorn and runserver load
from django.urls import URLResolver, get_resolver
def walk(patterns):
    for p in patterns:
        yield from walk(p.url_patterns) if isinstance(p, URLResolver) else [p.callback]
views = list(walk(get_resolver().url_patterns))

from django.test import Client
from annotate.models import BatchItem, Item, Label, Project, Round
from annotate.services import rounds
from annotate.services.accounts import user_create

ml = user_create(username="ml", password="pw-12345678", roles=["ml", "annotator"])
project = Project.objects.create(name="topics", auto_retrain_share=0.5, batch_size=2)
labels = [Label.objects.create(project=project, name=n, code=n.upper(), order=i) for i, n in enumerate("ab")]
items = [Item.objects.create(project=project, external_id=f"i{i}", text=f"t {i}", text_hash=f"h{i}") for i in range(4)]
first = Round.objects.create(project=project, number=1, status="labeling")
for rank, item in enumerate(items[:2]):
    BatchItem.objects.create(round=first, item=item, source="cold", rank=rank)
client = Client()
client.force_login(ml)
pages = [client.get(f"/p/{project.pk}/annotate/").status_code, client.get(f"/p/{project.pk}/ml/").status_code]
with rounds.driving(first.id):  # this process drives the round: nothing goes to a broker
    for item in items[:2]:
        client.post(f"/p/{project.pk}/annotate/label/", {"item": item.pk, "label": labels[0].pk})
    first.refresh_from_db()
    retrain = client.post(f"/p/{project.pk}/ml/rounds/retrain/").status_code
other = Project.objects.create(name="other")
started = client.post(f"/p/{other.pk}/ml/rounds/start/", {"strategy": "random"}).status_code
import redis
from django.conf import settings
queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
sent = [json.loads(m)["headers"]["task"] for m in queue.lrange("default", 0, -1)]
queue.delete("default")
print(json.dumps({
    "views": len(views), "pages": pages, "retrain": retrain, "status": first.status,
    "started": started, "sent": sent, "loaded": sorted(m for m in %r if m in sys.modules),
}))
"""


@pytest.mark.timeout(120)
def test_the_web_process_imports_no_heavy_library(tmp_path: Path) -> None:
    redis_owner.current().flush()  # the run's own database: nothing but this test's message in it
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1", "VAR_DIR": str(tmp_path)}
    env["ALLOWED_HOSTS"] = "testserver"
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT % (HEAVY,)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["views"] > 10 and result["pages"] == [200, 200]
    assert result["status"] == "training"  # the second label started training (auto-retrain at 50 %)
    assert result["started"] == 302 and result["sent"] == ["annotate.round_begin"]  # to the broker, by name
    assert result["loaded"] == [], f"the web process loaded {result['loaded']}"
