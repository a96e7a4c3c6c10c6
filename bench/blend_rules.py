"""Replay rules for the blend's weight (training/blend.py) on recorded simulation runs, without the models.

    .venv/bin/python bench/blend_rules.py bench/raw/<date>/<run>-records.jsonl.gz --out <report>.md

Every round record of a run with the blend on carries ``blend.evidence``: for each grid weight, the
counts (training.blend.weight_counts) on the round's held-out batch, on its random slice alone and on
the test set. A rule picks a weight from the batches' counts of the rounds so far. So every rule below
is measured on the same adapters and proxies, paired, with no GPU.

Two scores, and only the first may choose a rule:

- **The next batch (prequential).** The batch counts stored at round r+1 are the predictions of round
  r's predictor (its adapters and proxy) on the batch labelled after it; so the weight a rule picked
  at round r is scored on round r+1's random slice at that weight, on labels neither the predictor
  nor the rule had seen, and no test label is read. The random slice is an unbiased sample of the
  pool; the whole batch is shown too, biased toward the items an active strategy finds hard.
- **The test set.** The test counts say exactly what each round's weight scored on the test set: a
  description of the rules, never a way to pick one (the rule with the best test rows is tuned on
  the test split, and its test accuracy is no longer an honest estimate). The test counts never
  choose a weight, except in the last row, which is an upper bound and no rule.

Needs records of a commit that stores the counts (after e6a244b); older records have none and are
skipped with a line that says so.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotate.simulation.report import load_records, named_by_shape  # noqa: E402
from training.blend import MIN_HELDOUT, WINDOW, choose_weight, pool  # noqa: E402

AT = (200, 500, 1000)
History = Sequence[dict[str, Any]]  # the evidence dicts of a job's rounds so far, oldest first
Rule = Callable[[History], float]
Jobs = dict[tuple[str, str, int], list[dict[str, Any]]]  # a job's round records by round, per (data, strategy, seed)
KEYS = ("uniform", "batch")  # the next batch's counts that score a weight: its random slice, all of it


def _fit(key: str, window: int | None, guard: float | None = None, min_n: int = MIN_HELDOUT) -> Rule:
    """Pool ``key`` ("batch" or "uniform") counts of the last ``window`` rounds (None: all), pick;
    the adapters alone below ``min_n`` pooled items."""

    def rule(history: History) -> float:
        recent = history if window is None else history[-window:]
        parts = [e[key] for e in recent if e.get(key)]
        if not parts:
            return 1.0
        return choose_weight(pool(parts), grid=history[-1]["grid"], guard=guard, min_n=min_n)

    return rule


def _best_on_test(history: History) -> float:
    test, grid = history[-1]["test"], history[-1]["grid"]
    return float(grid[int(np.argmax(test["correct"]))])


BASE = "adapters alone (w = 1)"  # every Δ is against it
UPPER_BOUND = "best on test (upper bound, not a rule)"  # reads the test counts: never in the prequential table
RULES: dict[str, Rule] = {
    BASE: lambda history: 1.0,
    "proxy alone (w = 0)": lambda history: 0.0,
    "fixed w = 0.7": lambda history: 0.7,
    f"batches, last {WINDOW} (the default)": _fit("batch", WINDOW),
    f"batches, last {WINDOW}, guard z = 1": _fit("batch", WINDOW, guard=1.0),
    "batches, all rounds": _fit("batch", None),
    f"batches, last {WINDOW}, from 200 held-out": _fit("batch", WINDOW, min_n=200),
    "batches, all rounds, guard z = 2": _fit("batch", None, guard=2.0),
    f"random slice, last {WINDOW}": _fit("uniform", WINDOW),
    "random slice, all rounds": _fit("uniform", None),
    "random slice, all rounds, guard z = 1": _fit("uniform", None, guard=1.0),
    UPPER_BOUND: _best_on_test,
}
DEFAULT = f"batches, last {WINDOW} (the default)"
CHOOSABLE = [name for name in RULES if name != UPPER_BOUND]  # the rules the prequential table scores


class Scored(NamedTuple):
    """A round's weight scored on the next round's counts (its random slice, or its whole batch)."""

    labels: int  # the labels of the round that chose the weight
    weight: float
    correct: int  # of the next round's items, those the blend at ``weight`` gets right
    n: int
    gain: int  # right at ``weight`` where the adapters alone are wrong
    loss: int  # wrong at ``weight`` where the adapters alone are right


def jobs(records: Sequence[dict[str, Any]]) -> Jobs:
    """Round records with blend evidence and test counts, per (data, strategy, seed), by round. Runs of
    one set at several B or seed-set sizes are separate sets ("trec-B50", named_by_shape): seed 0 at
    B=50 and seed 0 at B=100 are two jobs, not one job's rounds interleaved."""
    out: dict[tuple[str, str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in named_by_shape(list(records)):
        evidence = (r.get("blend") or {}).get("evidence") or {}
        if evidence.get("test") and r.get("labels") is not None:
            out[(r["data"], r["strategy"], int(r["seed"]))][int(r["round"])] = r
    return {key: [rounds[n] for n in sorted(rounds)] for key, rounds in out.items()}


def _at(grid: Sequence[float], w: float) -> int:
    """The index of weight ``w`` on ``grid`` (the grid as recorded: floats through JSON)."""
    return [round(float(g), 6) for g in grid].index(round(w, 6))


def _weights(rounds: Sequence[dict[str, Any]], rule: Rule) -> list[float]:
    """The weight ``rule`` picks at each round from the evidence of that round and the ones before."""
    history: list[dict[str, Any]] = []
    out = []
    for r in rounds:
        history.append(r["blend"]["evidence"])
        out.append(rule(history))
    return out


def replay(rounds: Sequence[dict[str, Any]], rule: Rule) -> list[tuple[int, float, float]]:
    """(labels, weight, test accuracy %) of each round under ``rule``."""
    out = []
    for r, w in zip(rounds, _weights(rounds, rule), strict=True):
        evidence = r["blend"]["evidence"]
        test = evidence["test"]
        out.append((int(r["labels"]), w, 100.0 * test["correct"][_at(evidence["grid"], w)] / test["n"]))
    return out


def prequential(rounds: Sequence[dict[str, Any]], rule: Rule, key: str = "uniform") -> list[Scored]:
    """Each round's weight under ``rule`` scored on the next round's ``key`` counts ("uniform": its
    random slice, "batch": all of it) at that weight. Those counts are this round's predictor (its
    adapters and proxy) on the batch labelled after it, so the score is held out from both the
    predictor and the rule, and uses no test label. Skipped: the last round (no next one), a round
    whose next round number is missing from the records (a later round's counts may come from
    another predictor), and a next round without ``key`` counts or with none of its items."""
    weights = _weights(rounds, rule)
    out = []
    for r, following, w in zip(rounds[:-1], rounds[1:], weights[:-1], strict=True):
        counts = following["blend"]["evidence"].get(key)
        if int(following["round"]) != int(r["round"]) + 1 or not counts or not int(counts["n"]):
            continue
        i = _at(following["blend"]["evidence"]["grid"], w)
        out.append(
            Scored(
                int(r["labels"]),
                w,
                int(counts["correct"][i]),
                int(counts["n"]),
                int(counts["gain"][i]),
                int(counts["loss"][i]),
            )
        )
    return out


@dataclass
class Pooled:
    """Scored rounds summed: over the rounds and jobs of a (data, strategy) set, or over the sets."""

    rounds: int = 0
    correct: int = 0
    n: int = 0
    gain: int = 0
    loss: int = 0

    def add(self, s: Scored | Pooled) -> None:
        self.rounds += s.rounds if isinstance(s, Pooled) else 1
        self.correct += s.correct
        self.n += s.n
        self.gain += s.gain
        self.loss += s.loss


def _tally(by_job: Jobs) -> dict[tuple[str, str, str, str], Pooled]:
    """Every rule's prequential counts per (key, rule, data, strategy), summed over the set's rounds
    and jobs; the upper bound left out (it reads the test counts). A set with no scored round has no
    entry."""
    out: dict[tuple[str, str, str, str], Pooled] = defaultdict(Pooled)
    for (data, strategy, _), rounds in by_job.items():
        for name in CHOOSABLE:
            for key in KEYS:
                for s in prequential(rounds, RULES[name], key):
                    out[(key, name, data, strategy)].add(s)
    return dict(out)


def _summary(tally: dict[tuple[str, str, str, str], Pooled], key: str, name: str) -> list[str]:
    """One rule's cells for ``key``: accuracy % pooled over every set, Δ minus the adapters alone on
    the same items (every rule is scored on the same rounds, so the items are the same), the worst
    set's Δ; on the random slice also z, the pooled gain − loss over sqrt(gain + loss) against the
    adapters alone (McNemar-style: how many standard errors the Δ is, items taken as independent)."""
    sets = [(k[2], k[3]) for k in tally if k[:2] == (key, name)]
    if not sets:
        return ["–"] * (4 if key == "uniform" else 3)
    total, base = Pooled(), Pooled()
    worst = np.inf
    for cell in sets:
        mine, theirs = tally[(key, name, *cell)], tally[(key, BASE, *cell)]
        total.add(mine)
        base.add(theirs)
        worst = min(worst, 100.0 * (mine.correct - theirs.correct) / mine.n)
    accuracy = 100.0 * total.correct / total.n
    cells = [f"{accuracy:.1f}", f"{accuracy - 100.0 * base.correct / total.n:+.1f}", f"{worst:+.1f}"]
    if key == "uniform":
        discordant = total.gain + total.loss
        cells.append(f"{(total.gain - total.loss) / np.sqrt(discordant):+.1f}" if discordant else "–")
    return cells


def prequential_table(by_job: Jobs) -> list[str]:
    """The table that may choose a rule: each rule's weights scored on the next batch (prequential)."""
    tally = _tally(by_job)
    items = {key: Pooled() for key in KEYS}
    for (key, name, _, _), pooled in tally.items():
        if name == BASE:
            items[key].add(pooled)
    if not any(items[key].n for key in KEYS):
        return ["No round has a next round with counts: no next-batch score, nothing to choose a rule by."]
    return [
        "**Choosing a rule: the next batch (prequential).** Each round's weight, picked from the rounds so far,"
        " is scored on the batch labelled in the round after it: those counts are that round's own adapters and"
        " proxy predicting labels that neither they nor the rule had seen. No test label is read, so this table"
        " (and not the test tables below) is the one that may choose a rule.",
        "",
        f"Pooled over every job: {items['uniform'].n} random-slice items in {items['uniform'].rounds} rounds,"
        f" {items['batch'].n} batch items in {items['batch'].rounds} rounds (a round counts when the next one is"
        " recorded with counts). Accuracy %: correct / items; Δ: points minus the adapters alone (w = 1) on the"
        " same items; worst set Δ: the lowest Δ of any (data, strategy) set; z: the random slice's gain − loss"
        " against the adapters alone over sqrt(gain + loss). The random slice is an unbiased sample of the pool;"
        " the whole batch is biased toward the items active strategies find hard (a second opinion, not the"
        " criterion). The upper bound reads the test counts and is left out.",
        "",
        "| rule | next random slice % | Δ | worst set Δ | z | next whole batch % (biased) | Δ | worst set Δ |",
        "|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {name} | " + " | ".join(_summary(tally, "uniform", name) + _summary(tally, "batch", name)) + " |"
        for name in CHOOSABLE
    ]


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
        *prequential_table(by_job),
        "",
        "**The test set: a description, not a choice.** Picking the rule with the best test rows would tune it"
        " on the test split; choose by the next-batch table above.",
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
                    acc.get((data, strategy, BASE, n)),
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
