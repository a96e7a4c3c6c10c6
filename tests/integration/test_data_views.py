"""Upload through the browser form → background import (eager here; the Celery path is covered by the
worker tests) → status page; exports download; roles are enforced."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from annotate.models import ImportJob, Item
from annotate.services.imports import import_run
from annotate.services.projects import LabelInput, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def ml_client() -> Client:
    user = User.objects.create_user("ml", password="pw-123456")
    user.groups.add(Group.objects.get_or_create(name="ml")[0])
    client = Client()
    client.force_login(user)
    return client


def test_upload_creates_a_job_then_the_task_imports_it(ml_client: Client, django_capture_on_commit_callbacks) -> None:
    project = project_create(name="p", labels=[LabelInput("pos", "A"), LabelInput("neg", "B")], test_set_size=1)
    upload = SimpleUploadedFile("items.csv", b"id,text,label\n1,good,pos\n2,bad,neg\n2,dup,neg\n")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = ml_client.post(f"/p/{project.id}/import/", {"file": upload})
    assert response.status_code == 302
    job = ImportJob.objects.get(project=project)
    assert len(callbacks) == 1  # the Celery task is enqueued only after the job row commits
    import_run(job_id=job.id)
    page = ml_client.get(f"/p/{project.id}/import/{job.id}/")
    assert "items.csv, line 4: duplicate id &#x27;2&#x27; (first on line 3)" in page.content.decode()
    assert Item.objects.filter(project=project).count() == 0
    polled = ml_client.get(f"/p/{project.id}/import/{job.id}/", HTTP_HX_REQUEST="true")
    assert polled.status_code == 286  # htmx: stop polling, the job is over


def test_upload_of_unknown_type_is_refused_in_the_form(ml_client: Client) -> None:
    project = project_create(name="p", labels=[LabelInput("pos", "A")])
    response = ml_client.post(f"/p/{project.id}/import/", {"file": SimpleUploadedFile("x.xlsx", b"text\nx\n")})
    assert response.status_code == 200
    assert "unknown file type: use .csv or .jsonl" in response.content.decode()
    assert not ImportJob.objects.exists()


def test_export_download_and_role_check(ml_client: Client) -> None:
    project = project_create(name="p", labels=[LabelInput("pos", "A")])
    response = ml_client.get(f"/p/{project.id}/export/labels.csv")
    assert response.status_code == 200
    assert b"".join(response.streaming_content).startswith(b"item_id,text_hash")  # type: ignore[attr-defined]
    annotator = User.objects.create_user("ann")
    annotator.groups.add(Group.objects.get_or_create(name="annotator")[0])
    other = Client()
    other.force_login(annotator)
    assert other.get(f"/p/{project.id}/export/labels.csv").status_code == 403
    assert other.get(f"/p/{project.id}/import/").status_code == 403
    assert ml_client.get(f"/p/{project.id}/export/labels.xml").status_code == 404
