"""Replay rules for the blend's weight (predictor/blend.py) on recorded simulation runs, without the models.

    .venv/bin/python bench/blend_rules.py bench/raw/<date>/<run>-records.jsonl.gz --out <report>.md

Every round record of a run with the blend on carries ``blend.evidence``: for each grid weight, the
counts (predictor.blend.weight_counts) on the round's held-out batch, on its random slice alone and on
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

``--deployed RUN.tgz`` adds a deployed run (bench/gpu_deployed.sh's run.tgz as committed under bench/raw: each
``out/records-<set>.jsonl`` is the app's own round records, taken as one job "<set>-deployed-<commit>", and a
simulation beside it, ``sim/out/records.jsonl``, as simulation records). Session 26's CLINC150 run is the case
that asked for the floor (w ≥ 0.1) and the log-likelihood rules: its round 3 blended w = 0 (the proxy alone) on
100 held-out labels (16 right against the adapters' 14) and its test accuracy fell from the adapters' 39 % to 11 %.
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
from predictor.blend import BY, FLOOR, MIN_HELDOUT, WINDOW, choose_weight, pool  # noqa: E402

AT = (200, 500, 1000)
BY_ACCURACY: dict[str, Any] = {"by": "accuracy", "floor": 0.0}  # the rule before 2026-12-06
History = Sequence[dict[str, Any]]  # the evidence dicts of a job's rounds so far, oldest first
Rule = Callable[[History], float]
Jobs = dict[tuple[str, str, int], list[dict[str, Any]]]  # a job's round records by round, per (data, strategy, seed)
KEYS = ("uniform", "batch")  # the next batch's counts that score a weight: its random slice, all of it


def _fit(
    key: str,
    window: int | None,
    guard: float | None = None,
    min_n: int = MIN_HELDOUT,
    by: str = BY,
    floor: float = FLOOR,
) -> Rule:
    """Pool ``key`` ("batch" or "uniform") counts of the last ``window`` rounds (None: all), pick by
    ``by`` among weights >= ``floor``; the adapters alone below ``min_n`` pooled items."""

    def rule(history: History) -> float:
        recent = history if window is None else history[-window:]
        parts = [e[key] for e in recent if e.get(key)]
        if not parts:
            return 1.0
        grid = history[-1]["grid"]
        return choose_weight(pool(parts), grid=grid, guard=guard, min_n=min_n, by=by, floor=floor)

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
    f"batches, last {WINDOW}, by accuracy (the rule until 2026-12-06)": _fit("batch", WINDOW, **BY_ACCURACY),
    f"batches, last {WINDOW}, by accuracy, guard z = 1": _fit("batch", WINDOW, guard=1.0, **BY_ACCURACY),
    "batches, all rounds, by accuracy": _fit("batch", None, **BY_ACCURACY),
    f"batches, last {WINDOW}, by accuracy, from 200 held-out": _fit("batch", WINDOW, min_n=200, **BY_ACCURACY),
    "batches, all rounds, by accuracy, guard z = 2": _fit("batch", None, guard=2.0, **BY_ACCURACY),
    f"batches, last {WINDOW}, by accuracy, w ≥ 0.1 (the default)": _fit("batch", WINDOW, by=BY, floor=FLOOR),
    f"batches, last {WINDOW}, by log-likelihood": _fit("batch", WINDOW, by="loglik", floor=0.0),
    f"batches, last {WINDOW}, by log-likelihood, w ≥ 0.1": _fit("batch", WINDOW, by="loglik", floor=0.1),
    "batches, all rounds, by log-likelihood, w ≥ 0.1": _fit("batch", None, by="loglik", floor=0.1),
    f"random slice, last {WINDOW}, by accuracy": _fit("uniform", WINDOW, **BY_ACCURACY),
    "random slice, all rounds, by accuracy": _fit("uniform", None, **BY_ACCURACY),
    "random slice, all rounds, by accuracy, guard z = 1": _fit("uniform", None, guard=1.0, **BY_ACCURACY),
    UPPER_BOUND: _best_on_test,
}
DEFAULT = f"batches, last {WINDOW}, by accuracy, w ≥ 0.1 (the default)"
BY_LIKELIHOOD = f"batches, last {WINDOW}, by log-likelihood, w ≥ 0.1"  # measured beside it (predictor/blend.py)
RECORDED = f"batches, last {WINDOW}, by accuracy (the rule until 2026-12-06)"  # the weights of older records
CHOOSABLE = [name for name in RULES if name != UPPER_BOUND]  # the rules the prequential table scores


class Scored(NamedTuple):
    """A round's weight scored on the next round's counts (its random slice, or its whole batch)."""

    labels: int  # the labels of the round that chose the weight
    weight: float
    correct: int  # of the next round's items, those the blend at ``weight`` gets right
    n: int
    gain: int  # right at ``weight`` where the adapters alone are wrong
    loss: int  # wrong at ``weight`` where the adapters alone are right
    loglik: float  # the summed log-likelihood of their gold labels at ``weight`` (probabilities floored)


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
                float(counts["loglik"][i]),
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
    loglik: float = 0.0

    def add(self, s: Scored | Pooled) -> None:
        self.rounds += s.rounds if isinstance(s, Pooled) else 1
        self.correct += s.correct
        self.n += s.n
        self.gain += s.gain
        self.loss += s.loss
        self.loglik += s.loglik


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
        return ["–"] * (7 if key == "uniform" else 3)
    total, base = Pooled(), Pooled()
    worst, worst_nll = np.inf, -np.inf
    for cell in sets:
        mine, theirs = tally[(key, name, *cell)], tally[(key, BASE, *cell)]
        total.add(mine)
        base.add(theirs)
        worst = min(worst, 100.0 * (mine.correct - theirs.correct) / mine.n)
        worst_nll = max(worst_nll, (theirs.loglik - mine.loglik) / mine.n)
    accuracy = 100.0 * total.correct / total.n
    cells = [f"{accuracy:.1f}", f"{accuracy - 100.0 * base.correct / total.n:+.1f}", f"{worst:+.1f}"]
    if key == "uniform":
        discordant = total.gain + total.loss
        cells.append(f"{(total.gain - total.loss) / np.sqrt(discordant):+.1f}" if discordant else "–")
        nll = -total.loglik / total.n
        cells += [f"{nll:.3f}", f"{nll + base.loglik / total.n:+.3f}", f"{worst_nll:+.3f}"]
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
        " criterion). NLL: the random slice's mean negative log-likelihood of the gold label per item (lower is"
        " better; probabilities floored at 1e-6), ΔNLL minus the adapters alone's, worst set ΔNLL the highest of"
        " any set. The upper bound reads the test counts and is left out.",
        "",
        "| rule | next random slice % | Δ | worst set Δ | z | NLL | ΔNLL | worst set ΔNLL"
        " | next whole batch % (biased) | Δ | worst set Δ |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {name} | " + " | ".join(_summary(tally, "uniform", name) + _summary(tally, "batch", name)) + " |"
        for name in CHOOSABLE
    ]


def active_vs_random(by_job: Jobs) -> list[str]:
    """The label-efficiency comparison (annotate/simulation/report.py's paired Δ area, each strategy minus random
    on the same seeds) with every round's test accuracy replayed at the weight each rule picks: the adapters and
    the proxies are the recorded ones (the default committee's picks do not read the blend), so only the
    predictor's accuracy changes. A description on the test set, like the tables below."""
    from annotate.simulation.report import paired_rows

    names = [RECORDED, DEFAULT, BY_LIKELIHOOD, BASE]
    cells: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for name in names:
        replayed = []
        for (_, strategy, _), rounds in by_job.items():
            if strategy == "deployed":
                continue
            for r, (_, _, accuracy) in zip(rounds, replay(rounds, RULES[name]), strict=True):
                replayed.append({**r, "accuracy": accuracy / 100.0})
        for row in paired_rows(replayed, []):
            cells[(row["data"], row["strategy"])][name] = f"{row['delta_auc']} ({row['wins']})"
    if not cells:
        return []
    lines = [
        "**Active vs random under each rule** (Δ area under the test-accuracy curve, strategy minus random on the"
        " same seeds, mean ± std (seeds), rounds won in brackets; every round's accuracy replayed at the rule's"
        " weight from the recorded test counts: a description on the test set):",
        "",
        "| data | strategy | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for (data, strategy), row in sorted(cells.items()):
        lines.append(f"| {data} | {strategy} | " + " | ".join(row.get(n, "–") for n in names) + " |")
    return [*lines, ""]


def _round_by_round(data: str, rounds: Sequence[dict[str, Any]]) -> list[str]:
    """A deployed run, round by round: each rule's weight and what it scored on the test set (a description)."""
    names = [RECORDED, DEFAULT, BY_LIKELIHOOD, BASE]
    runs = {name: replay(rounds, RULES[name]) for name in names}
    lines = [
        f"**{data}, round by round** (test accuracy % at each rule's weight; a description, not a choice):",
        "",
        "| round | labels | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for i, r in enumerate(rounds):
        cells = [f"w = {runs[name][i][1]:.1f}: {runs[name][i][2]:.1f}" for name in names]
        lines.append(f"| {r['round']} | {r['labels']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def tables(records: Sequence[dict[str, Any]]) -> str:
    by_job = jobs(records)
    if not by_job:
        return "No record carries blend evidence (runs before the counts were stored, or with blend off)."
    acc: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    same: dict[str, int] = defaultdict(int)
    total = 0
    deployed: list[str] = []
    for (data, strategy, _), rounds in by_job.items():
        for name, rule in RULES.items():
            for labels, w, a in replay(rounds, rule):
                acc[(data, strategy, name, labels)].append(a)
                if name in (DEFAULT, RECORDED):
                    recorded = [r["blend"]["weight"] for r in rounds if int(r["labels"]) == labels][0]
                    same[name] += int(abs(recorded - w) < 1e-9)
                    total += name == DEFAULT
        if strategy == "deployed":
            deployed += _round_by_round(data, rounds)
    sets = sorted({(d, s) for d, s, _ in by_job})
    lines = [
        f"Replayed on {len(by_job)} jobs; of their {total} rounds, the recorded weight is the one the rule until"
        f" 2026-12-06 gives in {same[RECORDED]} and the default's in {same[DEFAULT]} (records made before"
        " 2026-12-06 used the former).",
        "",
        *prequential_table(by_job),
        "",
        *active_vs_random(by_job),
        *(["", *deployed] if deployed else []),
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


def deployed_records(path: Path) -> list[dict[str, Any]]:
    """A deployed run's round records in the simulation records' shape (data "<set>-deployed-<commit>", strategy
    "deployed", seed 0, the round's number, its labels, its blend with the evidence), and the records of a
    simulation run beside it as they are. ``path``: a run.tgz (``out/records-<set>.jsonl``, ``sim/out/records.jsonl``)
    named ``deployed-<commit>-...``."""
    import json
    import tarfile

    commit = path.name.split("-")[1] if path.name.startswith("deployed-") else "?"
    out: list[dict[str, Any]] = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            deployed = name.startswith("out/records-") and name.endswith(".jsonl")
            if not (deployed or name == "sim/out/records.jsonl"):
                continue
            handle = tar.extractfile(member)
            lines = handle.read().decode("utf-8").splitlines() if handle else []
            for line in lines:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line
                if not deployed:
                    out.append(r)
                    continue
                metrics = r.get("metrics") or {}
                if r.get("status") != "done" or not metrics.get("blend"):
                    continue
                out.append(
                    {
                        "data": f"{r['set']}-deployed-{commit}",
                        "strategy": "deployed",
                        "seed": 0,
                        "round": int(r["number"]),
                        "labels": int(metrics.get("labels") or r["labels_total"]),
                        "blend": metrics["blend"],
                        "commit": commit,
                    }
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", type=Path, nargs="*")
    ap.add_argument("--deployed", type=Path, nargs="*", default=[], help="deployed runs' run.tgz (bench/raw)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    records = load_records(args.records) + [r for path in args.deployed for r in deployed_records(path)]
    commits = sorted({str(r.get("commit") or "?")[:10] for r in records})
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    deployed = f" --deployed {' '.join(str(p) for p in args.deployed)}" if args.deployed else ""
    text = (
        f"`python bench/blend_rules.py {' '.join(str(p) for p in args.records)}{deployed}` at"
        f" {here.stdout.strip() or '?'}"
        f" (records of commit {', '.join(commits)})\n\n" + tables(records) + "\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
