"""Import: every bad-file case gives a precise message and leaves the database unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from annotate.models import ImportJob, Item, Project
from annotate.services.imports import ImportFailed, import_items, import_run
from annotate.services.projects import LabelInput, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def project() -> Project:
    labels = [LabelInput("positive", "A"), LabelInput("negative", "B")]
    return project_create(name="sentiment", labels=labels, test_set_size=2)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def db_state(project: Project) -> list[tuple[str, str]]:
    return list(Item.objects.filter(project=project).order_by("id").values_list("external_id", "text"))


def test_csv_import_keeps_ids_labels_and_metadata(project: Project, tmp_path: Path) -> None:
    path = write(
        tmp_path, "ok.csv", 'id,text,label,source\n1,"good, really",positive,web\n2,bad,negative,mail\n3,meh,,web\n'
    )
    report = import_items(project=project, path=path)
    assert (report.rows, report.created) == (3, 3)
    first = Item.objects.get(project=project, external_id="1")
    assert first.text == "good, really"
    assert first.gold_label is not None and first.gold_label.name == "positive"
    assert first.metadata == {"source": "web"}
    assert Item.objects.get(external_id="3").gold_label is None


def test_jsonl_import_and_generated_ids(project: Project, tmp_path: Path) -> None:
    rows = [{"text": "fine", "label": "positive", "extra": {"a": 1}}, {"text": "nope"}]
    path = write(tmp_path, "ok.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    import_items(project=project, path=path)
    items = Item.objects.filter(project=project).order_by("id")
    assert [i.external_id for i in items] == ["ok.jsonl:1", "ok.jsonl:2"]
    assert items[0].metadata == {"extra": {"a": 1}}


def test_duplicate_texts_are_reported_not_merged(project: Project, tmp_path: Path) -> None:
    path = write(tmp_path, "dup.csv", "id,text\na,same text\nb,other\nc,same text\n")
    report = import_items(project=project, path=path)
    assert report.created == 3
    assert report.duplicate_texts == 1
    assert report.duplicates_sample == [[4, "c", "a", 2]]


BAD_FILES = [
    ("no_text.csv", "id,body\n1,hello\n", "no_text.csv, line 1: missing 'text' column (found columns: id, body)"),
    ("empty.csv", "id,text\n1,hello\n2,   \n", "empty.csv, line 3: empty text"),
    (
        "bytes.csv",
        b"id,text\n1,hello\n2,caf\xe9\n",
        "bytes.csv, line 3: undecodable bytes at column 6 (the file must be UTF-8)",
    ),
    ("dupid.csv", "id,text\n1,hello\n2,world\n1,again\n", "dupid.csv, line 4: duplicate id '1' (first on line 2)"),
    (
        "label.csv",
        "id,text,label\n1,hello,positive\n2,world,neutral\n",
        "label.csv, line 3: unknown label 'neutral' (known labels: negative, positive)",
    ),
    (
        "long.csv",
        "id,text\n1,hello\n2," + "x" * 20_001 + "\n",
        "long.csv, line 3: text is 20,001 characters, over the 20,000 limit",
    ),
    ("fields.csv", "id,text\n1,hello,extra\n", "fields.csv, line 2: expected 2 fields, found 3"),
    ("bad.jsonl", '{"text": "ok"}\n{"text": \n', "bad.jsonl, line 2: invalid JSON: Expecting value at column 10"),
    ("notext.jsonl", '{"text": "ok"}\n{"body": "x"}\n', "notext.jsonl, line 2: missing 'text' field"),
    ("header.csv", "", "header.csv: the file is empty"),
    ("data.xlsx", "text\nx\n", "data.xlsx: unknown file type: use .csv or .jsonl"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_gives_precise_error_and_leaves_db_unchanged(
    project: Project, tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    import_items(project=project, path=write(tmp_path, "seed.csv", "id,text\nseed,already here\n"))
    before = db_state(project)
    with pytest.raises(ImportFailed) as err:
        import_items(project=project, path=write(tmp_path, name, content))
    assert str(err.value) == message
    assert db_state(project) == before


def test_id_already_in_project_is_rejected(project: Project, tmp_path: Path) -> None:
    import_items(project=project, path=write(tmp_path, "a.csv", "id,text\n1,hello\n"))
    with pytest.raises(ImportFailed, match=r"b.csv, line 2: duplicate id '1' \(already in the project\)"):
        import_items(project=project, path=write(tmp_path, "b.csv", "id,text\n1,again\n"))
    assert Item.objects.filter(project=project).count() == 1


def test_import_job_failure_is_recorded_and_success_draws_test_set(project: Project, tmp_path: Path) -> None:
    bad = ImportJob.objects.create(project=project, filename="bad.csv", path=str(write(tmp_path, "bad.csv", "id,x\n")))
    assert import_run(job_id=bad.id).status == "failed"
    assert "missing 'text' column" in ImportJob.objects.get(id=bad.id).error
    good_path = write(tmp_path, "good.csv", "id,text\n" + "".join(f"{i},{c}\n" for i, c in enumerate("abcdefg")))
    good = ImportJob.objects.create(project=project, filename="good.csv", path=str(good_path), total_bytes=1)
    job = import_run(job_id=good.id)
    assert (job.status, job.rows_created) == ("done", 7)  # 7 rows: 2 test items are under the 30 % cap
    assert Item.objects.filter(project=project, is_test=True).count() == 2
    assert import_run(job_id=good.id).rows_created == 7  # re-running a finished job changes nothing
    assert Item.objects.filter(project=project).count() == 7


def test_gold_labels_for_test_items(project: Project, tmp_path: Path) -> None:
    import_items(project=project, path=write(tmp_path, "pool.csv", "id,text\n1,a\n2,b\n3,c\n"))
    Item.objects.filter(external_id__in=["1", "2"]).update(is_test=True)
    with pytest.raises(ImportFailed, match="line 2: id '3' is not a test-set item"):
        import_items(project=project, path=write(tmp_path, "g.csv", "id,label\n3,positive\n"), gold_for_test=True)
    import_items(
        project=project, path=write(tmp_path, "g2.csv", "id,label\n1,positive\n2,negative\n"), gold_for_test=True
    )
    item = Item.objects.get(external_id="1")
    assert item.final_label is not None and item.final_label.name == "positive"


def test_trec_imports_with_gold_labels(project: Project, shared_data: Path) -> None:
    trec = project_create(
        name="trec",
        labels=[
            LabelInput(n, c)
            for n, c in zip(
                ["abbreviation", "description", "entity", "human", "location", "numeric"], "ABCDEF", strict=True
            )
        ],
    )
    report = import_items(project=trec, path=shared_data / "trec" / "train.csv")
    assert report.created == 5452
    assert Item.objects.filter(project=trec, gold_label__isnull=False).count() == 5452
