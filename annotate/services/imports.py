"""Import items from CSV or JSONL: columns ``text`` (required), ``id``, ``label``; every other column is
kept as metadata.

Two streaming passes over the file. The first validates every row and reports the first problem
precisely (file, line, what); it writes nothing but progress. The second inserts in chunks inside one
transaction, so a failed import leaves nothing behind. With ``skip_duplicates`` (the upload form's
default) a row whose normalised text (``normalised_text_hash``) is already in the project, or on an
earlier line of the file, is skipped and counted; without it, duplicate texts (same sha256) are
counted and reported with their line numbers, never merged: both rows become items.

What the database or the model cannot take is refused with its line, never cleaned silently: a NUL
character (PostgreSQL stores no NUL in text or JSON), a lone surrogate (not Unicode: neither UTF-8, the
database nor the tokenizer takes it), JSON with a repeated key, NaN/Infinity or nesting deeper than
``MAX_JSON_DEPTH``, a binary file (gzip, zip, UTF-16) under a text name.

One import per project at a time (``_import_slot``: a PostgreSQL advisory lock, a file lock beside the
SQLite database; both vanish with a killed process): a second one is refused with "another import
into this project is running". Any other error ends a recorded import (``import_run``) as failed with
its message; a job never stays "running" because of a bug.
"""

from __future__ import annotations

import array
import contextlib
import csv
import functools
import hashlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from annotate import steppoints
from annotate.models import ImportJob, Item, Label, Project
from annotate.services import jobs
from scoring.cache import text_hash

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 20_000  # longer rows are almost always a broken quote swallowing the file
MAX_ID_CHARS = 200  # Item.external_id max_length
CHUNK_ROWS = 5_000  # rows per bulk insert: big enough to amortise, small enough for SQLite's limits
PROGRESS_EVERY = 20_000  # rows between progress writes
DUPLICATE_SAMPLE = 50  # duplicate reports kept on the job for the UI
RESERVED = {"text", "id", "label"}
MAX_JSON_DEPTH = 32  # nesting of a metadata value; real metadata is flat, deeper is a generator gone wrong
IMPORT_LOCK_CLASS = 0x414C  # first key of the PostgreSQL advisory lock (project id is the second)
# Files that are not text, by their first bytes: what the user most likely uploaded instead.
BINARY_STARTS = {
    b"\x1f\x8b": "a gzip archive: decompress it first",
    b"PK\x03\x04": "a zip archive (or an .xlsx workbook): export the sheet as CSV",
    b"\xff\xfe": "UTF-16 text (byte-order mark FF FE): save it as UTF-8",
    b"\xfe\xff": "UTF-16 text (byte-order mark FE FF): save it as UTF-8",
    b"\x89PNG\r\n": "a PNG image",  # the first line only: the signature goes on after a newline byte
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF-": "a PDF document: export its table as CSV",
    b"SQLite format 3\x00": "an SQLite database: export the table as CSV",
}
# Characters a text can hold and still show nothing: format characters (Unicode category Cf: zero-width
# space, joiners, word joiner, byte-order mark, direction marks) and these blank letters and symbols.
INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")

csv.field_size_limit(sys.maxsize)

Progress = Callable[[int, int], None]  # (bytes read, total bytes)


class ImportFailed(ValueError):
    """A precise, user-facing import error."""

    def __init__(self, filename: str, line: int | None, message: str) -> None:
        self.filename, self.line, self.message = filename, line, message
        where = f"{filename}, line {line}" if line is not None else filename
        super().__init__(f"{where}: {message}")


class ImportBusy(ImportFailed):
    """Another import into the same project holds the project's import slot."""


@dataclass
class Row:
    line: int
    text: str
    external_id: str
    label: str
    metadata: dict[str, Any]


@dataclass
class ImportReport:
    rows: int = 0
    created: int = 0
    duplicate_texts: int = 0
    duplicates_sample: list[list[Any]] = field(default_factory=list)
    skipped: int = 0  # rows left out: their normalised text was already there (skip_duplicates)
    skipped_lines: array.array[int] = field(default_factory=lambda: array.array("q"))  # ascending
    seconds: float = 0.0


def normalised_text_hash(text: str) -> str:
    """The text as a reader sees it: Unicode NFC, runs of white space as one space, none at the ends.
    Two rows with the same normalised text are the same text to label ("Great  film" and "Great film\n");
    case and punctuation stay significant (they can change the label)."""
    return text_hash(" ".join(unicodedata.normalize("NFC", text).split()))


def detect_format(filename: str) -> str:
    lower = filename.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if lower.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    raise ImportFailed(filename, None, "unknown file type: use .csv or .jsonl")


def _decoded_lines(raw: io.BufferedIOBase, filename: str, progress: Progress | None, total: int) -> Iterator[str]:
    """Decode line by line so an undecodable byte is reported with its line number (UTF-8 never
    splits a character across a newline). A BOM at the start is dropped."""
    read = 0
    for number, chunk in enumerate(raw, start=1):
        read += len(chunk)
        if number == 1:
            chunk = _first_line(chunk, filename)
        try:
            line = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ImportFailed(
                filename, number, f"undecodable bytes at column {exc.start + 1} (the file must be UTF-8)"
            ) from None
        if "\x00" in line:
            raise ImportFailed(filename, number, f"{_NUL} at column {line.index(chr(0)) + 1}{_NUL_FIX}")
        if progress is not None and number % PROGRESS_EVERY == 0:
            progress(read, total)
        yield line


_NUL, _NUL_FIX = "a NUL character (\\x00)", ": the database cannot store it; remove it from the file"


def _first_line(chunk: bytes, filename: str) -> bytes:
    """The first line without its UTF-8 byte-order mark; a binary file under a text name is refused."""
    for magic, what in BINARY_STARTS.items():
        if chunk.startswith(magic):
            raise ImportFailed(filename, None, f"this is not a text file but {what}")
    if _utf16_without_bom(chunk):
        raise ImportFailed(
            filename,
            None,
            "this looks like UTF-16 text without a byte-order mark (every other byte is NUL): save it as UTF-8",
        )
    return chunk[3:] if chunk.startswith(b"\xef\xbb\xbf") else chunk


def _utf16_without_bom(chunk: bytes) -> bool:
    """Latin text in UTF-16 has a NUL in every other byte (the high byte of each character); a UTF-8
    file with a stray NUL has one here and there. The line was cut at a \\n byte, so an LE file's
    first line ends one byte short of its last character: look at the bytes before it."""
    body = chunk[: len(chunk) - len(chunk) % 2]
    if len(body) < 4:
        return False
    halves = body[0::2], body[1::2]
    return any(half.count(0) >= 0.9 * len(half) for half in halves) and body.count(0) < len(body)


def _csv_error(exc: csv.Error, start: int, line: int) -> str:
    """A reader error in words: where a quoted field that never closes began, what a bare CR means."""
    text = str(exc)
    if "unexpected end of data" in text:
        return f'unterminated quote starting on line {start} (a field opens with " and never closes)'
    if "new-line character seen in unquoted field" in text:
        return f"a carriage return inside an unquoted field on line {line}: quote the field or use one line ending"
    return f"line {line}: malformed CSV: {text}"


def _csv_rows(lines: Iterator[str], filename: str, required: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise ImportFailed(filename, None, "the file is empty") from None
    except csv.Error as exc:
        raise ImportFailed(filename, None, "header: " + _csv_error(exc, 1, reader.line_num)) from None
    header = [h.strip() for h in header]
    for column in header:
        _refuse_near_miss(column, filename, 1, "column")
    if required not in header:
        raise ImportFailed(filename, 1, f"missing {required!r} column (found columns: {', '.join(header) or 'none'})")
    if len(set(header)) != len(header):
        raise ImportFailed(filename, 1, "repeated column names in the header")
    start = 2
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ImportFailed(filename, None, _csv_error(exc, start, reader.line_num)) from None
        line, start = start, reader.line_num + 1
        if not values:
            continue  # blank line
        if len(values) != len(header):
            raise ImportFailed(filename, line, f"expected {len(header)} fields, found {len(values)}")
        yield line, dict(zip(header, values, strict=True))


def _shows(char: str) -> bool:
    """False for what shows nothing: whitespace, format characters, blank letters."""
    return not char.isspace() and char not in INVISIBLE_LETTERS and unicodedata.category(char) != "Cf"


def _refuse_near_miss(name: str, filename: str, line: int, what: str) -> None:
    """A column (CSV) or key (JSONL) that reads as text / id / label but is not exactly it ('Label',
    a zero-width space or a byte-order mark inside) would be kept as metadata and its values lost:
    refused, naming the column and what it differs by."""
    mistake = _near_miss(name)
    if mistake is not None:
        raise ImportFailed(filename, line, f"{what} {name!r} {mistake}")


@functools.lru_cache(maxsize=4096)  # JSONL asks for every key of every line: the same few names
def _near_miss(name: str) -> str | None:
    if name in RESERVED:
        return None
    intended = "".join(c for c in name if _shows(c)).casefold()
    if intended not in RESERVED:
        return None
    hidden = sorted({f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in name if not _shows(c)})
    differs = f"invisible characters inside ({', '.join(hidden)})" if hidden else "letter case"
    return (
        f"is not {intended!r} (it differs by {differs}): did you mean {intended!r}? "
        f"Rename it to {intended!r}, or to another name to keep it as metadata"
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"repeated key {repeated!r} in one object")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def strict_json(text: str | bytes) -> Any:
    """``json.loads`` that refuses what it would otherwise take silently or crash on: a repeated key
    (the last one would win), NaN/Infinity (not JSON; PostgreSQL's jsonb refuses them), nesting that
    overflows the parser (ValueError "JSON nested too deeply" instead of a RecursionError)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _json_line(raw: str, filename: str, line: int, last: bool) -> Any:
    try:
        return strict_json(raw.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        cut = " (the file ends in the middle of this line)" if last and not raw.endswith("\n") else ""
        message = exc.msg.removesuffix(" at")  # "Unterminated string starting at" + " at column N"
        raise ImportFailed(filename, line, f"invalid JSON: {message} at column {exc.colno}{cut}") from None
    except ValueError as exc:  # a repeated key, NaN/Infinity, too deep, an integer over Python's digit limit
        text = str(exc)
        digits = _TOO_MANY_DIGITS.search(text)
        if digits is not None:
            text = (
                f"a number of {int(digits['has']):,} digits (the most a JSON number may have here is "
                f"{int(digits['limit']):,}): write long ids and numbers as strings, in quotes"
            )
        raise ImportFailed(filename, line, text if "nested" in text else f"invalid JSON: {text}") from None


# Python's own message names sys.set_int_max_str_digits(), a fix for the server, not the uploader.
_TOO_MANY_DIGITS = re.compile(r"limit \((?P<limit>\d+) digits\).*value has (?P<has>\d+) digits")


def _jsonl_rows(lines: Iterator[str], filename: str, required: str) -> Iterator[tuple[int, dict[str, Any]]]:
    numbered = enumerate(lines, start=1)
    ahead = next(numbered, None)
    while ahead is not None:
        (line, raw), ahead = ahead, next(numbered, None)
        if not raw.strip():
            continue
        obj = _json_line(raw, filename, line, last=ahead is None)
        if not isinstance(obj, dict):
            raise ImportFailed(filename, line, "each line must be a JSON object")
        for key in obj:
            _refuse_near_miss(key, filename, line, "key")
        if required not in obj:
            raise ImportFailed(filename, line, f"missing {required!r} field")
        yield line, obj


def iter_rows(
    path: Path, *, filename: str | None = None, progress: Progress | None = None, gold: bool = False
) -> Iterator[Row]:
    """Parse and check each row on its own (text present, non-empty, not over-long; id well-formed).
    Gold-label files (``gold``) need ``id`` and ``label`` instead of ``text``."""
    name = filename or path.name
    fmt = detect_format(name)
    total = path.stat().st_size
    with path.open("rb") as raw:
        lines = _decoded_lines(raw, name, progress, total)  # type: ignore[arg-type]
        required = "id" if gold else "text"
        records = _csv_rows(lines, name, required) if fmt == "csv" else _jsonl_rows(lines, name, required)
        for line, record in records:
            yield _row(record, line, name, gold=gold)


def _row(record: dict[str, Any], line: int, name: str, *, gold: bool = False) -> Row:
    text = record.get("text", "" if gold else None)
    if not isinstance(text, str):
        raise ImportFailed(name, line, "'text' must be a string")
    if not gold and not any(map(_shows, text)):  # stops at the first visible character
        hidden = "" if not text.strip() else " (only invisible characters such as zero-width spaces)"
        raise ImportFailed(name, line, f"empty text{hidden}")
    if len(text) > MAX_TEXT_CHARS:
        raise ImportFailed(name, line, f"text is {len(text):,} characters, over the {MAX_TEXT_CHARS:,} limit")
    external_id = _scalar_field(record, "id", name, line)
    if len(external_id) > MAX_ID_CHARS:
        raise ImportFailed(name, line, f"id is over {MAX_ID_CHARS} characters")
    label = _scalar_field(record, "label", name, line)
    metadata = {k: v for k, v in record.items() if k not in RESERVED}
    for field_name, value in (("text", text), ("id", external_id), ("label", label)):
        _check_storable(value, name, line, field_name)
    _check_metadata(metadata, name, line)
    return Row(line=line, text=text, external_id=external_id, label=label, metadata=metadata)


def _scalar_field(record: dict[str, Any], key: str, name: str, line: int) -> str:
    """``id`` / ``label`` as text: a string or an integer (JSON); a list, object, float or boolean is refused."""
    value = record.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ImportFailed(name, line, f"{key!r} must be a string or an integer, not {json.dumps(value)[:40]}")
    return str(value).strip()


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _check_storable(value: str, name: str, line: int, where: str) -> None:
    found = _UNSTORABLE.search(value)
    if found is None:
        return
    char, position = found.group(), found.start() + 1
    if char == "\x00":
        raise ImportFailed(name, line, f"{where} contains {_NUL} at character {position}{_NUL_FIX}")
    raise ImportFailed(
        name, line, f"{where} contains a lone surrogate U+{ord(char):04X} at character {position}: not valid Unicode"
    )


def _check_metadata(value: Any, name: str, line: int, where: str = "metadata", depth: int = 0) -> None:
    """Every key and string of a metadata value is storable; nesting stays under MAX_JSON_DEPTH."""
    if depth > MAX_JSON_DEPTH:
        raise ImportFailed(name, line, f"{where} is nested over {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        _check_storable(value, name, line, where)
    elif isinstance(value, dict):
        for key, inner in value.items():
            _check_storable(key, name, line, f"{where} key {key[:40]!r}")
            _check_metadata(inner, name, line, f"column {key[:40]!r}" if depth == 0 else where, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            _check_metadata(inner, name, line, where, depth + 1)


class FirstSeen:
    """key → (line, id) of its first occurrence, kept in a temp SQLite file, so the validation pass
    holds a bounded page cache (FIRST_SEEN_CACHE_KB) instead of every id and text hash of the file:
    a 2-million-row import held ~650 MB in the two dicts this replaces."""

    def __init__(self) -> None:
        import sqlite3

        handle, self.path = tempfile.mkstemp(prefix="alann-import-", suffix=".sqlite3")
        os.close(handle)
        self.db = sqlite3.connect(self.path)
        self.integrity_error = sqlite3.IntegrityError
        self.db.executescript(
            f"PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-{FIRST_SEEN_CACHE_KB};"
            "CREATE TABLE first (key TEXT PRIMARY KEY, line INTEGER, ident TEXT) WITHOUT ROWID;"
        )

    def add_many(self, rows: Iterable[tuple[str, int, str]]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO first VALUES (?, ?, ?)", rows)

    def add(self, key: str, line: int, ident: str) -> tuple[int, str] | None:
        """None when ``key`` is new (now recorded); else the (line, id) it was first seen with."""
        try:
            self.db.execute("INSERT INTO first VALUES (?, ?, ?)", (key, line, ident))
        except self.integrity_error:
            return self.db.execute("SELECT line, ident FROM first WHERE key = ?", (key,)).fetchone()  # type: ignore[no-any-return]
        return None

    def close(self) -> None:
        self.db.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


FIRST_SEEN_CACHE_KB = 16_000  # SQLite page cache of each FirstSeen store


def _validate(
    path: Path,
    *,
    project: Project,
    filename: str,
    progress: Progress | None,
    gold_for_test: bool,
    skip_duplicates: bool = False,
) -> ImportReport:
    """First pass: every check that needs the whole file or the database; no writes. With
    ``skip_duplicates`` a row whose normalised text is already there is recorded as skipped before its
    other checks (it will not be written, so its id cannot clash)."""
    labels = set(Label.objects.filter(project=project).values_list("name", flat=True))
    if gold_for_test:
        return _validate_gold(path, project=project, filename=filename, progress=progress, labels=labels)
    key = normalised_text_hash if skip_duplicates else text_hash
    ids, texts = FirstSeen(), FirstSeen()
    try:
        existing = Item.objects.filter(project=project)
        ids.add_many((e, 0, e) for e in existing.values_list("external_id", flat=True).iterator(chunk_size=5000))
        # line 0: already in the project. The stored text_hash is the raw text's; skipping compares
        # normalised texts, so it reads the project's texts once.
        pairs: Iterable[tuple[str, str]]
        if skip_duplicates:
            pairs = ((e, key(t)) for e, t in existing.values_list("external_id", "text").iterator(chunk_size=5000))
        else:
            pairs = existing.values_list("external_id", "text_hash").iterator(chunk_size=5000)
        texts.add_many((h, 0, e) for e, h in pairs)
        report = ImportReport()
        for row in iter_rows(path, filename=filename, progress=progress, gold=False):
            report.rows += 1
            external_id = row.external_id or f"{filename}:{row.line}"
            first_text = texts.add(key(row.text), row.line, external_id)
            if first_text is not None and skip_duplicates:
                report.skipped += 1
                report.skipped_lines.append(row.line)
                _sample_duplicate(report, row.line, external_id, first_text)
                continue
            if row.label and row.label not in labels:
                raise ImportFailed(filename, row.line, _unknown_label(row.label, labels))
            first_id = ids.add(external_id, row.line, external_id)
            if first_id is not None:
                where = "already in the project" if first_id[0] == 0 else f"first on line {first_id[0]}"
                raise ImportFailed(filename, row.line, f"duplicate id {external_id!r} ({where})")
            if first_text is not None:
                report.duplicate_texts += 1
                _sample_duplicate(report, row.line, external_id, first_text)
    finally:
        ids.close()
        texts.close()
    if report.rows == 0:
        raise ImportFailed(filename, None, _no_rows(filename))
    return report


def _sample_duplicate(report: ImportReport, line: int, external_id: str, first: tuple[int, str]) -> None:
    if len(report.duplicates_sample) < DUPLICATE_SAMPLE:
        report.duplicates_sample.append([line, external_id, first[1], first[0]])


def _no_rows(filename: str) -> str:
    if detect_format(filename) == "jsonl":
        return "no rows: the file holds only blank lines (JSONL: one JSON object per line)"
    return "no rows after the header"


def _validate_gold(
    path: Path, *, project: Project, filename: str, progress: Progress | None, labels: set[str]
) -> ImportReport:
    """Gold labels for test items: the test set is small, its ids are kept in memory."""
    test_ids = set(Item.objects.filter(project=project, is_test=True).values_list("external_id", flat=True))
    seen_ids: dict[str, int] = {}
    report = ImportReport()
    for row in iter_rows(path, filename=filename, progress=progress, gold=True):
        report.rows += 1
        if row.label and row.label not in labels:
            raise ImportFailed(filename, row.line, _unknown_label(row.label, labels))
        _check_gold_row(row, filename, test_ids, seen_ids)
    if report.rows == 0:
        raise ImportFailed(filename, None, _no_rows(filename))
    return report


def _unknown_label(label: str, labels: set[str]) -> str:
    known = ", ".join(sorted(labels)) or "none defined"
    close = [name for name in sorted(labels) if name.casefold().split() == label.casefold().split()]
    hint = f"; labels must match exactly: did you mean {close[0]!r}?" if close else ""
    return f"unknown label {label!r} (known labels: {known}){hint}"


def _check_gold_row(row: Row, filename: str, test_ids: set[str], seen_ids: dict[str, int]) -> None:
    if not row.external_id or row.external_id not in test_ids:
        raise ImportFailed(filename, row.line, f"id {row.external_id!r} is not a test-set item of this project")
    if not row.label:
        raise ImportFailed(filename, row.line, "gold rows need a label")
    if row.external_id in seen_ids:
        raise ImportFailed(
            filename, row.line, f"duplicate id {row.external_id!r} (first on line {seen_ids[row.external_id]})"
        )
    seen_ids[row.external_id] = row.line


# Raw executemany instead of bulk_create: building 200k model instances and compiling their SQL was
# 75 % of the import time (cProfile); the columns below are exactly Item's non-default fields.
_INSERT_COLUMNS = (
    "project_id",
    "external_id",
    "text",
    "text_hash",
    "metadata",
    "import_job_id",
    "gold_label_id",
    "is_test",
    "state",
    "review_reason",
    "required_labels",
)


def _insert_sql() -> str:
    placeholders = ["%s"] * len(_INSERT_COLUMNS)
    if connection.vendor == "postgresql":
        placeholders[_INSERT_COLUMNS.index("metadata")] = "%s::jsonb"
    columns = ", ".join(connection.ops.quote_name(c) for c in _INSERT_COLUMNS)
    table = connection.ops.quote_name(Item._meta.db_table)
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(placeholders)})"


def _insert(path: Path, *, project: Project, job: ImportJob | None, filename: str, skip: Iterable[int] = ()) -> int:
    """Second pass: every row but the ``skip`` lines (ascending), in chunks."""
    label_ids = dict(Label.objects.filter(project=project).values_list("name", "id"))
    sql = _insert_sql()
    job_id = job.id if job is not None else None
    created = 0
    chunk: list[tuple[Any, ...]] = []
    skipped = iter(skip)
    next_skip = next(skipped, None)
    with connection.cursor() as cursor:
        for row in iter_rows(path, filename=filename):
            if row.line == next_skip:
                next_skip = next(skipped, None)
                continue
            chunk.append(
                (
                    project.id,
                    row.external_id or f"{filename}:{row.line}",
                    row.text,
                    text_hash(row.text),
                    json.dumps(row.metadata),
                    job_id,
                    label_ids.get(row.label) if row.label else None,
                    False,
                    Item.State.POOL.value,
                    "",
                    1,
                )
            )
            if len(chunk) >= CHUNK_ROWS:
                _write_chunk(cursor, sql, chunk)
                created += len(chunk)
                chunk = []
                steppoints.reached("import", filename)
        if chunk:
            _write_chunk(cursor, sql, chunk)
    return created + len(chunk)


def _write_chunk(cursor: Any, sql: str, chunk: list[tuple[Any, ...]]) -> None:
    if connection.vendor != "postgresql":
        cursor.executemany(sql, chunk)
        return
    # COPY is 3x faster than executemany on PostgreSQL (psycopg 3 streams the rows in one round trip).
    table = connection.ops.quote_name(Item._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(c) for c in _INSERT_COLUMNS)
    with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for values in chunk:
            copy.write_row(values)


def _apply_gold(path: Path, *, project: Project, filename: str) -> int:
    """Gold labels for test-set items: they become the items' final labels."""
    label_ids = dict(Label.objects.filter(project=project).values_list("name", "id"))
    now = timezone.now()
    by_label: dict[int, list[str]] = {}
    for row in iter_rows(path, filename=filename, gold=True):
        by_label.setdefault(label_ids[row.label], []).append(row.external_id)
    updated = 0
    for label_id, ids in by_label.items():
        for start in range(0, len(ids), CHUNK_ROWS):
            updated += Item.objects.filter(
                project=project, is_test=True, external_id__in=ids[start : start + CHUNK_ROWS]
            ).update(gold_label_id=label_id, final_label_id=label_id, finalized_at=now)
    return updated


@contextlib.contextmanager
def _import_slot(project: Project, filename: str) -> Iterator[None]:
    """Hold the project's import slot for the whole import (validation included) or raise ImportBusy.
    PostgreSQL: a session advisory lock; SQLite: an exclusive file lock beside the database file.
    Both are released by the operating system / server when the process dies, so a killed import
    never blocks the next one."""
    busy = ImportBusy(filename, None, "another import into this project is running; try again when it has finished")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [IMPORT_LOCK_CLASS, project.id])
            if not cursor.fetchone()[0]:
                raise busy
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [IMPORT_LOCK_CLASS, project.id])
        return
    import fcntl

    with _sqlite_lock_path(project).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sqlite_lock_path(project: Project) -> Path:
    """Beside the database file (every process that opens it sees the same lock); an in-memory
    database (tests) lives in one process, and every process's has the same name: a temp file keyed
    by the process and the name."""
    name = str(connection.settings_dict["NAME"])
    database = Path(name)
    if "memory" in name or not database.parent.is_dir():
        key = hashlib.sha256(f"{os.getpid()}:{name}".encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"alann-import-{key}-p{project.id}.lock"
    return database.parent / f".{database.name}.import-p{project.id}.lock"


def import_items(
    *,
    project: Project,
    path: Path,
    filename: str | None = None,
    job: ImportJob | None = None,
    progress: Progress | None = None,
    gold_for_test: bool = False,
    skip_duplicates: bool = False,
) -> ImportReport:
    """Validate then insert (or apply gold labels), one import per project at a time. Raises
    ImportFailed (ImportBusy while another import into the project runs); on failure nothing is written.
    ``skip_duplicates``: rows whose normalised text is already in the project (or earlier in the file)
    are left out and counted (``report.skipped``)."""
    name = filename or path.name
    started = time.monotonic()
    with _import_slot(project, name):
        report = _validate(
            path,
            project=project,
            filename=name,
            progress=progress,
            gold_for_test=gold_for_test,
            skip_duplicates=skip_duplicates,
        )
        with transaction.atomic():
            if gold_for_test:
                report.created = _apply_gold(path, project=project, filename=name)
            else:
                report.created = _insert(path, project=project, job=job, filename=name, skip=report.skipped_lines)
    report.seconds = time.monotonic() - started
    return report


def import_create(
    *,
    project: Project,
    path: Path,
    filename: str,
    user: Any = None,
    gold_for_test: bool = False,
    skip_duplicates: bool = True,
) -> ImportJob:
    """Record an import; ``annotate.import_run`` is sent once this commits. It skips rows whose
    normalised text is already in the project unless ``skip_duplicates`` is off."""
    from annotate.services.queue import send_on_commit

    job = ImportJob.objects.create(
        project=project,
        created_by=user,
        filename=filename,
        path=str(path),
        total_bytes=path.stat().st_size,
        as_gold_for_test=gold_for_test,
        skip_duplicates=skip_duplicates,
        sent_at=timezone.now(),
    )
    send_on_commit("annotate.import_run", job.id)
    return job


def import_run(*, job_id: int) -> ImportJob:
    """Run a recorded import (Celery task body). Idempotent: a finished job is left as it is; a job
    found "running" (its worker died, or it runs elsewhere right now) is resumed, unless its import
    slot is still held, then it is left to the run that holds it. Every error ends the job as failed
    with its message."""
    fresh = ImportJob.objects.filter(id=job_id, status=ImportJob.Status.PENDING).update(status=ImportJob.Status.RUNNING)
    job = ImportJob.objects.select_related("project").get(id=job_id)
    if job.status != ImportJob.Status.RUNNING:
        return job
    if job.as_gold_for_test is False and Item.objects.filter(import_job=job).exists():
        # A worker died after the insert committed: the rows are there, only the bookkeeping is not.
        return _finish(job, rows_created=Item.objects.filter(import_job=job).count())
    try:
        report = _run(job)
    except ImportBusy as exc:
        if not fresh:  # a resume while the run that holds the slot is alive: that run finishes the job
            return job
        return _fail(job, str(exc))
    except ImportFailed as exc:
        return _fail(job, str(exc))
    except Exception as exc:  # a bug or a lost database: the job must not stay "running"
        logger.exception("import job %s failed", job.id)
        return _fail(job, f"{job.filename}: the import stopped on an unexpected error ({type(exc).__name__}: {exc})")
    return _finish(job, rows_created=report.created, report=report)


def _run(job: ImportJob) -> ImportReport:
    from annotate.services.projects import test_set_draw

    def progress(done: int, total: int) -> None:
        ImportJob.objects.filter(id=job.id).update(processed_bytes=done, total_bytes=total)

    report = import_items(
        project=job.project,
        path=Path(job.path),
        filename=job.filename,
        job=job,
        progress=progress,
        gold_for_test=job.as_gold_for_test,
        skip_duplicates=job.skip_duplicates,
    )
    if not job.as_gold_for_test:
        test_set_draw(project=job.project)
    return report


def _fail(job: ImportJob, error: str) -> ImportJob:
    ImportJob.objects.filter(id=job.id).update(status=ImportJob.Status.FAILED, error=error, finished_at=timezone.now())
    job.refresh_from_db()
    return job


def imports_resume_all(*, since: datetime | None = None) -> int:
    """Enqueue every import that was running (its worker may have been killed: the import continues;
    a job still running elsewhere is left to it by ``import_run``) and every pending one whose message
    may be lost (``jobs.resend_due``: once, however many workers start at once). The job engine's
    worker-start resume (annotate/services/jobs.py)."""
    from annotate.services.queue import send_on_commit

    S = ImportJob.Status
    open_jobs = ImportJob.objects.filter(status__in=[S.PENDING, S.RUNNING]).values_list("id", "status")
    ids = [
        job_id
        for job_id, status in open_jobs
        if status == S.RUNNING
        or jobs.resend_due(ImportJob.objects.filter(id=job_id), waiting=(S.PENDING,), since=since)
    ]
    for job_id in ids:
        send_on_commit("annotate.import_run", job_id)
    return len(ids)


def _finish(job: ImportJob, *, rows_created: int, report: ImportReport | None = None) -> ImportJob:
    fields: dict[str, Any] = {
        "status": ImportJob.Status.DONE,
        "rows_created": rows_created,
        "processed_bytes": job.total_bytes,
        "finished_at": timezone.now(),
    }
    if report is not None:
        fields.update(
            rows_done=report.rows,
            duplicate_texts=report.duplicate_texts,
            duplicates_sample=report.duplicates_sample,
            rows_skipped=report.skipped,
        )
    ImportJob.objects.filter(id=job.id).update(**fields)
    job.refresh_from_db()
    return job
