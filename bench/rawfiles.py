"""Where the benches' raw outputs live: bench/raw/<YYYY-MM-DD>/, the date they were made (and
committed); a text file over GZIP_ABOVE bytes is committed gzipped, as NAME.gz (bench/README.md).

    from rawfiles import open_raw, raw_path          # a bench script: bench/ is on its sys.path
    out = raw_path(f"cpu-round-{commit}.json")       # bench/raw/<today>/cpu-round-<commit>.json
    with open_raw("bench/raw/2026-12-01/sim6-records-2026-12-01.jsonl") as f:  # reads the .gz
        ...
"""

from __future__ import annotations

import datetime
import gzip
from pathlib import Path
from typing import TextIO

RAW = Path(__file__).resolve().parent / "raw"
GZIP_ABOVE = 20_000  # bytes: raw text files larger than this are committed as NAME.gz (issue 36)
TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".txt", ".csv", ".log")  # what the rule compresses


def raw_dir(date: datetime.date | str | None = None) -> Path:
    """bench/raw/<date>/ (today by default), created."""
    day = date or datetime.date.today()
    folder = RAW / (day if isinstance(day, str) else day.isoformat())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def raw_path(name: str, date: datetime.date | str | None = None) -> Path:
    """bench/raw/<date>/<name> (today by default); the folder is created."""
    return raw_dir(date) / name


def open_raw(path: str | Path) -> TextIO:
    """Open a raw file for reading as text: ``path`` itself, or its gzipped ``path.gz`` sibling when
    only that is stored; a ``.gz`` path is decompressed."""
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")
