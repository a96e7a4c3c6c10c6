"""bench/autoaccept_sim.py's tables from synthetic autolabel records: the share of (set, class, target)
cases that reach their target, the bar, the misses listed with their counts."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import autoaccept_sim as report  # noqa: E402


def record(data: str, target: float, classes: list[tuple[int, int, bool]]) -> dict:
    per_class = [
        {
            "label": f"c{i}",
            "accepted": n,
            "correct": right,
            "precision": right / n if n else None,
            "ci": [0.0, 1.0],
            "meets": bool(n) and right / n >= target,
            "alarm": alarm,
            "threshold": 0.9 if n else None,
            "needed": 0 if n else 12,
        }
        for i, (n, right, alarm) in enumerate(classes)
    ]
    accepted = sum(n for n, _, _ in classes)
    return {
        "kind": "autolabel", "data": data, "strategy": "active", "seed": 0, "k": 2, "labels": 1000,
        "target": target, "delta": 0.05, "n_calibration": 500, "classes_with_threshold": 2,
        "tier2_classes_with_threshold": 1, "n_classes": len(classes), "decided": 4000, "accepted": accepted,
        "coverage": accepted / 4000, "accepted_by_tier": {"model": accepted}, "precision": 0.97,
        "precision_ci": [0.95, 0.98], "per_class": per_class, "commit": "abc1234",
    }  # fmt: skip


def test_tables_count_cases_and_list_misses(tmp_path: Path) -> None:
    rows = [
        record("trec", 0.95, [(100, 99, False), (50, 45, False), (0, 0, False)]),  # one miss (0.90), one empty
        record("trec", 0.90, [(200, 190, False), (80, 76, False), (0, 0, False)]),
        {"kind": "round", "data": "trec"},  # not an auto-labelling record: ignored
    ]
    path = tmp_path / "autolabel.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    found = report.read([path])
    assert len(found) == 2
    text = report.tables(found)
    assert "cases with accepted items: **4**; realised precision >= target: **3 (75.0%)**" in text
    assert "**not met**" in text and "alarms (the whole interval under the target): 0" in text
    assert "| trec | 0.95 | c1 | 50 | 45 |" in text  # the miss, with its count
    assert "- trec at 0.95: 1 of 3: 1 too few (up to 12 more), 0 bound failed" in text
    assert report.main([str(path), "--out", str(tmp_path / "t.md")]) == 0 and (tmp_path / "t.md").is_file()


def test_the_bar_is_met_when_every_case_reaches_its_target(tmp_path: Path) -> None:
    text = report.tables([record("snips", 0.9, [(40, 40, False), (30, 29, False)])])
    assert "realised precision >= target: **2 (100.0%)**" in text and "**met**" in text
    (tmp_path / "empty.jsonl").touch()
    assert report.main([str(tmp_path / "empty.jsonl")]) == 1  # no records: an error, not an empty table


def test_a_job_cut_short_says_so_in_the_labels_column() -> None:
    """A job stopped by the sitting's time box (simulate --deadline) trained on fewer labels than asked:
    the table says how many of how many and why, so no row passes for a 1,000-label one."""
    cut = {**record("emotion", 0.9, [(40, 40, False)]), "labels": 700, "labels_asked": 1000, "deadline_s": 420}
    whole = {**record("trec", 0.9, [(40, 40, False)]), "labels_asked": 1000, "deadline_s": 420}
    text = report.tables([cut, whole])
    assert "| emotion | active-s0 | 2 | 700 of 1,000 (deadline) |" in text
    assert "| trec | active-s0 | 2 | 1,000 |" in text
