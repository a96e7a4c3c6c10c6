"""bench/RESULTS.md, the page of current figures, names only files that are in the tree and links only to
its own headings (a raw file renamed or moved away would leave a figure without its evidence)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"
TREE_DIRS = ("bench", "config", "annotate", "scoring", "training", "devtools", "docs")
PATH = re.compile(r"(?<![\w./$-])((?:" + "|".join(TREE_DIRS) + r")/[^\s`'\"(),;]*)")
GLOB = set("*?{}[]<>…$")


def paths_named(markdown: str) -> set[str]:
    """Repository paths inside backticks, glob patterns and placeholders skipped."""
    spans = re.findall(r"`([^`]+)`", markdown)
    found = {m.rstrip(".:") for span in spans for m in PATH.findall(span)}
    return {p for p in found if not GLOB & set(p)}


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_paths_named_reads_commands_and_skips_patterns() -> None:
    text = "Run `python bench/x.py --out bench/y/` then `G=bench/raw; ls $G/a-{b,c}.gz bench/z-*.json`."
    assert paths_named(text) == {"bench/x.py", "bench/y/", "bench/raw"}
    assert heading_anchor("Engines: parity, start-up, throughput") == "engines-parity-start-up-throughput"


def test_every_path_results_names_exists() -> None:
    named = paths_named(RESULTS.read_text())
    assert "bench/HISTORY.md" in named and len(named) > 20
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"bench/RESULTS.md names files that are not in the tree: {missing}"


def test_every_anchor_results_links_is_one_of_its_headings() -> None:
    text = RESULTS.read_text()
    anchors = {heading_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors, f"links to no heading: {sorted(links - anchors)}"
