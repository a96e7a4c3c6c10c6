"""Imports under hostile conditions (issue 15 points 1, 2, 7): characters the database cannot take
get a precise per-line error; any unexpected error ends a recorded import as failed with a message;
two imports into one project at once are serialised ("another import is running"); an unterminated
quote says where it starts; an empty upload names the file; a failed import shows no byte count."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections
from django.test import Client

from annotate.models import ImportJob, Item, Project
from annotate.services.imports import PROGRESS_EVERY, ImportBusy, ImportFailed, import_items, import_run
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def project(db: Any) -> Project:
    return project_create(name="hostile", labels=[LabelInput("positive", "A"), LabelInput("negative", "B")])


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return path


def items(project: Project) -> list[tuple[str, str, Any]]:
    return list(Item.objects.filter(project=project).order_by("id").values_list("external_id", "text", "metadata"))


UNSTORABLE = [
    ("nul.csv", "id,text\n1,fine\n2,ab\x00cd\n", "nul.csv, line 3: a NUL character (\\x00) at column 5"),
    ("nul.jsonl", '{"text": "fine"}\n{"text": "ab\\u0000cd"}\n', "nul.jsonl, line 2: text contains a NUL character"),
    ("nulid.jsonl", '{"id": "a\\u0000", "text": "x"}\n', "nulid.jsonl, line 1: id contains a NUL character"),
    (
        "nulmeta.jsonl",
        '{"text": "x", "source": {"deep": ["ok", "b\\u0000"]}}\n',
        "nulmeta.jsonl, line 1: column 'source' contains a NUL character (\\x00) at character 2",
    ),
    (
        "nulkey.jsonl",
        '{"text": "x", "a\\u0000": 1}\n',
        "nulkey.jsonl, line 1: metadata key 'a\\x00' contains a NUL character",
    ),
    (
        "surrogate.jsonl",
        '{"text": "ok \\ud83d here"}\n',
        "surrogate.jsonl, line 1: text contains a lone surrogate U+D83D at character 4: not valid Unicode",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), UNSTORABLE, ids=[u[0] for u in UNSTORABLE])
def test_characters_the_database_cannot_store_are_a_precise_line_error(
    project: Project, tmp_path: Path, name: str, content: str, message: str
) -> None:
    import_items(project=project, path=write(tmp_path, "seed.csv", "id,text\nseed,already here\n"))
    before = items(project)
    with pytest.raises(ImportFailed) as err:
        import_items(project=project, path=write(tmp_path, name, content))
    assert str(err.value).startswith(message), str(err.value)
    assert items(project) == before


def test_an_upload_job_with_a_nul_ends_failed_with_the_line(project: Project, tmp_path: Path) -> None:
    path = write(tmp_path, "upload.csv", "id,text\n1,fine\n2,bad\x00text\n")
    job = ImportJob.objects.create(project=project, filename="upload.csv", path=str(path), total_bytes=1)
    done = import_run(job_id=job.id)
    assert done.status == "failed" and done.finished_at is not None
    assert done.error.startswith("upload.csv, line 3: a NUL character (\\x00) at column 6"), done.error
    assert not Item.objects.filter(project=project).exists()


def test_an_unexpected_error_ends_the_job_failed_with_a_message(project: Project, tmp_path: Path) -> None:
    gone = tmp_path / "removed-before-the-worker-ran.csv"  # the upload vanished from disk: not an ImportFailed
    job = ImportJob.objects.create(project=project, filename="gone.csv", path=str(gone), total_bytes=10)
    done = import_run(job_id=job.id)
    assert done.status == "failed" and done.finished_at is not None
    assert "gone.csv: the import stopped on an unexpected error (FileNotFoundError" in done.error
    assert import_run(job_id=job.id).status == "failed"  # a redelivery leaves it failed


UNTERMINATED = [
    ("q1.csv", 'id,text\n"1,hello\n', "q1.csv: unterminated quote starting on line 2"),
    ("q2.csv", 'id,text\n1,a\n2,"b\n3,c\n4,d\n', "q2.csv: unterminated quote starting on line 3"),
    ("q3.csv", '"id,text\n1,a\n', "q3.csv: header: unterminated quote starting on line 1"),
    ("q4.csv", 'id,text\n1,"ab"c\n', "q4.csv: line 2: malformed CSV: ',' expected after '\"'"),
]


@pytest.mark.parametrize(("name", "content", "message"), UNTERMINATED, ids=[u[0] for u in UNTERMINATED])
def test_strict_reader_says_where_a_quote_opens(
    project: Project, tmp_path: Path, name: str, content: str, message: str
) -> None:
    with pytest.raises(ImportFailed) as err:
        import_items(project=project, path=write(tmp_path, name, content))
    assert str(err.value).startswith(message), str(err.value)
    assert not Item.objects.filter(project=project).exists()


@pytest.fixture
def ml_client(db: Any) -> Client:
    user = User.objects.create_user("ml", password="pw-123456")
    user.groups.add(Group.objects.get_or_create(name="ml")[0])
    client = Client()
    client.force_login(user)
    return client


def test_an_empty_upload_names_the_file(ml_client: Client, project: Project) -> None:
    response = ml_client.post(f"/p/{project.id}/import/", {"file": SimpleUploadedFile("items-empty.csv", b"")})
    assert response.status_code == 200
    assert "items-empty.csv: the file is empty" in response.content.decode()
    assert not ImportJob.objects.exists()


def test_a_failed_import_page_shows_the_error_and_no_byte_count(
    ml_client: Client, project: Project, tmp_path: Path
) -> None:
    path = write(tmp_path, "bad.csv", "id,body\n" + "1,x\n" * 60)
    job = ImportJob.objects.create(project=project, filename="bad.csv", path=str(path), total_bytes=path.stat().st_size)
    import_run(job_id=job.id)
    page = ml_client.get(f"/p/{project.id}/import/{job.id}/").content.decode()
    assert "bad.csv, line 1: missing &#x27;text&#x27; column" in page
    assert "bytes read" not in page and " read</p>" not in page and "<progress" not in page
    assert "Nothing of this file was imported." in page


def _in_thread(target: Callable[[], Any], results: dict[str, Any], key: str) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = target()
        except BaseException as exc:
            results[key] = exc
        finally:
            connections.close_all()  # this thread's own database connection

    thread = threading.Thread(target=run, name=key)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_two_imports_into_one_project_at_once_are_serialised(tmp_path: Path) -> None:
    """Real concurrency: two threads, two database connections. The first import is held inside its
    validation (its progress callback waits) while the second starts: the second is refused with a
    clear message and writes nothing; the first then completes; a third after it works."""
    project = project_create(name="race", labels=[LabelInput("positive", "A")])
    rows = PROGRESS_EVERY + 10  # one progress call inside the first import's validation
    first_file = write(tmp_path, "first.csv", "id,text\n" + "".join(f"a{i},text {i}\n" for i in range(rows)))
    second_file = write(tmp_path, "second.csv", "id,text\n" + "".join(f"a{i},other {i}\n" for i in range(50)))
    inside, second_done = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def hold(done: int, total: int) -> None:
        inside.set()
        assert second_done.wait(60), "the second import never finished"

    first = _in_thread(lambda: import_items(project=project, path=first_file, progress=hold), results, "first")
    assert inside.wait(60), "the first import never reached its validation"
    second = _in_thread(lambda: import_items(project=project, path=second_file), results, "second")
    second.join(60)
    second_done.set()
    first.join(120)
    assert isinstance(results["second"], ImportBusy), results["second"]
    assert str(results["second"]) == (
        "second.csv: another import into this project is running; try again when it has finished"
    )
    assert not isinstance(results["first"], BaseException), results["first"]
    assert results["first"].created == rows
    assert Item.objects.filter(project=project).count() == rows
    assert not Item.objects.filter(project=project, text__startswith="other").exists()
    third = import_items(project=project, path=write(tmp_path, "third.csv", "id,text\nz,after\n"))
    assert third.created == 1  # the slot was released


@pytest.mark.django_db(transaction=True)
def test_an_upload_while_another_import_runs_fails_with_that_message(tmp_path: Path) -> None:
    project = project_create(name="race-jobs", labels=[LabelInput("positive", "A")])
    rows = PROGRESS_EVERY + 10
    big = write(tmp_path, "big.csv", "id,text\n" + "".join(f"b{i},text {i}\n" for i in range(rows)))
    small = write(tmp_path, "small.csv", "id,text\ns1,hello\n")
    inside, release = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def hold(done: int, total: int) -> None:
        inside.set()
        assert release.wait(60)

    first = _in_thread(lambda: import_items(project=project, path=big, progress=hold), results, "first")
    assert inside.wait(60)
    job = ImportJob.objects.create(project=project, filename="small.csv", path=str(small), total_bytes=10)
    done = import_run(job_id=job.id)
    release.set()
    first.join(120)
    assert (done.status, done.error) == (
        "failed",
        "small.csv: another import into this project is running; try again when it has finished",
    )
    assert Item.objects.filter(project=project).count() == rows
    assert connection.vendor in ("sqlite", "postgresql")
