"""Asking for auto-labelling three ways — the ML page, REST, ``manage.py autolabel`` — and what each
records and shows; the work itself runs inline here (tasks' bodies in this process, real engine)."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from annotate.models import ApiToken, AutolabelRun, Calibration, DeadLetter
from annotate.services import autolabel as auto
from annotate.services.accounts import user_create
from tests.integration.round_helpers import TEST_OPTIONS, trec_project

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.data]


@pytest.fixture(autouse=True)
def _tiny(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    monkeypatch.setenv("ALANN_LOOP_OPTIONS", TEST_OPTIONS)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_ml_page_calibrate_review_launch_and_progress(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    client = Client()
    client.force_login(user_create(username="mia", password="pw-12345678", roles=["ml"]))
    home = reverse("autolabel_home", args=[project.pk])
    assert client.get(home).status_code == 200

    response = client.post(reverse("autolabel_calibrate", args=[project.pk]), {"target": "0.95", "cascade": "none"})
    assert response.status_code == 302
    row = Calibration.objects.get(project=project)
    assert row.status == "pending"  # a worker would take it from here
    auto.calibration_run(calibration_id=row.id)
    page = client.get(home).content.decode()
    assert "Review thresholds" in page and page.count('class="never"') == 6 and "ECE" in page

    bad = client.post(
        reverse("autolabel_launch", args=[project.pk]), {"audit_share": "0.9"}, headers={"HX-Request": "true"}
    )
    assert bad.status_code == 200 and "audit_share" in bad.content.decode()
    assert not AutolabelRun.objects.exists()
    client.post(
        reverse("autolabel_launch", args=[project.pk]),
        {"audit_share": "0.02", "max_shards_in_flight": 1, "chunk_size": 16},
    )
    run = AutolabelRun.objects.get(project=project)
    assert (run.max_shards_in_flight, run.chunk_size) == (1, 16)
    auto.run_inline(lambda send: auto.run_plan(run_id=run.id, dispatch=send))
    status = client.get(reverse("autolabel_status", args=[project.pk]))
    assert status.status_code == 286  # stop polling: nothing is working any more
    body = status.content.decode()
    assert "Run #" in body and "44 / 44 items" in body and 'data-tier="model"' in body


def test_rest_calibration_and_run(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir)
    user = user_create(username="mlbot", password="pw-12345678", roles=["ml"])
    ApiToken.objects.create(user=user, digest=hashlib.sha256(b"secret-token").hexdigest())
    annotator = user_create(username="ann", password="pw-12345678", roles=["annotator"])
    ApiToken.objects.create(user=annotator, digest=hashlib.sha256(b"ann-token").hexdigest())
    client, auth = Client(), {"Authorization": "Token secret-token"}
    start = reverse("api_calibration_start", args=[project.pk])
    assert client.post(start, {}, headers={"Authorization": "Token ann-token"}).status_code == 403
    assert client.post(start, {"cascade": "magic"}, headers=auth).status_code == 400
    created = client.post(start, {"cascade": "none"}, content_type="application/json", headers=auth)
    assert created.status_code == 201
    auto.calibration_run(calibration_id=created.json()["id"])
    body = client.get(created.json()["url"], headers=auth).json()
    assert body["status"] == "done" and len(body["thresholds"]) == 6 and body["budget"]["n_items"] == 44

    launch = reverse("api_autolabel_start", args=[project.pk])
    assert client.post(launch, {"audit_share": "lots"}, headers=auth).status_code == 400
    first = client.post(launch, {"audit_share": 0.02}, content_type="application/json", headers=auth)
    assert first.status_code == 201
    assert client.post(launch, {}, headers=auth).status_code == 409  # one run at a time
    auto.run_inline(lambda send: auto.run_plan(run_id=first.json()["id"], dispatch=send))
    state = client.get(first.json()["url"], headers=auth).json()
    assert state["status"] == "done" and state["progress"]["percent"] == 100 and state["tiers"][0]["tried"] == 44
    assert state["prefix_cache_hit_rate"] is not None and 0.0 <= state["prefix_cache_hit_rate"] <= 1.0


def test_command_calibrates_launches_and_exports(shared_data: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    project = trec_project(shared_data, tmp_path, model_dir=tiny_llama_dir, mass_threshold=0.5)
    with pytest.raises(CommandError, match="calibrate first"):
        call_command("autolabel", "launch", project.name, "--sync")
    out = io.StringIO()
    call_command("autolabel", "calibrate", project.name, "--sync", "--cascade", "none", stdout=out)
    assert "calibration #" in out.getvalue() and "threshold never" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    call_command("autolabel", "launch", project.name, "--sync", stdout=out, stderr=err)
    assert "GPU-hours" in out.getvalue() and "done: 44/44 items (100 %)" in out.getvalue()
    assert "dead letters 44" in out.getvalue()  # label mass under 0.5 everywhere
    out = io.StringIO()
    call_command("autolabel", "status", project.name, stdout=out)
    assert "run #" in out.getvalue()
    assert DeadLetter.objects.count() == 44
    target = tmp_path / "dataset.csv"
    call_command("autolabel", "export", project.name, "--format", "csv", "-o", str(target))
    rows = list(csv.DictReader(target.open()))
    assert len(rows) == 16 and {r["source"] for r in rows} == {"human"}
