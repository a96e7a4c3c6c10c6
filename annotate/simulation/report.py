"""Learning curves of the simulation harness: the markdown table and the plot from records.jsonl.

    python bench/sim_report.py var/sim/trec var/sim/sst2            # folders holding records.jsonl (this module's CLI)
    python bench/sim_report.py OUT --baselines ../shared/design/BASELINES.md --plots-dir bench/plots

Plain Python (numpy, matplotlib; no Django), so it runs on the records of a GPU run anywhere. One
record per (data, strategy, seed, round) with ``labels`` and ``accuracy``; the ``full-data`` record
(round 0) gives the ceiling. Per (data, strategy), over seeds (mean ± std, test accuracy in %):

- acc@100/200/500/1000: linear interpolation on each seed's curve; "–" where the curve does not
  reach that many labels;
- area under the curve: the mean accuracy over the label range every strategy of the data set
  covers (trapezoid rule, divided by the width of the range), so strategies compare on equal ground;
- labels to 95 %: the first label count (interpolated) where the curve reaches 95 % of the full-data
  accuracy; "> N" when no seed got there within N labels;
- s/round: wall seconds of one round (all steps, the simulated labelling included).

Paired with two random baselines on the same seeds: random with a uniform seed set (a user without
the app) and ``random-coldstart`` (the strategy's own cold start, then uniform batches); the Δ against
the second is the selection's own gain, the rest of the first is the cold start's.

The baseline's rows (BASELINES.md: MiniLM + logistic regression, same data, same label counts) are
printed next to ours. Its area under the curve spans its own range (20 to about 1,000 labels), so
compare areas within one source only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

AT_LABELS = (100, 200, 500, 1000)  # the baseline's columns
FULL_DATA = "full-data"
TARGET_SHARE = 0.95
DASH = "–"
ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_BASELINES = ROOT.parent / "shared" / "design" / "BASELINES.md"
STEP_ORDER = ("planning", "scoring", "selecting", "labeling", "start_training", "training", "evaluating")

Curve = tuple[np.ndarray, np.ndarray]  # labels (increasing), accuracy in %


def load_records(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Records of every records.jsonl given (a folder means its records.jsonl; a ``.gz`` file is read
    through gzip, and a name whose ``.gz`` alone is stored reads that: bench/raw/ keeps large raw files
    gzipped, as bench/rawfiles.open_raw reads them). A torn last line (a killed run) is skipped."""
    out = []
    for path in paths:
        file = path / "records.jsonl" if path.is_dir() else path
        if not file.exists() and file.with_name(file.name + ".gz").is_file():
            file = file.with_name(file.name + ".gz")
        if not file.is_file():
            print(f"no records at {file}")
            continue
        raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
        for line in raw.decode("utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.append(_named_by_start(record))
    return out


SHAPE_TAGS = ("B", "S", "C")  # run_shape's fields in a report name: batch size, seed set, consolidation


def named_by_shape(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where the records of one data set were made at more than one batch size B, seed-set size or
    consolidation period (the records' ``batch_size`` / ``seed_labels`` / ``config.consolidate_every``,
    run_shape), each shape is its own data set, "<data>-B<B>" (and "-S<seed set>" where seed sets
    differ, "-C<N>" where the consolidation differs: a sweep of it): its curves are paired with random's
    of the same shape and never averaged with another's. One shape (or none recorded): names unchanged."""
    shapes: dict[str, set[tuple[int | None, ...]]] = {}
    for r in records:
        shapes.setdefault(str(r.get("data")), set()).add(run_shape(r))
    out = []
    for r in records:
        seen = shapes[str(r.get("data"))]
        # a record that names no B (or seed set...) counts for neither: it keeps the plain name
        suffix = "".join(
            f"-{tag}{value}"
            for i, (tag, value) in enumerate(zip(SHAPE_TAGS, run_shape(r), strict=True))
            if value is not None and len({x[i] for x in seen} - {None}) > 1
        )
        out.append({**r, "data": f"{r['data']}{suffix}"} if suffix else r)
    return out


def source_set(name: str) -> str:
    """The data set's own name (its folder under the data directory) from a report name: "trec" from
    "trec-B50-S50" (named_by_shape)."""
    return re.sub(r"(-B\d+)?(-S\d+)?(-C\d+)?$", "", name)


def run_shape(record: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """(B, seed-set size, consolidation period) a record's run was made at: the simulation's
    ``batch_size``, ``seed_labels`` and resolved ``config.consolidate_every``, or the cheap learner's
    (bench/proxy_sim.py) ``loop_options``; None where not recorded (records of the cheap learner before
    session 12 name no seed set; records before issue 33 no consolidation, which was off)."""
    options = record.get("loop_options") or {}
    b = record.get("batch_size", options.get("batch"))
    s0 = record.get("seed_labels", options.get("seed_labels"))
    every = (record.get("config") or {}).get("consolidate_every")
    return _int_or_none(b), _int_or_none(s0), _int_or_none(every)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _named_by_start(record: dict[str, Any]) -> dict[str, Any]:
    """A strategy whose seed set was not a uniform draw (``cold_mode`` "typical" or "diversity") is
    reported as its own strategy, "<strategy>+<mode>": its curve and random's no longer share round 1.
    Records without the field (older runs) had a uniform seed set. An active or portfolio run whose
    soft-rank exponent was not 1 gets "+β<value>" as well, and one drawn by the blended predictor's
    uncertainty (loop option committee "blend") "+blend-committee"."""
    mode = str(record.get("cold_mode") or "random")
    if mode != "random" and isinstance(record.get("strategy"), str):
        record = {**record, "strategy": f"{record['strategy']}+{mode}"}
    beta = softrank_beta(record)
    if beta != 1.0 and str(record.get("strategy")).split("+")[0] in ("active", "portfolio"):
        record = {**record, "strategy": f"{record['strategy']}+β{beta:g}"}
    committee = ((record.get("config") or {}).get("selection") or {}).get("committee", "members")
    if committee != "members" and str(record.get("strategy")).split("+")[0] in ("active", "portfolio"):
        record = {**record, "strategy": f"{record['strategy']}+{committee}-committee"}
    return record


def softrank_beta(record: dict[str, Any]) -> float:
    """The soft-rank exponent the record's loop drew with (1 for records made before it was an option)."""
    selection = (record.get("config") or {}).get("selection") or {}
    return float(record.get("softrank_beta", selection.get("softrank_beta", 1.0)))


def data_key(name: str) -> str:
    """ "SST-2" and "sst2" name the same data set, and so does "sst2-B50" (named_by_shape)."""
    return re.sub(r"[^a-z0-9]", "", source_set(name).lower())


# -- curves and their summaries -------------------------------------------------------------------


def curves(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[int, Curve]]:
    """{(data, strategy): {seed: (labels, accuracy %)}} of the round records, sorted by labels."""
    points: dict[tuple[str, str], dict[int, list[tuple[float, float]]]] = {}
    for r in records:
        if r.get("strategy") == FULL_DATA or r.get("accuracy") is None or r.get("labels") is None:
            continue
        per_seed = points.setdefault((r["data"], r["strategy"]), {})
        per_seed.setdefault(int(r["seed"]), []).append((float(r["labels"]), 100.0 * float(r["accuracy"])))
    out: dict[tuple[str, str], dict[int, Curve]] = {}
    for key, per_seed in points.items():
        out[key] = {}
        for seed, xy in per_seed.items():
            xy = sorted(dict(xy).items())  # one point per label count (a replayed round counts once)
            out[key][seed] = (np.array([x for x, _ in xy]), np.array([y for _, y in xy]))
    return out


def full_data_accuracy(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean full-data accuracy (%) per data set."""
    values: dict[str, list[float]] = {}
    for r in records:
        if r.get("strategy") == FULL_DATA and r.get("accuracy") is not None:
            values.setdefault(r["data"], []).append(100.0 * float(r["accuracy"]))
    return {data: float(np.mean(v)) for data, v in values.items()}


def at(curve: Curve, x: float) -> float | None:
    """Accuracy at ``x`` labels, interpolated; None outside the curve's range."""
    labels, acc = curve
    if len(labels) == 0 or x < labels[0] or x > labels[-1]:
        return None
    return float(np.interp(x, labels, acc))


def area(curve: Curve, lo: float, hi: float) -> float | None:
    """Mean accuracy over [lo, hi] (trapezoid rule on the interpolated curve)."""
    labels, acc = curve
    if len(labels) == 0 or lo < labels[0] or hi > labels[-1]:
        return None
    if hi <= lo:
        return float(np.interp(lo, labels, acc))
    inside = (labels > lo) & (labels < hi)
    xs = np.concatenate([[lo], labels[inside], [hi]])
    ys = np.interp(xs, labels, acc)
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / (hi - lo))


def labels_to_reach(curve: Curve, target: float) -> float | None:
    """First label count (interpolated between rounds) where accuracy reaches ``target``."""
    labels, acc = curve
    for i in range(len(labels)):
        if acc[i] >= target:
            if i == 0:
                return float(labels[0])
            x0, x1, y0, y1 = labels[i - 1], labels[i], acc[i - 1], acc[i]
            return float(x0 + (target - y0) * (x1 - x0) / (y1 - y0))
    return None


def mean_std(values: Sequence[float | None]) -> tuple[float, float, int] | None:
    """(mean, std, n) of the values present; std over seeds (ddof 1; 0 for a single seed)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    std = float(np.std(present, ddof=1)) if len(present) > 1 else 0.0
    return float(np.mean(present)), std, len(present)


def fmt(stat: tuple[float, float, int] | None, total: int, digits: int = 1) -> str:
    """ "mean±std", with "(n/N)" when only some seeds have a value; "–" when none does."""
    if stat is None:
        return DASH
    mean, std, n = stat
    text = f"{mean:.{digits}f}±{std:.{digits}f}"
    return text if n == total else f"{text} ({n}/{total})"


# -- the table ------------------------------------------------------------------------------------


def summary_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per (data, strategy): the table's cells, formatted."""
    by_key = curves(records)
    full = full_data_accuracy(records)
    seconds = round_seconds(records)
    rows = []
    for data in sorted({d for d, _ in by_key}):
        keys = [k for k in by_key if k[0] == data]
        lo = max(min(c[0][0] for c in by_key[k].values()) for k in keys)
        hi = min(max(c[0][-1] for c in by_key[k].values()) for k in keys)
        for key in sorted(keys, key=lambda k: strategy_order(k[1])):
            per_seed = list(by_key[key].values())
            n = len(per_seed)
            row = {"data": data, "strategy": key[1], "seeds": str(n)}
            for x in AT_LABELS:
                row[f"acc@{x}"] = fmt(mean_std([at(c, x) for c in per_seed]), n)
            row["auc"] = fmt(mean_std([area(c, lo, hi) for c in per_seed]), n) + f" [{lo:.0f}–{hi:.0f}]"
            row["full"] = f"{full[data]:.1f}" if data in full else DASH
            row["to95"] = _to95(per_seed, full.get(data))
            row["s/round"] = fmt(mean_std(seconds.get(key, [])), len(seconds.get(key, [])) or 1, 0)
            rows.append(row)
    return rows


def _to95(per_seed: Sequence[Curve], full: float | None) -> str:
    if full is None:
        return DASH
    reached = [labels_to_reach(c, TARGET_SHARE * full) for c in per_seed]
    stat = mean_std(reached)
    if stat is None:
        return f"> {max(c[0][-1] for c in per_seed):.0f}"
    return fmt(stat, len(per_seed), 0)


RANDOM = "random"
RANDOM_COLDSTART = "random-coldstart"  # annotate.simulation.harness: active's seed set, then random batches
SEED_SET_MODES = ("diversity", "typical", "hedged")  # the non-uniform cold modes (acquisition.batch.COLD_MODES)


def seed_set_peer(strategy: str) -> str:
    """The random curve that starts from the same seed set as ``strategy`` (a report name): "random"
    for a uniform seed set, "random-coldstart+<mode>" for one its cold start picked ("active+typical"
    → "random-coldstart+typical"). Against it, a strategy's Δ is its selection's own gain."""
    mode = next((part for part in strategy.split("+")[1:] if part in SEED_SET_MODES), None)
    return RANDOM if mode is None else f"{RANDOM_COLDSTART}+{mode}"


def paired_delta(ours: dict[int, Curve], theirs: dict[int, Curve]) -> tuple[list[float], list[str], int, int]:
    """Seed by seed, ``ours`` against ``theirs`` on the seeds both have: Δ area under the curve over the
    labels both reached, "seed: Δ" strings, and the rounds (label counts after the first) won of those
    present in both."""
    deltas, per_seed, wins, total = [], [], 0, 0
    for seed, curve in sorted(ours.items()):
        if seed not in theirs:
            continue
        other = theirs[seed]
        lo, hi = max(curve[0][0], other[0][0]), min(curve[0][-1], other[0][-1])
        a, b = area(curve, lo, hi), area(other, lo, hi)
        if a is not None and b is not None:
            deltas.append(a - b)
            per_seed.append(f"{seed}: {a - b:+.1f}")
        common = sorted(set(curve[0].tolist()) & set(other[0].tolist()))
        for x in common[1:]:  # the first point is the seed set: equal by design where it is shared
            total += 1
            wins += int(at(curve, x) > at(other, x))  # type: ignore[operator]
    return deltas, per_seed, wins, total


def paired_rows(
    records: Sequence[dict[str, Any]], baselines: Sequence[dict[str, str]], superseded: Sequence[str] = ()
) -> list[dict[str, str]]:
    """Per (data, strategy other than random): the paired comparison with the two random baselines on
    the same seeds. Against uniform random (a uniform seed set too: what a user without the app does):
    Δ area under the curve (each seed's strategy minus its random, over the label range both cover),
    mean ± std over seeds, and wins = rounds (seed × label count present in both) where the strategy's
    accuracy is higher. Against random from the strategy's own seed set (``seed_set_peer``): the
    selection's own Δ, the cold start's share taken out ("–" without those records). The verdicts
    against the cheap baseline's margin loop at 200 and 1,000 labels (our mean minus its mean); and the
    commits of the pair's records (the strategy's, and random's of the seeds paired with them), each one
    that a ``superseded`` prefix (or full hash) names marked "(earlier code)": a row of code that no
    longer runs as it did then."""
    by_key = curves(records)
    rows = []
    for data in sorted({d for d, _ in by_key}):
        rand = by_key.get((data, RANDOM), {})
        margin = next(
            (r for r in baselines if data_key(r["data"]) == data_key(data) and r["strategy"].endswith("margin")), None
        )
        for key in sorted((k for k in by_key if k[0] == data and k[1] != RANDOM), key=lambda k: strategy_order(k[1])):
            deltas, per_seed, wins, total = paired_delta(by_key[key], rand)
            row = {"data": data, "strategy": key[1], "seeds": str(len(deltas))}
            row["delta_auc"] = fmt(mean_std(deltas), len(deltas)) if deltas else DASH
            row["per_seed"] = ", ".join(per_seed) or DASH
            row["wins"] = f"{wins}/{total}" if total else DASH
            peer = seed_set_peer(key[1])
            own, own_per_seed, _, _ = paired_delta(by_key[key], by_key.get((data, peer), {}))
            row["delta_auc_selection"] = fmt(mean_std(own), len(own)) if own and peer != key[1] else DASH
            row["per_seed_selection"] = ", ".join(own_per_seed) if own and peer != key[1] else DASH
            for x in (200, 1000):
                ours = mean_std([at(c, x) for c in by_key[key].values()])
                theirs = _mean_of(margin.get(f"acc@{x}", "")) if margin else None
                row[f"vs_margin@{x}"] = DASH if ours is None or theirs is None else f"{ours[0] - theirs:+.1f}"
            paired_seeds = {seed for seed in by_key[key] if seed in rand}
            pair = {
                str(r.get("commit") or "?")[:10]
                for r in records
                if r.get("data") == data
                and (
                    r.get("strategy") == key[1]
                    or (r.get("strategy") == RANDOM and r.get("seed") is not None and int(r["seed"]) in paired_seeds)
                )
            }
            row["commits"] = ", ".join(
                c + (" (earlier code)" if any(names_commit(p, c) for p in superseded) else "") for c in sorted(pair)
            )
            rows.append(row)
    return rows


def names_commit(given: str, commit: str) -> bool:
    """Whether ``given`` (a prefix or a full hash) names ``commit`` (a record's, cut to 10 characters;
    often the 7-character short hash)."""
    if not given or not commit or commit == "?":
        return False
    return commit.startswith(given[:10]) or given.startswith(commit)


def _mean_of(cell: str) -> float | None:
    match = re.match(r"([\d.]+)", cell)
    return float(match.group(1)) if match else None


PAIRED_COLUMNS = (
    ("data", "data"),
    ("strategy", "strategy"),
    ("seeds", "paired seeds"),
    ("delta_auc", "Δ area under curve vs random"),
    ("delta_auc_selection", "Δ vs random from the same seed set (selection only)"),
    ("wins", "rounds won vs random"),
    ("vs_margin@200", "vs cheap margin loop @200"),
    ("vs_margin@1000", "vs cheap margin loop @1000"),
    ("commits", "commit"),
)


def per_seed_table(rows: Sequence[dict[str, str]]) -> str:
    """Each paired row's Δ area under the curve per seed (seed: Δ), the values the mean ± std summarise:
    against uniform random, and against random from the same seed set."""
    lines = [
        "| data | strategy | Δ area under curve vs random, per seed | Δ vs random from the same seed set, per seed |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['data']} | {r['strategy']} | {r.get('per_seed', DASH)} | {r.get('per_seed_selection', DASH)} |"
        for r in rows
    ]
    return "\n".join(lines)


def paired_table(rows: Sequence[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(t for _, t in PAIRED_COLUMNS) + " |", "|" + "---|" * len(PAIRED_COLUMNS)]
    lines += ["| " + " | ".join(r.get(k, DASH) for k, _ in PAIRED_COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def strategy_order(name: str) -> tuple[int, str]:
    order = ("active", "portfolio", "random", RANDOM_COLDSTART, "margin-kcenter", "uncertainty-only", "kcenter-only")
    base = name.partition("+")[0]  # "active+typical" next to "active"
    return (order.index(base) if base in order else len(order), name)


def round_seconds(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.get("strategy") != FULL_DATA and r.get("round_seconds") is not None:
            out.setdefault((r["data"], r["strategy"]), []).append(float(r["round_seconds"]))
    return out


def baseline_rows(path: Path | None) -> list[dict[str, str]]:
    """The rows of BASELINES.md's table (data, strategy, acc@..., area, full-data acc)."""
    if path is None or not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not line.startswith("|") or cells[0] in ("data", "") or set(cells[0]) <= {"-"}:
            continue
        data, strategy, *accs, auc, full = cells
        rows.append(
            {"data": data, "strategy": f"baseline: {strategy}", "seeds": "3", "auc": auc, "full": full, "to95": DASH}
            | {f"acc@{x}": a for x, a in zip(AT_LABELS, accs, strict=True)}
            | {"s/round": DASH}
        )
    return rows


COLUMNS = (
    ("data", "data"),
    ("strategy", "strategy"),
    ("seeds", "seeds"),
    *((f"acc@{x}", f"acc@{x}") for x in AT_LABELS),
    ("auc", "area under curve [labels]"),
    ("full", "full-data acc"),
    ("to95", "labels to 95 % of full"),
    ("s/round", "s/round"),
)


def markdown_table(ours: Sequence[dict[str, str]], baselines: Sequence[dict[str, str]]) -> str:
    """One table per data set: ours, then the baseline's rows of the same data set (matched by name:
    SST-2 = sst2), each table under its set's name when there are several. Without a full-data run
    of ours in the records, "labels to 95 % of full" has nothing to divide by and is left out, not
    shown empty (the full-data column stays: the baseline rows hold its ceiling)."""
    columns = [c for c in COLUMNS if c[0] != "to95" or any(r.get("full", DASH) != DASH for r in ours)]
    header = ["| " + " | ".join(title for _, title in columns) + " |", "|" + "---|" * len(columns)]
    sets = list(dict.fromkeys(r["data"] for r in ours))
    lines: list[str] = []
    for data in sets:
        if len(sets) > 1:
            lines += ([""] if lines else []) + [f"**{data}**", ""]
        lines += header
        same = [r for r in baselines if data_key(r["data"]) == data_key(data)]
        for row in [r for r in ours if r["data"] == data] + same:
            lines.append("| " + " | ".join(row.get(key, DASH) for key, _ in columns) + " |")
    if len(columns) < len(COLUMNS):
        lines.append("")
        lines.append(
            "No full-data run of ours in these records (`simulate --full-data`): the full-data column is the"
            " baseline's ceiling only, and labels to 95 % of it is not shown."
        )
    return "\n".join(lines)


def cost_table(records: Sequence[dict[str, Any]]) -> str:
    """Mean wall seconds per step of a round, per (data, strategy), and the full-data run."""
    steps: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in records:
        per = steps.setdefault((r["data"], r["strategy"]), {})
        for step, s in (r.get("seconds") or {}).items():
            per.setdefault(step, []).append(float(s))
    names = [s for s in STEP_ORDER if any(s in per for per in steps.values())]
    names += sorted({s for per in steps.values() for s in per} - set(names))
    lines = ["| data | strategy | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 2)]
    for (data, strategy), per in sorted(steps.items(), key=lambda kv: (kv[0][0], strategy_order(kv[0][1]))):
        cells = [f"{np.mean(per[s]):.1f}" if s in per else DASH for s in names]
        lines.append(f"| {data} | {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


MEMORY_AT = (600, 1000)  # label counts of the memory table's columns, after the first round


def memory_table(records: Sequence[dict[str, Any]]) -> str:
    """Peak reserved GPU memory per job (the records' ``gpu_peak_mib``, the largest over seeds) at the
    first round and at MEMORY_AT labels, per (data, strategy), with how the members' training steps
    ran (``adapters.step_modes``, all rounds); empty where no record carries GPU memory (CPU runs)."""
    peaks: dict[tuple[str, str], dict[str, float]] = {}
    modes: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if r.get("gpu_peak_mib") is None or r.get("strategy") == FULL_DATA:
            continue
        key = (r["data"], r["strategy"])
        column = "first" if r.get("round") == 1 else str(r.get("labels"))
        per = peaks.setdefault(key, {})
        per[column] = max(per.get(column, 0.0), float(r["gpu_peak_mib"]))
        modes.setdefault(key, set()).update(str(m) for m in (r.get("adapters") or {}).get("step_modes") or [])
    if not peaks:
        return ""
    head = ["first round", *(f"{n:,} labels" for n in MEMORY_AT)]
    lines = ["| data | strategy | " + " | ".join(head) + " | training steps |", "|" + "---|" * (len(head) + 3)]
    for key, per in sorted(peaks.items(), key=lambda kv: (kv[0][0], strategy_order(kv[0][1]))):
        cells = [f"{per[c]:,.0f} MiB" if c in per else DASH for c in ("first", *map(str, MEMORY_AT))]
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + f" | {', '.join(sorted(modes[key])) or DASH} |")
    return "\n".join(lines)


# -- the plot -------------------------------------------------------------------------------------


def plot(records: Sequence[dict[str, Any]], data: str, path: Path, baselines: Sequence[dict[str, str]]) -> Path:
    """Accuracy vs labels per strategy (mean ± std over seeds), the full-data accuracy as a flat
    line, and the baseline's acc@N points with their std (training.curves.learning_curve_png)."""
    from training.curves import learning_curve_png

    series: dict[str, list[tuple[int, float, float]]] = {}
    for (d, strategy), per_seed in sorted(curves(records).items(), key=lambda kv: strategy_order(kv[0][1])):
        if d == data:
            grid, mean, std = _band(list(per_seed.values()))
            band = zip(grid.tolist(), mean.tolist(), std.tolist(), strict=True)
            series[f"{strategy} ({len(per_seed)} seeds)"] = list(band)
    xs = [p[0] for points in series.values() for p in points]
    full = full_data_accuracy(records).get(data)
    if full is not None and xs:
        series[f"full data ({full:.1f})"] = [(min(xs), full, 0.0), (max(xs), full, 0.0)]
    for row in (r for r in baselines if data_key(r["data"]) == data_key(data)):
        points = _baseline_points(row)
        if points:
            series[row["strategy"]] = points
    title = f"{data}: test accuracy vs labels (mean ± std over seeds)"
    return learning_curve_png(series, path, title=title, ylabel="test accuracy (%)")


def _band(per_seed: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over seeds on the label counts every seed reached."""
    grid = np.array(sorted(set.intersection(*(set(c[0].tolist()) for c in per_seed))))
    ys = np.array([np.interp(grid, c[0], c[1]) for c in per_seed])
    std = ys.std(axis=0, ddof=1) if len(ys) > 1 else np.zeros(len(grid))
    return grid.astype(int), ys.mean(axis=0), std


def _baseline_points(row: dict[str, str]) -> list[tuple[int, float, float]]:
    points = []
    for x in AT_LABELS:
        match = re.match(r"([\d.]+)±([\d.]+)", row.get(f"acc@{x}", ""))
        if match:
            points.append((x, float(match.group(1)), float(match.group(2))))
    return points


# -- entry point ----------------------------------------------------------------------------------


def stopping_table(records: Sequence[dict[str, Any]]) -> str:
    """Where the ML page's stabilizing-predictions rule (predictor.stopping_rule: κ between consecutive
    rounds' predictions on the stop set ≥ 0.99 for 3 round pairs) would have said "you can stop
    here", per (data, strategy): the labels at that round per seed ("> N": not within the N labels
    the curve reached), the accuracy there and at the curve's end, and the last κ (mean over seeds)."""
    from predictor.stopping_rule import first_stable

    lines = [
        "| data | strategy | stop rule fired at (labels, per seed) | acc there | acc at the end | last κ |",
        "|---|---|---|---|---|---|",
    ]
    by_job: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
    for r in records:
        if r.get("strategy") != FULL_DATA and "stop_kappa" in r:
            by_job.setdefault((r["data"], r["strategy"]), {}).setdefault(int(r["seed"]), []).append(r)
    for (data, strategy), seeds in sorted(by_job.items(), key=lambda kv: (kv[0][0], strategy_order(kv[0][1]))):
        fired, there, end, last = [], [], [], []
        for _, rows in sorted(seeds.items()):
            rows = sorted({int(r["round"]): r for r in rows}.values(), key=lambda r: int(r["round"]))
            i = first_stable([r.get("stop_kappa") for r in rows])
            fired.append(f"> {rows[-1]['labels']}" if i is None else str(rows[i]["labels"]))
            if i is not None:
                there.append(100.0 * float(rows[i]["accuracy"]))
            end.append(100.0 * float(rows[-1]["accuracy"]))
            if rows[-1].get("stop_kappa") is not None:
                last.append(float(rows[-1]["stop_kappa"]))
        cells = [
            ", ".join(fired),
            fmt(mean_std(there), len(seeds)) if there else DASH,
            fmt(mean_std(end), len(seeds)),
            f"{np.mean(last):.3f}" if last else DASH,
        ]
        lines.append(f"| {data} | {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLEND_AT = (200, 500, 1000)


def blend_table(records: Sequence[dict[str, Any]]) -> str:
    """The predictor's parts (predictor/blend.py) per (data, strategy) at 200 / 500 / 1,000 labels:
    the adapters alone, the proxy alone and the blend on the test set, and the weight on the
    adapters (mean over seeds). Empty when no record carries a blend (runs with ``blend`` off or
    made before it existed)."""
    rows: dict[tuple[str, str], dict[int, dict[int, dict[str, Any]]]] = {}
    for r in records:
        if r.get("strategy") != FULL_DATA and r.get("blend") and r.get("labels") in BLEND_AT:
            rows.setdefault((r["data"], r["strategy"]), {}).setdefault(int(r["labels"]), {})[int(r["seed"])] = r
    if not rows:
        return ""
    head = " | ".join(f"@{n}: adapters / proxy / blend (w)" for n in BLEND_AT)
    lines = [f"| data | strategy | {head} |", "|---|---|" + "---|" * len(BLEND_AT)]
    for (data, strategy), by_labels in sorted(rows.items(), key=lambda kv: (kv[0][0], strategy_order(kv[0][1]))):
        cells = [_blend_cell(list(by_labels.get(n, {}).values())) for n in BLEND_AT]
        lines.append(f"| {data} | {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _blend_cell(seeds: Sequence[dict[str, Any]]) -> str:
    """ "adapters / proxy / blend (w)" of one label count, means over the seeds' records."""
    if not seeds:
        return DASH

    def mean(values: Sequence[Any], scale: float, digits: int) -> str:
        present = [float(v) for v in values if v is not None]
        return f"{scale * float(np.mean(present)):.{digits}f}" if present else DASH

    parts = [mean([r["blend"].get(key) for r in seeds], 100, 1) for key in ("accuracy_llm", "accuracy_proxy")]
    blended = mean([r["accuracy"] for r in seeds], 100, 1)
    return f"{parts[0]} / {parts[1]} / {blended} ({mean([r['blend'].get('weight') for r in seeds], 1, 2)})"


def test_sets_line(records: Sequence[dict[str, Any]]) -> str:
    """The test items each set's accuracies are on: the whole test split, or a fixed sample of it
    (``--test-sample``: the same items for every strategy and seed)."""
    parts = []
    for data in sorted({r["data"] for r in records}):
        sizes = sorted({int(r["test_n"]) for r in records if r["data"] == data and r.get("test_n")})
        sampled = any(int(r.get("test_sample") or 0) > 0 for r in records if r["data"] == data)
        size = "/".join(str(n) for n in sizes) or "?"
        parts.append(f"{data} {size}" + (" (a fixed random sample of the test split)" if sampled else ""))
    return "Test items: " + "; ".join(parts) + "."


def write_report(
    records_path: Path | Sequence[Path],
    *,
    out_dir: Path,
    plots_dir: Path | None = None,
    baselines: Path | None = DEFAULT_BASELINES,
    drop: Sequence[str] = (),
    superseded: Sequence[str] = (),
) -> str:
    """The table (printed and written to OUT/report.md) and one PNG per data set, written to OUT and
    copied to ``plots_dir``. ``drop``: "[data/]strategy@commit-prefix" entries whose records are left
    out (a strategy re-run by newer code, its old records kept in the same file; "data/" limits it to
    one set). ``superseded``: commit prefixes whose code no longer exists as it ran (the paired
    table marks them "(earlier code)"). Returns the markdown."""
    paths = [records_path] if isinstance(records_path, Path) else list(records_path)
    records = selected_records(paths, drop)
    base = baseline_rows(baselines)
    blends = blend_table(records)
    text = "\n\n".join(
        [
            markdown_table(summary_rows(records), base),
            test_sets_line(records),
            "Paired with random on the same seeds (Δ: strategy minus random, mean ± std over seeds). Two random"
            " baselines: random with a uniform seed set (what a user without the app does), and random from the"
            " strategy's own seed set (random-coldstart: the typical-items cold start, then uniform batches), so"
            " the second Δ is the selection's own gain and the difference is the cold start's. The cheap margin"
            " loop's columns: our mean accuracy minus its mean, in points:",
            paired_table(paired := paired_rows(records, base, superseded)),
            "The same Δ seed by seed (seed: strategy minus each random baseline, points):",
            per_seed_table(paired),
            *(
                [
                    "The predictor's parts on the test set (mean over seeds, accuracy %): the K adapters"
                    " alone, the embedding proxy alone, and the blend the curves above report, with its"
                    " weight on the adapters (fitted on held-out batch labels, predictor/blend.py):",
                    blends,
                ]
                if blends
                else []
            ),
            "The stopping rule of the ML page, replayed on these curves (κ ≥ 0.99 for 3 round pairs):",
            stopping_table(records),
            "Seconds per round step (mean over rounds and seeds):",
            cost_table(records),
            *(
                [
                    "GPU memory per job (peak reserved, the records' gpu_peak_mib: the largest over seeds)"
                    " and how the training steps ran (adapters.step_modes):",
                    memory,
                ]
                if (memory := memory_table(records))
                else []
            ),
        ]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    for data in sorted({r["data"] for r in records}):
        png = plot(records, data, out_dir / f"sim-{data}.png", base)
        if plots_dir is not None and plots_dir.resolve() != out_dir.resolve():
            plots_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, plots_dir / png.name)
        text += f"\n\nPlot: {png}"
    (out_dir / "report.md").write_text(text + "\n", encoding="utf-8")
    return text


README_BEGIN = "<!-- sim-report:begin -->"
README_END = "<!-- sim-report:end -->"


def readme_block(
    records: Sequence[dict[str, Any]],
    baselines: Sequence[dict[str, str]],
    sources: Sequence[str],
    superseded: Sequence[str] = (),
) -> str:
    """README's label-efficiency lines: the paired table, the label counts the curves reached, the
    inputs and commits they came from. Written by ``sim_report.py --readme`` between README_BEGIN and
    README_END, never by hand."""
    reached = []
    for (data, strategy), per_seed in sorted(curves(records).items()):
        if strategy.partition("+")[0] in ("active", "random"):
            ends = sorted(int(c[0][-1]) for c in per_seed.values())
            reached.append(
                f"{data} {strategy} {ends[0]}–{ends[-1]}" if ends[0] != ends[-1] else f"{data} {strategy} {ends[0]}"
            )
    commits = sorted({str(r.get("commit") or "?")[:10] for r in records})
    return "\n".join(
        [
            README_BEGIN,
            f"Generated by `python bench/sim_report.py {' '.join(sources)} --readme README.md` (records of commit"
            f" {', '.join(commits)}; the labels the curves reached, fewest–most over the seeds: {'; '.join(reached)}).",
            test_sets_line(records),
            "",
            paired_table(paired_rows(records, baselines, superseded)),
            README_END,
        ]
    )


def update_readme(path: Path, block: str) -> None:
    """Replace the text between the README markers (both must be there, once) with ``block``."""
    text = path.read_text(encoding="utf-8")
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1:
        raise ValueError(f"{path} must hold {README_BEGIN} and {README_END} once each")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    path.write_text(head + block + tail, encoding="utf-8")


def selected_records(paths: Sequence[Path], drop: Sequence[str]) -> list[dict[str, Any]]:
    """The records of ``paths`` less the ``drop`` entries; a job (data, strategy, seed, B) found in
    several inputs — the same configuration run again, e.g. to take it further — keeps the run of the
    last input that holds it (said on stdout), so no curve counts a seed twice. A data set run at
    several B is one data set per B (named_by_shape)."""
    by_input = [[r for r in load_records([path]) if not _dropped(r, drop)] for path in paths]
    owner: dict[tuple[str, str, Any, Any], int] = {}
    for i, records in enumerate(by_input):
        for r in records:
            owner[(data_key(str(r.get("data", ""))), str(r.get("strategy")), r.get("seed"), run_shape(r))] = i
    out = []
    for i, records in enumerate(by_input):
        replaced = set()
        for r in records:
            key = (data_key(str(r.get("data", ""))), str(r.get("strategy")), r.get("seed"), run_shape(r))
            if owner[key] == i:
                out.append(r)
            else:
                replaced.add(key)
        for data, strategy, seed, b in sorted(replaced, key=str):
            newer = paths[owner[(data, strategy, seed, b)]]
            print(f"{data} {strategy} seed {seed}: the run in {newer} replaces {paths[i]}'s")
    return named_by_shape(out)


def _dropped(record: dict[str, Any], drop: Sequence[str]) -> bool:
    """Whether a "[DATA/]STRATEGY@COMMIT-PREFIX" entry of ``drop`` names this record (without DATA:
    that strategy's records of every data set; DATA "trec-B50", "trec-B50-S50" or "trec-C3": only the
    records of that run shape, named_by_shape)."""
    shape = run_shape(record)
    for entry in drop:
        scope, _, commit = entry.partition("@")
        data, _, strategy = scope.rpartition("/")
        wanted = [re.search(rf"-{tag}(\d+)(?=-|$)", data) for tag in SHAPE_TAGS]
        if any(m and shape[i] != int(m.group(1)) for i, m in enumerate(wanted)):
            continue
        if (
            (not data or data_key(str(record.get("data", ""))) == data_key(data))
            and record.get("strategy") == strategy
            and str(record.get("commit", "")).startswith(commit)
        ):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="records.jsonl files or folders holding one")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: the first input's)")
    parser.add_argument(
        "--plots-dir",
        type=Path,
        default=None,
        help="where the plots go (default: bench/plots with --readme, which shows them; else the report folder)",
    )
    parser.add_argument("--baselines", type=Path, default=DEFAULT_BASELINES)
    parser.add_argument("--drop", action="append", default=[], help="[DATA/]STRATEGY@COMMIT: leave those records out")
    parser.add_argument("--readme", type=Path, default=None, help="also rewrite this README's sim-report block")
    parser.add_argument(
        "--superseded",
        action="append",
        default=[],
        help='COMMIT: records of this commit (prefix) ran code that no longer exists; marked "(earlier code)"',
    )
    args = parser.parse_args()
    first = args.inputs[0]
    out = args.out or (first if first.is_dir() else first.parent)
    plots_dir = args.plots_dir or (ROOT / "bench" / "plots" if args.readme is not None else out)
    records = selected_records(args.inputs, args.drop) if args.superseded or args.readme is not None else []
    if args.superseded:
        commits = {str(r.get("commit") or "")[:10] for r in records}
        for prefix in args.superseded:
            if not any(names_commit(prefix, c) for c in commits):
                print(f"--superseded {prefix}: no record of that commit in these inputs", file=sys.stderr)
    print(
        write_report(
            args.inputs,
            out_dir=out,
            plots_dir=plots_dir,
            baselines=args.baselines,
            drop=args.drop,
            superseded=args.superseded,
        )
    )
    if args.readme is not None:
        sources = (
            [str(p) for p in args.inputs]
            + [f"--drop {d}" for d in args.drop]
            + [f"--superseded {c}" for c in args.superseded]
        )
        update_readme(args.readme, readme_block(records, baseline_rows(args.baselines), sources, args.superseded))
        print(f"README block rewritten: {args.readme}")


if __name__ == "__main__":
    main()
