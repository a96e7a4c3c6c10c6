"""Tables of auto-labelling measured on held-out items (issue 31): the records a simulation writes with
``--autolabel-targets`` (annotate/simulation/autolabel_eval.py: after a job's last round, a calibration
split drawn from the pool and labelled, a calibration and a bulk run per target over the rest of the
pool, every accepted item checked against its oracle label, which nothing in the pipeline saw).

    python bench/autoaccept_sim.py bench/raw/<date>/autolabel-<commit>.jsonl[.gz] [more files] [--out F.md]

Prints, per (data set, target): the labels trained on, the calibration items, the classes with a
tier-1 threshold, coverage of the unlabelled pool, the realised precision with its Clopper–Pearson
interval; then the (set, class, target) cases with accepted items: how many reach the target (the
issue's bar: >= 95 % of them), how many are alarms (the whole interval under the target), and every
case that misses, so a miss can be read against its count.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

BAR = 0.95  # the share of (set, class, target) cases whose realised precision must reach the target


def read(paths: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "autolabel"]


def _interval(value: float | None, ci: list[float]) -> str:
    return "—" if value is None else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _labels(r: dict[str, Any]) -> str:
    """The labels the adapters trained on; where the job stopped short of those asked (--labels), why:
    the sitting's time box (--deadline) or the pool."""
    asked = r.get("labels_asked") or 0
    if not asked or r["labels"] >= asked:
        return f"{r['labels']:,}"
    return f"{r['labels']:,} of {asked:,} ({'deadline' if r.get('deadline_s') else 'pool'})"


def tables(rows: list[dict[str, Any]]) -> str:
    rows = sorted(rows, key=lambda r: (r["data"], r["strategy"], r["seed"], r["target"]))
    commits = sorted({r.get("commit") or "unknown" for r in rows})
    out = [
        f"Commit(s): {', '.join(commits)}; {len(rows)} records. Per data set and target: thresholds fitted on the"
        " calibration split only (fixed-sequence testing, δ as shown), the bulk job over the pool's unlabelled"
        " items, every accepted item checked against its oracle label.",
        "",
        "| data | job | K | labels | target (δ) | calibration items | classes with a threshold (tier 1 / tier 2)"
        " | items decided | accepted (coverage) | by tier | realised precision [interval] |",
        "|---|---|---:|---:|---|---:|---|---:|---|---|---|",
    ]
    for r in rows:
        tiers = ", ".join(f"{t} {n}" for t, n in sorted((r.get("accepted_by_tier") or {}).items())) or "—"
        out.append(
            f"| {r['data']} | {r['strategy']}-s{r['seed']} | {r['k']} | {_labels(r)} | {r['target']:.2f}"
            f" ({r['delta']:g}) | {r['n_calibration']} | {r['classes_with_threshold']} /"
            f" {r.get('tier2_classes_with_threshold', '—')} of {r['n_classes']} | {r['decided']:,}"
            f" | {r['accepted']:,} ({r['coverage']:.1%}) | {tiers} | {_interval(r['precision'], r['precision_ci'])} |"
        )
    cases = [(r, c) for r in rows for c in r["per_class"] if c["accepted"]]
    met = [(r, c) for r, c in cases if c["meets"]]
    alarms = [(r, c) for r, c in cases if c["alarm"]]
    share = len(met) / len(cases) if cases else 0.0
    out += [
        "",
        f"(set, class, target) cases with accepted items: **{len(cases)}**; realised precision >= target:"
        f" **{len(met)} ({share:.1%})** — the bar is {BAR:.0%}: **{'met' if cases and share >= BAR else 'not met'}**;"
        f" alarms (the whole interval under the target): {len(alarms)}.",
    ]
    misses = [(r, c) for r, c in cases if not c["meets"]]
    if misses:
        out += [
            "",
            "| data | target | class | accepted | correct | realised precision [interval] | alarm |",
            "|---|---|---|---:|---:|---|---|",
        ]
        for r, c in misses:
            out.append(
                f"| {r['data']} | {r['target']:.2f} | {c['label']} | {c['accepted']} | {c['correct']}"
                f" | {_interval(c['precision'], c['ci'])} | {'yes' if c['alarm'] else 'no'} |"
            )
    out += ["", "Classes without a tier-1 threshold: too few calibration items predicted them (the most one still"]
    out[-1] += " needs), or their bound failed:"
    for r in rows:
        none = [c for c in r["per_class"] if c.get("threshold") is None]
        short = [c for c in none if c.get("needed")]
        need = max((c["needed"] for c in short), default=0)
        out.append(
            f"- {r['data']} at {r['target']:.2f}: {len(none)} of {r['n_classes']}: {len(short)} too few"
            f"{f' (up to {need} more)' if short else ''}, {len(none) - len(short)} bound failed"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", nargs="+", type=Path, help="autolabel.jsonl files (.gz too)")
    p.add_argument("--out", type=Path, default=None, help="also write the tables here")
    a = p.parse_args(argv)
    rows = read(a.records)
    if not rows:
        print("no autolabel records in " + ", ".join(map(str, a.records)), file=sys.stderr)
        return 1
    text = tables(rows)
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
