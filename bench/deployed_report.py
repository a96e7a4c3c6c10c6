"""Tables of a deployed run (bench/deployed_loop.py's ``--out`` folder, or the run.tgz the GPU sitting
brings back): per round, the wall time split into the machine's steps and the wait for labels, GPU busy
% while the machine worked, peak GPU memory per process, the vLLM engine starts, and the learning curve
against the in-process simulation's records.

    python bench/deployed_report.py OUT [--sim 'bench/raw/2026-12-02/sim13-*-records.jsonl.gz' ...] [--md FILE]

Plain Python (numpy; no Django). GPU samples are nvidia-smi's (timestamps read as UTC, the GPU
machine's clock); a round's machine windows are request → labelling and labelled → done."""

from __future__ import annotations

import argparse
import csv
import glob
import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rawfiles import open_raw  # noqa: E402 - bench/ is on the path of a bench script and its tests

from annotate.simulation.report import area  # noqa: E402 - plain Python, no Django

STEPS = ("scoring", "selecting", "training", "evaluating")
ENGINE_START = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+): INFO/[^\]]*\] vllm engine started in ([\d.]+) s "
    r"\(([\d.]+) s waiting for the GPU's start lock; in-process core: (\w+)"
    r"(?:; ([\d.]+) s importing vLLM before the lock)?"  # the import: outside the lock since session 19
    r"(?:; (its turn|no turn)[^)]*)?\)"  # parallel_start (session 28): a start after the GPU's first takes no turn
)
# the vLLM engine's wide-label check (label_logprob_width): session 31's form gives max |dp| only, later ones more
WIDE_CHECK = re.compile(
    r"^\[[^\]]*\] label_logprob_width (\d+): (\d+) items x \d+ adapters .*?"
    r"max \|dp\| (?:\(distribution and label mass\) )?(?:([\d.e+-]+) / )?([\d.e+-]+).*?"
    r"(one request per item and adapter|they differ)"
)
TASK_DONE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+): INFO/[^\]]*\] Task (annotate\.gpu\.\w+)\[[^\]]+\] succeeded"
)


def read_records(out: Path) -> dict[str, list[dict[str, Any]]]:
    sets: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("records-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        sets[path.stem.removeprefix("records-")] = rows
    return sets


def gpu_samples(path: Path) -> np.ndarray:
    """[n, 3] of (epoch seconds, utilisation %, memory MiB) from nvidia-smi's CSV; empty if none."""
    rows = []
    if path.is_file():
        for row in csv.reader(path.open()):
            try:
                t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
                rows.append((t, float(row[1]), float(row[2])))
            except (ValueError, IndexError):
                continue
    return np.array(rows, dtype=float).reshape(-1, 3)


def busy_share(samples: np.ndarray, windows: Iterable[tuple[float, float]]) -> float | None:
    """Mean GPU utilisation (%) over the samples inside the windows; None without samples there."""
    if len(samples) == 0:
        return None
    inside = np.zeros(len(samples), dtype=bool)
    for lo, hi in windows:
        inside |= (samples[:, 0] >= lo) & (samples[:, 0] <= hi)
    return float(samples[inside, 1].mean()) if inside.any() else None


def machine_windows(record: dict[str, Any]) -> list[tuple[float, float]]:
    return [(record["t_request"], record["t_labeling"]), (record["t_labelled"], record["t_done"])]


def step_seconds(record: dict[str, Any]) -> dict[str, float]:
    steps = (record.get("cost") or {}).get("steps") or {}
    return {s: float(steps[s]["seconds"]) for s in STEPS if s in steps}


def peak_memory(path: Path, names: dict[str, str]) -> list[tuple[str, str, float]]:
    """(pid, process, peak MiB) per process that held GPU memory, from nvidia-smi's per-process CSV."""
    peaks: dict[str, float] = {}
    if path.is_file():
        for row in csv.reader(path.open()):
            try:
                pid, mib = row[1].strip(), float(row[2])
            except (ValueError, IndexError):
                continue
            peaks[pid] = max(peaks.get(pid, 0.0), mib)
    return sorted(((pid, names.get(pid, "?"), mib) for pid, mib in peaks.items()), key=lambda r: r[1])


def log_time(day: str, millis: str) -> float:
    return datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() + int(millis) / 1000


def engine_starts(out: Path) -> list[dict[str, Any]]:
    """Every 'vllm engine started' line of the gpu workers' logs, in time order."""
    starts = []
    for path in sorted(out.glob("gpu-worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if m := ENGINE_START.match(line):
                starts.append(
                    {
                        "worker": path.stem,
                        "at": log_time(m.group(1), m.group(2)),
                        "start_s": float(m.group(3)),
                        "lock_wait_s": float(m.group(4)),
                        "in_process": m.group(5),
                        "import_s": float(m.group(6)) if m.group(6) else None,
                        "turn": m.group(7) or "its turn",
                    }
                )
    return sorted(starts, key=lambda s: s["at"])


def wide_checks(out: Path) -> list[dict[str, Any]]:
    """Each gpu worker's wide-label check (scoring/engines/vllm.py _check_wide): items, mean / max |dp|, kept."""
    checks = []
    for path in sorted(out.glob("gpu-worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if m := WIDE_CHECK.match(line):
                checks.append(
                    {
                        "worker": path.stem,
                        "width": int(m.group(1)),
                        "items": int(m.group(2)),
                        "mean_dp": float(m.group(3)) if m.group(3) else None,
                        "max_dp": float(m.group(4)),
                        "kept": m.group(5).startswith("one request"),
                    }
                )
    return checks


def first_tasks(out: Path) -> dict[str, dict[str, float]]:
    """Per gpu worker: when it finished its first task of each kind (epoch seconds)."""
    firsts: dict[str, dict[str, float]] = {}
    for path in sorted(out.glob("gpu-worker-*.log")):
        seen: dict[str, float] = {}
        for line in path.read_text(errors="replace").splitlines():
            if (m := TASK_DONE.match(line)) and m.group(3) not in seen:
                seen[m.group(3)] = log_time(m.group(1), m.group(2))
        firsts[path.stem] = seen
    return firsts


def restart_times(out: Path, worker: str, since: float) -> dict[str, float]:
    """A worker started again at ``since`` (epoch s; same log, appended): seconds from then to its
    engine's readiness and to its first task done, and the engine start's own figures (issue 35 point 4,
    the warm start: the compile cache is the earlier engines')."""
    found: dict[str, float] = {}
    path = out / f"{worker}.log"
    if not path.is_file():
        return found
    for line in path.read_text(errors="replace").splitlines():
        if (m := ENGINE_START.match(line)) and "engine_ready_s" not in found:
            at = log_time(m.group(1), m.group(2))
            if at >= since:
                found |= {"engine_ready_s": at - since, "engine_start_s": float(m.group(3))}
                found["lock_wait_s"] = float(m.group(4))
        elif (m := TASK_DONE.match(line)) and "first_task_s" not in found:
            at = log_time(m.group(1), m.group(2))
            if at >= since:
                found["first_task_s"] = at - since
    return found


def curve(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    points = [(r["labels_total"], 100.0 * r["metrics"]["accuracy"]) for r in records if "accuracy" in r["metrics"]]
    return np.array([x for x, _ in points], dtype=float), np.array([y for _, y in points], dtype=float)


def sim_curves(patterns: Sequence[str], data: str, strategy: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The simulation's per-seed curves of ``data`` / ``strategy`` (labels, accuracy %), from its records."""
    points: dict[str, list[tuple[float, float]]] = {}
    for pattern in patterns:
        for name in sorted(glob.glob(pattern)):
            with open_raw(name) as f:
                for line in f:
                    r = json.loads(line)
                    if r.get("data") == data and r.get("strategy") == strategy and r.get("accuracy") is not None:
                        points.setdefault(f"{r.get('seed')}@{r.get('commit', '?')[:7]}", []).append(
                            (float(r["labels"]), 100.0 * float(r["accuracy"]))
                        )
    return {k: (np.array(sorted(v))[:, 0], np.array(sorted(v))[:, 1]) for k, v in points.items()}


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report(out: Path, sim: Sequence[str], sim_strategy: str) -> str:
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    names = json.loads((out / "processes.json").read_text()) if (out / "processes.json").is_file() else {}
    samples = gpu_samples(out / "gpu.csv")
    lines = [f"commit {run.get('versions', {}).get('commit', '?')}; versions {run.get('versions', {})}", ""]
    lines += [f"outcomes: {run.get('outcomes')}", ""]
    head = "| set | round | labels | test acc % | to labelling s | labelling s | after labelling s | machine s |"
    head += " scoring s | selecting s | training s | evaluating s | GPU busy % (machine) |"
    lines += [head, "|" + "---|" * 13]
    for name, rows in read_records(out).items():
        for r in rows:
            steps = step_seconds(r)
            machine = (r["t_labeling"] - r["t_request"]) + (r["t_done"] - r["t_labelled"])
            acc = r["metrics"].get("accuracy")
            lines.append(
                f"| {name} | {r['number']} | {r['labels_total']} | {fmt(None if acc is None else 100 * acc)} |"
                f" {fmt(r['t_labeling'] - r['t_request'])} | {fmt(r['t_labelled'] - r['t_labeling'])} |"
                f" {fmt(r['t_done'] - r['t_labelled'])} | **{fmt(machine)}** |"
                + "".join(f" {fmt(steps.get(s))} |" for s in STEPS)
                + f" {fmt(busy_share(samples, machine_windows(r)), 0)} |"
            )
    lines += ["", "| pid | process | peak GPU memory MiB |", "|---|---|---|"]
    lines += [f"| {pid} | {name} | {mib:.0f} |" for pid, name, mib in peak_memory(out / "gpu-apps.csv", names)]
    started = run.get("t_gpu_workers_started", {})
    lines += [
        "",
        "| worker | engine ready at (s after worker start) | engine start s | lock wait s | in-process core |"
        " holds the start lock (s after the first gpu worker started) | vLLM import before the lock s |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    # parallel_start: a start after the GPU's first takes no turn (its span is its own start, beside the others)
    first = min(started.values()) if started else None
    for s in engine_starts(out):
        since = s["at"] - started[s["worker"]] if s["worker"] in started else None
        # "started in" is timed from the lock's taking to the engine's readiness: turns must not overlap
        held = "–" if first is None else f"{s['at'] - s['start_s'] - first:.1f}–{s['at'] - first:.1f}"
        held += "" if s["turn"] == "its turn" else " (no turn: side by side)"
        lines.append(
            f"| {s['worker']} | {fmt(since)} | {s['start_s']:.1f} | {s['lock_wait_s']:.1f} | {s['in_process']}"
            f" | {held} | {fmt(s['import_s'])} |"
        )
    for worker, firsts in first_tasks(out).items():
        if worker in started:
            lines.append(
                f"\n{worker}: first task done, seconds after the worker started: "
                + ", ".join(f"{k.split('.')[-1]} {v - started[worker]:.1f}" for k, v in sorted(firsts.items()))
            )
    if checks := wide_checks(out):
        kept = sum(c["kept"] for c in checks)
        lines += [
            "",
            f"wide label requests (label_logprob_width {checks[0]['width']}): kept by {kept} of {len(checks)} gpu"
            " workers; their checks' max |dp| "
            + ", ".join(f"{c['max_dp']:.3g}" for c in checks)
            + ("" if all(c["mean_dp"] is None for c in checks) else "; mean |dp| ")
            + ", ".join(f"{c['mean_dp']:.3g}" for c in checks if c["mean_dp"] is not None),
        ]
    lines += ["", curve_table(out, sim, sim_strategy)]
    if table := throughput_table(out):
        lines += ["", table]
    if table := autolabel_table(out):
        lines += ["", table]
    return "\n".join(lines)


def curve_table(out: Path, sim: Sequence[str], sim_strategy: str) -> str:
    lines = [
        "| set | deployed area (labels lo–hi) | simulation area per seed | sim mean ± std | inside the seeds' range |"
    ]
    lines.append("|---|---|---|---|---|")
    for name, rows in read_records(out).items():
        mine = curve(rows)
        seeds = sim_curves(sim, name, sim_strategy) if sim else {}
        if len(mine[0]) < 2:
            continue
        lo = max([mine[0][0], *(c[0][0] for c in seeds.values())])
        hi = min([mine[0][-1], *(c[0][-1] for c in seeds.values())])
        ours = area(mine, lo, hi)
        theirs = {k: area(c, lo, hi) for k, c in seeds.items()}
        values = [v for v in theirs.values() if v is not None]
        spread = f"{np.mean(values):.1f} ± {np.std(values, ddof=1) if len(values) > 1 else 0:.1f}" if values else "–"
        inside = "–" if not values or ours is None else ("yes" if min(values) <= ours <= max(values) else "**no**")
        per_seed = ", ".join(f"{k}: {fmt(v)}" for k, v in sorted(theirs.items())) or "–"
        lines.append(f"| {name} | {fmt(ours)} ({lo:.0f}–{hi:.0f}) | {per_seed} | {spread} | {inside} |")
    return "\n".join(lines)


def steady_rate(samples: Sequence[Sequence[Any]], members: int, lo: float = 0.1, hi: float = 0.9) -> float | None:
    """Requests/s while the items scored went from ``lo`` to ``hi`` of the round's (no start, no tail)."""
    points = [(t, done, total) for t, status, done, total in samples if status == "scoring" and total]
    if not points:
        return None
    total = points[-1][2]
    inside = [(t, done) for t, done, _ in points if lo * total <= done <= hi * total]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) * members / (inside[-1][0] - inside[0][0])


def throughput_table(out: Path) -> str:
    """The rounds of bench/deployed_loop.py --throughput: workers, items, requests/s, GPU busy, and each
    round's predictions against the first full-size round's (same adapters, same items)."""
    path = out / "throughput.jsonl"
    if not path.is_file():
        return ""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    samples = gpu_samples(out / "gpu-throughput.csv")
    lines = [
        "| gpu workers | items | members | requests | request → scored s | requests/s (end to end) |"
        " requests/s (10–90 % of items) | GPU busy % | shards | re-run shards | vs first full round: argmax (members) |"
        " mean / max \\|Δp\\| | kill |",
        "|" + "---|" * 13,
    ]
    for r in rows:
        if r.get("kind") == "project":
            lines.insert(
                0,
                f"Throughput project: {r.get('items')} items, ensemble {r.get('adapters')},"
                f" made in {r.get('seconds')} s\n",
            )
            continue
        if r.get("error") or not r.get("t_scored"):
            lines.append(
                f"| {r.get('gpu_workers')} | {r.get('items')} |"
                + " – |" * 10
                + f" {r.get('error') or r.get('status_after')} |"
            )
            continue
        members = int(r.get("members") or 0)
        window = [(r["t_request"] + (r.get("t_scoring") or 0.0), r["t_request"] + r["t_scored"])]
        shards = r.get("shards") or []
        rerun = [s["shard"] for s in shards if s.get("attempts", 1) > 1]
        vs = r.get("vs_reference") or {}
        cmp_ = f"{100 * vs['argmax_agreement_members']:.2f} % of {vs['items']}" if vs.get("items") else "(reference)"
        dp = f"{vs['mean_dp']:.4f} / {vs['max_dp']:.4f}" if vs.get("items") else "–"
        kill = r.get("killed") or {}
        kill_text = (
            f"{kill.get('worker')} (shard {kill.get('shard')}) at {kill.get('at', 0) - r['t_request']:.1f} s"
            if kill.get("worker")
            else ("asked, none running" if r.get("kill") else "")
        )
        lines.append(
            f"| {r['gpu_workers']} | {r['items']} | {members} | {r.get('requests')} | {r['t_scored']:.1f} |"
            f" **{fmt(r.get('requests_per_s'), 0)}** | {fmt(steady_rate(r.get('samples') or [], members), 0)} |"
            f" {fmt(busy_share(samples, window), 0)} | {len(shards)} | {rerun or 'none'} | {cmp_} | {dp} |"
            f" {kill_text} |"
        )
    for r in rows:
        kill = r.get("killed") or {}
        if not kill.get("worker"):
            continue
        before = {s["shard"]: s for s in kill.get("shards_before", [])}
        after = {s["shard"]: s for s in r.get("shards") or []}
        done_before = [k for k, s in before.items() if s["status"] == "done"]
        rescored = [k for k in done_before if after.get(k, {}).get("mtime") != before[k].get("mtime")]
        states = sorted({s["status"] for s in after.values()})
        lines += [
            "",
            f"Kill: {kill['worker']} SIGKILLed (pool child {kill['pid']}) while it held shard {kill['shard']};"
            f" {len(done_before)} shards were done then and {len(rescored)} of them were written again"
            f" ({rescored or 'none'}); shard {kill['shard']}: {after.get(kill['shard'], {}).get('attempts')} attempts,"
            f" by {after.get(kill['shard'], {}).get('worker')}; shard states after: {states}; the round went on to"
            f" '{r.get('status_after')}'.",
        ]
        if warm := restart_times(out, kill["worker"], kill.get("started", kill["at"])):
            lines.append(
                f"The fresh {kill['worker']} (warm compile cache): engine ready"
                f" {fmt(warm.get('engine_ready_s'))} s after its process started (engine start"
                f" {fmt(warm.get('engine_start_s'))} s, lock wait {fmt(warm.get('lock_wait_s'))} s), first task"
                f" done {fmt(warm.get('first_task_s'))} s after it started."
            )
    return "\n".join(lines)


def _eta_cell(eta: dict[str, Any] | None) -> str:
    if not eta:
        return "–"
    return f"{100 * eta['error']:+.0f} % ({eta['predicted_left']:.0f} s vs {eta['actual_left']:.0f} s)"


def _kill_cell(run: dict[str, Any], checks: dict[str, Any]) -> str:
    kill = run.get("killed") or {}
    if not kill.get("worker"):
        return "asked, none running" if run.get("kill") else "no kill"
    shard = {s["shard"]: s for s in checks.get("shards") or []}.get(kill["shard"], {})
    redone = [s["shard"] for s in checks.get("shards") or [] if s.get("attempts", 1) > 1]
    return (
        f"{kill['worker']} (shard {kill['shard']}) at {kill.get('at', 0) - run['t_request']:.1f} s;"
        f" run {run['status']}, shard {kill['shard']}: {shard.get('attempts')} claims;"
        f" shards claimed again: {redone or 'none'}"
    )


def autolabel_table(out: Path) -> str:
    """The bulk job of bench/deployed_loop.py --autolabel: one row per quantity of the run (items, K,
    wall, rates, GPU busy, the ETA the app showed at 10/25/50 % against the actual end, its budget
    estimate against the wall time, the kill, the database's count of lost and twice-written items,
    dead letters, tiers), then the re-run and the prompt change."""
    path = out / "autolabel.jsonl"
    if not path.is_file():
        return ""
    steps: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps[record["step"]] = record
    run, checks = steps.get("run", {}), steps.get("checks", {})
    project = steps.get("project", {})

    def window_of(r: dict[str, Any]) -> list[tuple[float, float]]:
        if not r.get("t_end"):
            return []
        return [(r["t_request"] + (r.get("t_running") or 0.0), r["t_request"] + r["t_end"])]

    window = window_of(run)
    rescore = steps.get("prompt_change", {})  # the whole pool scored again: the second full run of the sitting
    samples = gpu_samples(out / "gpu-autolabel.csv")
    peak = float(samples[:, 2].max()) if len(samples) else None
    budget = (checks.get("budget_vs_actual") or {}).get("estimate") or {}
    eta = run.get("eta") or {}
    letters = checks.get("dead_letters") or {}
    rerun, change = steps.get("rerun", {}), steps.get("prompt_change_checks", {})
    twice = None if not checks else checks["duplicate_rows"] + checks["progress_overcount"]
    rows = [
        ("pool", f"{project.get('items')} items: {project.get('pool')}"),
        ("items scored / K", f"{run.get('n_items')} / {run.get('k', project.get('k'))}"),
        ("wall (request → done) s", fmt(run.get("t_end"))),
        ("items/s", f"**{fmt(run.get('items_per_s'))}**"),
        ("requests/s (items × K)", fmt(run.get("requests_per_s"), 0)),
        ("GPU busy % (run) / peak memory MiB", f"{fmt(busy_share(samples, window), 0)} / {fmt(peak, 0)}"),
        *((f"ETA error at {k} (predicted vs actual left)", _eta_cell(eta.get(k))) for k in ("10%", "25%", "50%")),
        (
            "budget estimate vs actual wall",
            f"{fmt(budget.get('wall_s'))} s ({budget.get('workers')} workers, {budget.get('n')} items)"
            f" vs {fmt(run.get('t_end'))} s"
            if budget
            else "–",
        ),
        ("kill", _kill_cell(run, checks) if run else "–"),
        ("lost / written twice", f"{checks.get('n_lost')} / {twice}"),
        ("dead letters", f"{letters.get('n')} {letters.get('by_reason') or ''}".strip()),
        ("decisions (audit pending)", f"{checks.get('decisions')} ({checks.get('audit_pending')})"),
        (
            "accepted items right by the oracle labels",
            f"{checks['oracle_correct']}/{checks['oracle_checked']}"
            f" ({checks['oracle_correct'] / checks['oracle_checked']:.1%})"
            if checks.get("oracle_checked")
            else "–",
        ),
        (
            "tiers",
            "; ".join(f"{t['tier']}: {t['accepted']}/{t['tried']} accepted" for t in checks.get("tiers") or []) or "–",
        ),
        ("re-run", f"{rerun.get('status')}, {rerun.get('n_items')} items" if rerun else "–"),
        *(
            (f"after the prompt edit: {name}", f"{r.get('status')}, {r.get('n_items')} items {r.get('reason') or ''}")
            for name, r in (("run", steps.get("after_edit")), ("run, next round", steps.get("drifted")))
            if r
        ),
        (
            "prompt change's full re-score: wall s / items/s / requests/s / GPU busy %",
            f"{fmt(rescore.get('t_end'))} / **{fmt(rescore.get('items_per_s'))}**"
            f" / {fmt(rescore.get('requests_per_s'), 0)}"
            f" / {fmt(busy_share(samples, window_of(rescore)), 0)}"
            if rescore.get("t_end")
            else "–",
        ),
        *(
            (f"prompt change's re-score: ETA error at {k}", _eta_cell((rescore.get("eta") or {}).get(k)))
            for k in ("10%", "25%", "50%")
            if rescore.get("eta")
        ),
        (
            "prompt change: rows written / expected",
            f"{change.get('rows_written')} / {(change.get('expected') or {}).get('to_score')}" if change else "–",
        ),
    ]
    lines = ["Auto-labelling (bulk job)", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    for letter in letters.get("first") or []:
        lines.append(f"\ndead letter {letter['item']}: {letter['reason']}: {letter['detail']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the run's --out folder")
    p.add_argument("--sim", action="append", default=[], help="glob of simulation records (repeatable)")
    p.add_argument("--sim-strategy", default="active")
    p.add_argument("--md", type=Path, help="also write the tables here")
    a = p.parse_args(argv)
    text = report(a.out, a.sim, a.sim_strategy)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
