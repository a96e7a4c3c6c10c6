"""Hostile input (issue 15 point 9), through the surfaces a user or a script reaches: file uploads (the
upload form, then the import job), the project setup form, the REST endpoint and the labelling POSTs.
Every case is either refused with a precise message, the database unchanged, or taken exactly as
sent. Runs on SQLite and (``-m postgres``) on PostgreSQL, where NUL and surrogates used to crash."""

# ruff: noqa: E501  (the corpus tables keep one case per line, messages in full)
from __future__ import annotations

import gzip
import hashlib
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from annotate.forms_setup import parse_label_lines
from annotate.models import (
    Adjudication,
    Annotation,
    ApiToken,
    ImportJob,
    Item,
    Label,
    Lease,
    Project,
    Round,
    Skip,
)
from annotate.services.accounts import user_create
from annotate.services.imports import import_run
from annotate.services.labeling import next_item_for
from annotate.services.projects import LabelInput, project_create
from tests.integration.test_setup import form_data

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

LABELS = [("positive", "A"), ("negative", "B"), ("👍", "C"), ("1", "D"), ("2", "E"), ("very good", "F")]
TABLES: tuple[type[Any], ...] = (Project, Label, Item, Annotation, Skip, Lease, Round, Adjudication)


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def project() -> Project:
    project = project_create(name="hostile", labels=[LabelInput(n, c) for n, c in LABELS], test_set_size=0)
    Item.objects.create(project=project, external_id="seed", text="already here", text_hash="h-seed")
    return project


def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in TABLES}


def client_for(role: str, name: str) -> tuple[Client, Any]:
    user = user_create(username=name, password="pw-12345678", roles=[role])
    client = Client()
    client.force_login(user)
    return client, user


# ---- uploads ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    message: str  # the job's error starts with it


@dataclass(frozen=True)
class Imported:
    rows: list[tuple[str, str, str | None, dict[str, Any]]]  # (id, text, gold label, metadata), file order


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("sheet.xml", "<x/>")
    return out.getvalue()


BIG = "x" * (10 * 1024 * 1024)
NESTED = '{"text": "deep", "m": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
NESTED_40 = '{"text": "deep", "m": ' + "[" * 40 + "]" * 40 + "}\n"
WIDE_HEADER = ["id", "text", *(f"c{n}" for n in range(998))]
WIDE = ",".join(WIDE_HEADER) + "\n" + ",".join(["w1", "wide", *(str(n) for n in range(998))]) + "\n"
UTF16 = "id,text\n1,hello\n".encode("utf-16")

UPLOADS: list[tuple[str, str, str | bytes, Refused | Imported]] = [
    ("rtl marks", "rtl.csv", "id,text\nr1,\u200fשלום\u202e abc\u202c\n", Imported([("r1", "\u200fשלום\u202e abc\u202c", None, {})])),
    (
        # stored as written (not normalised); its composed twin is the same text once normalised (NFC), which
        # an upload skips as a duplicate by default (imports.py, skip_duplicates)
        "combining characters are not normalised",
        "comb.csv",
        "id,text\nc1,cafe\u0301\nc2,caf\u00e9\n",
        Imported([("c1", "cafe\u0301", None, {})]),
    ),
    ("lone surrogate", "sur.jsonl", '{"text": "a\\udc00b"}\n', Refused("sur.jsonl, line 1: text contains a lone surrogate U+DC00 at character 2")),
    (
        "emoji in text, id and label",
        "emoji.csv",
        "id,text,label\n🚀1,great 👍🏽 stuff,👍\n",
        Imported([("🚀1", "great 👍🏽 stuff", "👍", {})]),
    ),
    ("NUL in a CSV cell", "nul.csv", "id,text\nn1,a\x00b\n", Refused("nul.csv, line 2: a NUL character (\\x00) at column 5")),
    ("escaped NUL in JSONL", "nul.jsonl", '{"text": "a\\u0000"}\n', Refused("nul.jsonl, line 1: text contains a NUL character (\\x00) at character 2")),
    ("NUL in a metadata value", "nulm.jsonl", '{"text": "a", "src": "x\\u0000"}\n', Refused("nulm.jsonl, line 1: column 'src' contains a NUL character")),
    ("10 MB text cell", "big.csv", "id,text\nb1," + BIG + "\n", Refused("big.csv, line 2: text is 10,485,760 characters, over the 20,000 limit")),
    ("10 MB metadata cell", "bigmeta.csv", "id,text,notes\nb2,short," + BIG + "\n", Imported([("b2", "short", None, {"notes": BIG})])),
    ("1,000 columns", "wide.csv", WIDE, Imported([("w1", "wide", None, {f"c{n}": str(n) for n in range(998)})])),
    ("UTF-8 BOM", "bom.csv", "\ufeffid,text\nb1,hi\n", Imported([("b1", "hi", None, {})])),
    ("UTF-8 BOM in JSONL", "bom.jsonl", '\ufeff{"id": "j1", "text": "hi"}\n', Imported([("j1", "hi", None, {})])),
    ("UTF-16 file", "utf16.csv", UTF16, Refused("utf16.csv: this is not a text file but UTF-16 text (byte-order mark FF FE)")),
    (
        "mixed CRLF and LF line ends",
        "mixed.csv",
        "id,text\r\nm1,one\nm2,two\r\nm3,\"three\r\nlines\"\n",
        Imported([("m1", "one", None, {}), ("m2", "two", None, {}), ("m3", "three\r\nlines", None, {})]),
    ),
    ("a bare CR inside a field", "cr.csv", "id,text\nm1,one\rtwo\n", Refused("cr.csv: a carriage return inside an unquoted field on line 2")),
    ("gzip named .csv", "data.csv", gzip.compress(b"id,text\n1,a\n"), Refused("data.csv: this is not a text file but a gzip archive")),
    ("xlsx renamed .csv", "sheet.csv", _zip(), Refused("sheet.csv: this is not a text file but a zip archive")),
    ("JSON with a repeated key", "dup.jsonl", '{"text": "a", "text": "b"}\n', Refused("dup.jsonl, line 1: invalid JSON: repeated key 'text' in one object")),
    ("100,000 levels of JSON", "deep.jsonl", NESTED, Refused("deep.jsonl, line 1: JSON nested too deeply")),
    ("40 levels of metadata", "deep40.jsonl", NESTED_40, Refused("deep40.jsonl, line 1: column 'm' is nested over 32 levels deep")),
    ("NaN in JSON", "nan.jsonl", '{"text": "a", "score": NaN}\n', Refused("nan.jsonl, line 1: invalid JSON: NaN is not a JSON number")),
    ("a 5,000-digit number", "num.jsonl", '{"text": "a", "n": ' + "9" * 5000 + "}\n", Refused("num.jsonl, line 1: invalid JSON: a number of 5,000 digits (the most a JSON number may have here is 4,300): write long ids and numbers as strings, in quotes")),
    ("a 5,000-digit id", "numid.jsonl", '{"id": ' + "9" * 5000 + ', "text": "a"}\n', Refused("numid.jsonl, line 1: invalid JSON: a number of 5,000 digits")),
    (
        "numbers as labels",
        "numbers.jsonl",
        '{"id": 7, "text": "seven", "label": 1}\n{"id": "8", "text": "eight", "label": "2"}\n',
        Imported([("7", "seven", "1", {}), ("8", "eight", "2", {})]),
    ),
    ("a float label", "float.jsonl", '{"text": "a", "label": 1.0}\n', Refused("float.jsonl, line 1: 'label' must be a string or an integer, not 1.0")),
    ("a boolean label", "bool.jsonl", '{"text": "a", "label": true}\n', Refused("bool.jsonl, line 1: 'label' must be a string or an integer, not true")),
    ("an object as id", "objid.jsonl", '{"id": {"a": 1}, "text": "a"}\n', Refused("objid.jsonl, line 1: 'id' must be a string or an integer")),
    (
        "a label differing only by case",
        "case.csv",
        "id,text,label\nk1,a,Positive\n",
        Refused("case.csv, line 2: unknown label 'Positive' (known labels: 1, 2, negative, positive, very good, 👍); labels must match exactly: did you mean 'positive'?"),
    ),
    (
        "a label differing only by inner whitespace",
        "space.csv",
        "id,text,label\nk1,a,very  good\n",
        Refused("space.csv, line 2: unknown label 'very  good'"),
    ),
    ("a label with outer spaces is trimmed", "trim.csv", "id,text,label\nk1,a,  positive \n", Imported([("k1", "a", "positive", {})])),
    ("a CSV header only", "header.csv", "id,text,label\n", Refused("header.csv: no rows after the header")),
    ("an empty JSONL line only", "blank.jsonl", "\n\n", Refused("blank.jsonl: no rows: the file holds only blank lines (JSONL: one JSON object per line)")),
    (
        "JSONL with a trailing partial line",
        "partial.jsonl",
        '{"text": "ok"}\n{"text": "cut of',
        Refused("partial.jsonl, line 2: invalid JSON: Unterminated string starting at column 10 (the file ends in the middle of this line)"),
    ),
    ("JSONL without a final newline", "nofinal.jsonl", '{"id": "z", "text": "ok"}', Imported([("z", "ok", None, {})])),
    ("an unterminated quote", "quote.csv", 'id,text\nq1,"never closed\nq2,b\n', Refused("quote.csv: unterminated quote starting on line 2")),
    ("a repeated column", "cols.csv", "id,text,text\n1,a,b\n", Refused("cols.csv, line 1: repeated column names in the header")),
    # Issue 34: a near-miss of text / id / label would import the rows, their labels kept as metadata.
    ("a Label header", "Label.csv", "text,Label\na,positive\n", Refused("Label.csv, line 1: column 'Label' is not 'label' (it differs by letter case): did you mean 'label'?")),
    ("a Text header", "Text.csv", "Text,label\na,positive\n", Refused("Text.csv, line 1: column 'Text' is not 'text' (it differs by letter case): did you mean 'text'?")),
    ("a zero-width space in a header", "zw.csv", "text,\u200blabel\na,positive\n", Refused("zw.csv, line 1: column '\\u200blabel' is not 'label' (it differs by invisible characters inside (U+200B ZERO WIDTH SPACE)): did you mean 'label'?")),
    ("a BOM inside a header", "bomcol.csv", "text,\ufefflabel\na,positive\n", Refused("bomcol.csv, line 1: column '\\ufefflabel' is not 'label' (it differs by invisible characters inside (U+FEFF ZERO WIDTH NO-BREAK SPACE)): did you mean 'label'?")),
    ("an ID header beside id-like metadata", "ID.csv", "ID,text\n1,a\n", Refused("ID.csv, line 1: column 'ID' is not 'id'")),
    ("a JSONL key Label", "Label.jsonl", '{"text": "a", "Label": "positive"}\n', Refused("Label.jsonl, line 1: key 'Label' is not 'label' (it differs by letter case): did you mean 'label'?")),
    ("a JSONL key with a word joiner", "wj.jsonl", '{"text": "a"}\n{"text": "b", "lab\\u2060el": "positive"}\n', Refused("wj.jsonl, line 2: key 'lab\\u2060el' is not 'label' (it differs by invisible characters inside (U+2060 WORD JOINER))")),
    ("an unrelated capitalised column is metadata", "Source.csv", "text,Source\na,web\n", Imported([("Source.csv:2", "a", None, {"Source": "web"})])),
    # Issue 34: a text the annotator would see blank is empty, like a whitespace-only one.
    *[
        (f"a text of only U+{ord(c):04X}", "zw-text.csv", f"id,text\nz1,{c}{c} \n", Refused("zw-text.csv, line 2: empty text (only invisible characters such as zero-width spaces)"))
        for c in "\u200b\u200c\u200d\u2060\ufeff"
    ],
    ("a zero-width text in JSONL", "zw-text.jsonl", '{"text": "\\u200b\\u200d"}\n', Refused("zw-text.jsonl, line 1: empty text (only invisible characters")),
    ("a zero-width joiner inside an emoji is text", "zwj.csv", "id,text\nz2,👩\u200d💻\n", Imported([("z2", "👩\u200d💻", None, {})])),
    # Issue 34: binary files under a text name, in words.
    ("UTF-16 LE without a BOM", "utf16le.csv", "id,text\n1,hello\n".encode("utf-16-le"), Refused("utf16le.csv: this looks like UTF-16 text without a byte-order mark (every other byte is NUL): save it as UTF-8")),
    ("UTF-16 BE without a BOM", "utf16be.csv", "id,text\n1,hello\n".encode("utf-16-be"), Refused("utf16be.csv: this looks like UTF-16 text without a byte-order mark")),
    ("a PNG named .csv", "image.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), Refused("image.csv: this is not a text file but a PNG image")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "name", "content", "expected"), UPLOADS, ids=[u[0] for u in UPLOADS])
def test_upload_corpus(
    project: Project,
    case: str,
    name: str,
    content: str | bytes,
    expected: Refused | Imported,
    django_capture_on_commit_callbacks: Any,
) -> None:
    client, _ = client_for("ml", "mia")
    before = snapshot()
    raw = content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/p/{project.pk}/import/", {"file": SimpleUploadedFile(name, raw)})
    assert response.status_code == 302, response.content.decode()[:2000]
    job = import_run(job_id=ImportJob.objects.get(project=project).pk)
    if isinstance(expected, Refused):
        assert (job.status, job.error[: len(expected.message)]) == ("failed", expected.message), job.error[:300]
        assert snapshot() == before
        page = client.get(f"/p/{project.pk}/import/{job.pk}/").content.decode()
        assert "Nothing of this file was imported." in page
        return
    assert (job.status, job.error) == ("done", "")
    got = [
        (i.external_id, i.text, i.gold_label.name if i.gold_label else None, i.metadata)
        for i in Item.objects.filter(project=project).exclude(external_id="seed").order_by("id")
    ]
    assert got == expected.rows
    for item in Item.objects.filter(project=project).exclude(external_id="seed"):
        assert item.text_hash == hashlib.sha256(item.text.encode()).hexdigest()


def test_an_empty_upload_names_the_file_and_creates_no_job(project: Project) -> None:
    client, _ = client_for("ml", "mia")
    before = snapshot()
    response = client.post(f"/p/{project.pk}/import/", {"file": SimpleUploadedFile("nothing.jsonl", b"")})
    assert "nothing.jsonl: the file is empty" in response.content.decode()
    assert snapshot() == before and not ImportJob.objects.exists()


# ---- the setup form ----------------------------------------------------------------------------------

LABEL_LINES = [
    ("names differing only by case", "Positive\npositive", "line 2: the label 'positive' differs from 'Positive' only by case or spacing"),
    ("names differing only by spacing", "very good\nvery  good", "line 2: the label 'very  good' differs from 'very good' only by case or spacing"),
    ("an invisible RTL mark in a name", "positive\n\u200fnegative", "line 2: the label name contains an invisible character U+200F"),
    ("a zero-width space in a name", "posi\u200btive\nnegative", "line 1: the label name contains an invisible character U+200B"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "message"), LABEL_LINES, ids=[c[0] for c in LABEL_LINES])
def test_label_lines_corpus(case: str, text: str, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_label_lines(text)
    assert err.value.messages == [message]


def test_emoji_numbers_and_combining_characters_are_kept_exactly_as_label_names() -> None:
    labels = parse_label_lines("👍 | thumbs up | 👍\n1\ncafe\u0301\ncaf\u00e9")
    assert [(lab.name, lab.code) for lab in labels] == [("👍", "👍"), ("1", ""), ("cafe\u0301", ""), ("caf\u00e9", "")]


SETUP_FIELDS = [
    ("a NUL in the guidelines", {"guidelines": "ok\x00"}, "Null characters are not allowed."),
    ("a NUL in a label line", {"labels_text": "Sports\nPoli\x00tics"}, "Null characters are not allowed."),
    ("a 5,000-digit seed", {"seed": "9" * 5000}, "Enter a whole number."),
    ("a seed beyond 64 bits", {"seed": "9" * 30}, "Ensure this value is less than or equal to"),
    ("an emoji batch size", {"batch_size": "🚀"}, "Enter a whole number."),
]


@pytest.mark.parametrize(("case", "fields", "message"), SETUP_FIELDS, ids=[c[0] for c in SETUP_FIELDS])
def test_setup_form_corpus(case: str, fields: dict[str, str], message: str) -> None:
    client, _ = client_for("ml", "mia")
    before = snapshot()
    data = form_data(**fields)
    response = client.post("/setup/new/", data)
    assert response.status_code == 400 and message in response.content.decode()
    assert snapshot() == before


# ---- the REST endpoint -----------------------------------------------------------------------------

REST_BODIES: list[tuple[str, bytes, str, int, str]] = [
    ("JSON with a repeated key", b'{"strategy": "random", "strategy": "active"}', "application/json", 400, "repeated key 'strategy'"),
    ("100,000 levels of JSON", b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "nested too deeply"),
    ("a JSON array", b'["random"]', "application/json", 400, "the body must be a JSON object"),
    ("bytes that are not UTF-8", b'{"strategy": "\xff"}', "application/json", 400, "unreadable body"),
    ("a NUL in the strategy", b'{"strategy": "random\\u0000"}', "application/json", 400, "unknown strategy"),
    ("an emoji strategy", '{"strategy": "🚀"}'.encode(), "application/json", 400, "unknown strategy '🚀'"),
    ("a number as strategy", b'{"strategy": 5}', "application/json", 400, "unknown strategy '5'"),
    ("NaN as strategy", b'{"strategy": NaN}', "application/json", 400, "NaN is not a JSON number"),
    ("an 11 MB body", b'{"strategy": "' + b"x" * 11_000_000 + b'"}', "application/json", 400, "the body is over 10,485,760 bytes"),
    ("a 3 MB strategy", b'{"strategy": "' + b"y" * 3_000_000 + b'"}', "application/json", 400, "unknown strategy 'yyyy"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "body", "content_type", "status", "message"), REST_BODIES, ids=[c[0] for c in REST_BODIES]
)
def test_rest_corpus(project: Project, case: str, body: bytes, content_type: str, status: int, message: str) -> None:  # fmt: skip
    _, user = client_for("ml", "mia")
    ApiToken.objects.create(user=user, digest=hashlib.sha256(b"t0ken").hexdigest())
    before = snapshot()
    response = Client().post(
        f"/api/projects/{project.pk}/rounds/", body, content_type=content_type, HTTP_AUTHORIZATION="Token t0ken"
    )
    assert response.status_code == status, response.content[:500]
    assert message in response.json()["error"] and len(response.content) < 1000
    assert snapshot() == before


@pytest.mark.parametrize("token", ["Token \u202egnirts", "Token 👍", "Token " + "a" * 10_000, "Bearer t0ken", "Token"])
def test_rest_hostile_tokens_are_401(project: Project, token: str) -> None:
    before = snapshot()
    response = Client().post(f"/api/projects/{project.pk}/rounds/", HTTP_AUTHORIZATION=token.encode().decode("latin-1"))
    assert response.status_code == 401 and "missing or unknown token" in response.json()["error"]
    assert snapshot() == before


# ---- labelling POSTs -------------------------------------------------------------------------------


@pytest.fixture
def leased(project: Project) -> tuple[Client, Item, Project]:
    """An annotator holding the lease on a batch item whose text is RTL + emoji."""
    from annotate.models import BatchItem

    item = Item.objects.create(project=project, external_id="b1", text="\u200fמה 👍", text_hash="h-b1")
    Item.objects.create(project=project, external_id="b2", text="other", text_hash="h-b2")
    rnd = Round.objects.create(project=project, number=1, status=Round.Status.LABELING)
    BatchItem.objects.create(round=rnd, item=item, source="active", rank=0)
    client, user = client_for("annotator", "ann")
    assert next_item_for(project=project, annotator=user) == item
    return client, item, project


LABEL_POSTS: list[tuple[str, Callable[[Item, Project], dict[str, str]], int, str]] = [
    ("an item id beyond 64 bits", lambda i, p: {"item": "9" * 30, "label": _label(p, "positive")}, 400, "unknown item"),
    ("a negative item id", lambda i, p: {"item": "-1", "label": _label(p, "positive")}, 400, "unknown item"),
    ("an item id with a NUL", lambda i, p: {"item": f"{i.pk}\x00", "label": _label(p, "positive")}, 400, "unknown item"),
    ("an emoji as label", lambda i, p: {"item": str(i.pk), "label": "👍"}, 400, "unknown label"),
    ("another project's label", lambda i, p: {"item": str(i.pk), "label": _foreign_label()}, 400, "unknown label"),
    ("a label id with spaces and RTL", lambda i, p: {"item": str(i.pk), "label": "\u200f 1"}, 400, "unknown label"),
]  # fmt: skip


def _label(project: Project, name: str) -> str:
    return str(Label.objects.get(project=project, name=name).pk)


def _foreign_label() -> str:
    other = project_create(name="elsewhere", labels=[LabelInput("x", "X"), LabelInput("y", "Y")])
    return str(Label.objects.filter(project=other).first().pk)  # type: ignore[union-attr]


@pytest.mark.parametrize(("case", "data", "status", "message"), LABEL_POSTS, ids=[c[0] for c in LABEL_POSTS])
def test_label_post_corpus(
    leased: tuple[Client, Item, Project], case: str, data: Callable[[Item, Project], dict[str, str]], status: int, message: str
) -> None:  # fmt: skip
    client, item, project = leased
    fields = data(item, project)
    before = snapshot()
    response = client.post(f"/p/{project.pk}/annotate/label/", fields, HTTP_HX_REQUEST="true")
    assert response.status_code == status and message in response.content.decode(), response.content.decode()[:800]
    assert snapshot() == before


@pytest.mark.parametrize("seconds", ["NaN", "inf", "-1e309", "1e400", "١٢", "\x00"])
def test_garbled_timings_never_cost_the_label(leased: tuple[Client, Item, Project], seconds: str) -> None:
    client, item, project = leased
    data = {"item": str(item.pk), "label": _label(project, "👍"), "seconds": seconds}
    response = client.post(f"/p/{project.pk}/annotate/label/", data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    annotation = Annotation.objects.get(item=item)
    assert annotation.label.name == "👍" and annotation.seconds_spent is not None and annotation.seconds_spent >= 0


SKIP_POSTS = [
    ("a NUL in the reason", {"reason": "unclear\x00"}, "Null characters are not allowed."),
    ("a reason over the limit", {"reason": "é" * 1000}, "Ensure this value has at most"),
    ("an item of another project", {"item": "other-project"}, "unknown item"),
    ("an item not leased to me", {"item": "b2"}, "not assigned to you"),
]


@pytest.mark.parametrize(("case", "fields", "message"), SKIP_POSTS, ids=[c[0] for c in SKIP_POSTS])
def test_skip_post_corpus(
    leased: tuple[Client, Item, Project], case: str, fields: dict[str, str], message: str
) -> None:
    client, item, project = leased
    data = {"item": str(item.pk), "reason": "fine", **fields}
    if data["item"] == "b2":
        data["item"] = str(Item.objects.get(project=project, external_id="b2").pk)
    elif data["item"] == "other-project":
        other = project_create(name="elsewhere", labels=[LabelInput("x", "X"), LabelInput("y", "Y")])
        data["item"] = str(Item.objects.create(project=other, external_id="o", text="o", text_hash="h-o").pk)
    before = snapshot()
    response = client.post(f"/p/{project.pk}/annotate/skip/", data, HTTP_HX_REQUEST="true")
    assert response.status_code in (400, 409) and message in response.content.decode(), response.content.decode()[:800]
    assert snapshot() == before


def test_a_skip_reason_in_rtl_with_emoji_and_combining_marks_is_kept_exactly(
    leased: tuple[Client, Item, Project],
) -> None:
    client, item, project = leased
    reason = "\u202eלא ברור\u202c 🤷🏽\u200d♀️ cafe\u0301"
    response = client.post(f"/p/{project.pk}/annotate/skip/", {"item": str(item.pk), "reason": reason})
    assert response.status_code == 303
    assert Skip.objects.get(item=item).reason == reason
