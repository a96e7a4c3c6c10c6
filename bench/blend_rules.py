"""Replay rules for the blend's weight (training/blend.py) on recorded simulation runs, without the models.

    .venv/bin/python bench/blend_rules.py bench/gpu-results/<run>-records.jsonl.gz --out <report>.md

Every round record of a run with the blend on carries ``blend.evidence``: for each grid weight, the
counts (training.blend.weight_counts) on the round's held-out batch, on its random slice alone and on
the test set. A rule picks a weight from the batches' counts of the rounds so far; the test counts
then say exactly what that weight scored. So every rule below is measured on the same adapters and
proxies, paired, with no GPU. The test counts never choose a weight, except in the last row, which
is an upper bound and no rule.

Needs records of a commit that stores the counts (after e6a244b); older records have none and are
skipped with a line that says so.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotate.simulation.report import load_records  # noqa: E402
from training.blend import WINDOW, choose_weight, pool  # noqa: E402

AT = (200, 500, 1000)
History = Sequence[dict[str, Any]]  # the evidence dicts of a job's rounds so far, oldest first
Rule = Callable[[History], float]


def _fit(key: str, window: int | None, guard: float | None = None) -> Rule:
    """Pool ``key`` ("batch" or "uniform") counts of the last ``window`` rounds (None: all), pick."""

    def rule(history: History) -> float:
        recent = history if window is None else history[-window:]
        parts = [e[key] for e in recent if e.get(key)]
        if not parts:
            return 1.0
        return choose_weight(pool(parts), grid=history[-1]["grid"], guard=guard)

    return rule


def _best_on_test(history: History) -> float:
    test, grid = history[-1]["test"], history[-1]["grid"]
    return float(grid[int(np.argmax(test["correct"]))])


RULES: dict[str, Rule] = {
    "adapters alone (w = 1)": lambda history: 1.0,
    "proxy alone (w = 0)": lambda history: 0.0,
    "fixed w = 0.7": lambda history: 0.7,
    f"batches, last {WINDOW} (the default)": _fit("batch", WINDOW),
    f"batches, last {WINDOW}, guard z = 1": _fit("batch", WINDOW, guard=1.0),
    "batches, all rounds": _fit("batch", None),
    "random slice, all rounds": _fit("uniform", None),
    "random slice, all rounds, guard z = 1": _fit("uniform", None, guard=1.0),
    "best on test (upper bound, not a rule)": _best_on_test,
}
DEFAULT = f"batches, last {WINDOW} (the default)"


def jobs(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    """Round records with blend evidence and test counts, per (data, strategy, seed), by round."""
    out: dict[tuple[str, str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        evidence = (r.get("blend") or {}).get("evidence") or {}
        if evidence.get("test") and r.get("labels") is not None:
            out[(r["data"], r["strategy"], int(r["seed"]))][int(r["round"])] = r
    return {key: [rounds[n] for n in sorted(rounds)] for key, rounds in out.items()}


def replay(rounds: Sequence[dict[str, Any]], rule: Rule) -> list[tuple[int, float, float]]:
    """(labels, weight, test accuracy %) of each round under ``rule``."""
    history: list[dict[str, Any]] = []
    out = []
    for r in rounds:
        history.append(r["blend"]["evidence"])
        w = rule(history)
        test = history[-1]["test"]
        i = [round(float(g), 6) for g in history[-1]["grid"]].index(round(w, 6))
        out.append((int(r["labels"]), w, 100.0 * test["correct"][i] / test["n"]))
    return out


def tables(records: Sequence[dict[str, Any]]) -> str:
    by_job = jobs(records)
    if not by_job:
        return "No record carries blend evidence (runs before the counts were stored, or with blend off)."
    acc: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    same, total = 0, 0
    for (data, strategy, _), rounds in by_job.items():
        for name, rule in RULES.items():
            for labels, w, a in replay(rounds, rule):
                acc[(data, strategy, name, labels)].append(a)
                if name == DEFAULT:
                    recorded = [r["blend"]["weight"] for r in rounds if int(r["labels"]) == labels][0]
                    same += int(abs(recorded - w) < 1e-9)
                    total += 1
    sets = sorted({(d, s) for d, s, _ in by_job})
    lines = [
        f"Replayed on {len(by_job)} jobs; the default rule gives the recorded weight in {same} of {total} rounds.",
        "",
        "Test accuracy % (mean over seeds) at 200 / 500 / 1,000 labels; Δ: minus the adapters alone.",
        "",
        "| data | strategy | rule | "
        + " | ".join(f"@{n}" for n in AT)
        + " | Δ "
        + " | Δ ".join(f"@{n}" for n in AT)
        + " |",
        "|---|---|---|" + "---|" * (2 * len(AT)),
    ]
    deltas: dict[str, list[float]] = defaultdict(list)
    for data, strategy in sets:
        for name in RULES:
            cells, dcells = [], []
            for n in AT:
                values, base = (
                    acc.get((data, strategy, name, n)),
                    acc.get((data, strategy, "adapters alone (w = 1)", n)),
                )
                if not values or not base:
                    cells.append("–")
                    dcells.append("–")
                    continue
                d = float(np.mean(values) - np.mean(base))
                deltas[name].append(d)
                cells.append(f"{np.mean(values):.1f}")
                dcells.append(f"{d:+.1f}")
            lines.append(f"| {data} | {strategy} | {name} | " + " | ".join(cells + dcells) + " |")
    lines += [
        "",
        "Over every (data, strategy, label count) cell above: Δ minus the adapters alone.",
        "",
        "| rule | mean Δ | worst Δ | cells below −0.5 | cells |",
        "|---|---|---|---|---|",
    ]
    for name in RULES:
        cell_deltas = deltas.get(name, [])
        if cell_deltas:
            below = sum(x < -0.5 for x in cell_deltas)
            worst = min(cell_deltas)
            lines.append(f"| {name} | {np.mean(cell_deltas):+.2f} | {worst:+.1f} | {below} | {len(cell_deltas)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", type=Path, nargs="+")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    records = load_records(args.records)
    commits = sorted({str(r.get("commit") or "?")[:10] for r in records})
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    text = (
        f"`python bench/blend_rules.py {' '.join(str(p) for p in args.records)}` at {here.stdout.strip() or '?'}"
        f" (records of commit {', '.join(commits)})\n\n" + tables(records) + "\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
