"""bench/'s pages and raw outputs stay readable (issue 36): every bench/ path that README.md, bench/*.md
and docs/*.md name is in the tree (a raw file moved or renamed would leave a figure without its
evidence), RESULTS.md stays a five-minute page and links only to its own headings, raw outputs lie in
bench/raw/<YYYY-MM-DD>/ and no old *-results folder is back, large raw text is stored gzipped, and
rawfiles.open_raw reads a file whether or not it was compressed."""

from __future__ import annotations

import datetime
import gzip
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import rawfiles  # noqa: E402
from rawfiles import GZIP_ABOVE, TEXT_SUFFIXES, open_raw, raw_dir, raw_path  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
RESULTS_MAX_WORDS = 3500  # about five minutes of reading (issue 36); the narrative lives in bench/HISTORY.md
PAGES = [ROOT / "README.md", *sorted((ROOT / "bench").glob("*.md")), *sorted((ROOT / "docs").glob("*.md"))]
# A path: "bench/" then name characters, slashes, glob characters and {a,b} alternatives.
PATH = re.compile(r"(?<![\w./$-])bench/(?:[\w.*?-]|\{[^{}\s`'\"]*\}|/)*")
PLACEHOLDER_NEXT = set("$<…")  # bench/raw/$(date +%F)/..., bench/raw/<date>/: a pattern to fill, not a path
GONE = {"bench/gpu_rounds.py"}  # deleted in fea19c4; bench/HISTORY.md tells why it was not run


def expand(path: str) -> list[str]:
    """``a-{b,c}.gz`` -> ``a-b.gz``, ``a-c.gz`` (as the shell expands braces)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in expand(path[: m.start()] + alt + path[m.end() :])]


def paths_named(text: str) -> set[str]:
    """The bench/ paths a page names, braces expanded; placeholders skipped, sentence dots dropped."""
    found: set[str] = set()
    for m in PATH.finditer(text):
        if text[m.end() : m.end() + 1] in PLACEHOLDER_NEXT:
            continue
        found.update(p.rstrip(".:") for p in expand(m.group(0)))
    return found


def in_tree(path: str) -> bool:
    """The file or folder is there, or its gzipped NAME.gz (a name written before it was compressed);
    a glob pattern matches at least one."""
    if any(c in path for c in "*?["):
        return any(ROOT.glob(path.rstrip("/"))) or any(ROOT.glob(path + ".gz"))
    return (ROOT / path).exists() or (ROOT / (path + ".gz")).exists()


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_paths_named_expands_braces_and_skips_placeholders() -> None:
    text = (
        "Run `python bench/x.py --out bench/y/` on bench/raw/2026-12-01/a-{b,c}.gz and bench/z-*.json.\n"
        "    --out bench/raw/$(date +%F)/run.jsonl  # new outputs: `bench/raw/<date>/`; G=bench/raw; ls $G/q"
    )
    assert paths_named(text) == {
        "bench/x.py",
        "bench/y/",
        "bench/raw/2026-12-01/a-b.gz",
        "bench/raw/2026-12-01/a-c.gz",
        "bench/z-*.json",
        "bench/raw",
    }
    assert heading_anchor("Engines: parity, start-up, throughput") == "engines-parity-start-up-throughput"


def test_every_bench_path_the_pages_name_is_in_the_tree() -> None:
    named = {(page.relative_to(ROOT).as_posix(), p) for page in PAGES for p in paths_named(page.read_text())}
    assert sum(p.startswith("bench/raw/2") for _, p in named) > 100  # the pages cite their raw files
    missing = sorted(f"{page}: {p}" for page, p in named if p not in GONE and not in_tree(p))
    assert not missing, "pages name bench/ paths that are not in the tree:\n" + "\n".join(missing)


def test_results_stays_a_five_minute_page() -> None:
    words = len(RESULTS.read_text().split())
    assert words <= RESULTS_MAX_WORDS, (
        f"bench/RESULTS.md has {words} words (cap {RESULTS_MAX_WORDS}): keep only each capability's current figure, "
        "command, commit and raw file there, and move the run-by-run narrative to its session in bench/HISTORY.md"
    )


def test_every_anchor_results_links_is_one_of_its_headings() -> None:
    text = RESULTS.read_text()
    anchors = {heading_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors, f"links to no heading: {sorted(links - anchors)}"


def test_raw_outputs_lie_in_dated_folders_and_no_results_folder_is_back() -> None:
    assert not sorted((ROOT / "bench").rglob("*-results")), "raw outputs go to bench/raw/<date>/ (bench/README.md)"
    entries = sorted((ROOT / "bench" / "raw").iterdir())
    assert entries
    for entry in entries:
        assert entry.is_dir() and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry.name), f"not a date folder: {entry}"
        datetime.date.fromisoformat(entry.name)


def test_no_large_raw_text_file_is_stored_uncompressed() -> None:
    files = [p for p in (ROOT / "bench" / "raw").rglob("*") if p.is_file()]
    assert any(p.suffix == ".gz" for p in files)
    large = sorted(
        str(p.relative_to(ROOT)) for p in files if p.suffix in TEXT_SUFFIXES and p.stat().st_size > GZIP_ABOVE
    )
    assert not large, f"gzip -9 -n these (over {GZIP_ABOVE} bytes): {large}"


def test_open_raw_reads_a_file_its_gz_sibling_or_a_gz(tmp_path: Path) -> None:
    (tmp_path / "plain.json").write_text('{"a": 1}\n', encoding="utf-8")
    with gzip.open(tmp_path / "records.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write('{"é": 2}\n')
    with open_raw(tmp_path / "plain.json") as f:
        assert f.read() == '{"a": 1}\n'
    for name in ("records.jsonl", "records.jsonl.gz"):
        with open_raw(tmp_path / name) as f:
            assert f.read() == '{"é": 2}\n'


def test_raw_dir_is_todays_folder_under_bench_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert rawfiles.RAW == ROOT / "bench" / "raw"
    monkeypatch.setattr(rawfiles, "RAW", tmp_path)  # the test makes no folder in the tree
    today = raw_dir()
    assert today == tmp_path / datetime.date.today().isoformat() and today.is_dir()
    assert raw_path("x.json", datetime.date(2026, 12, 1)) == tmp_path / "2026-12-01" / "x.json"
