"""Issue 36's "no loss" check: the simulation's records at two commits, same data, seeds and options,
compared round by round — is the labelled set the same (the batch ids), and how far apart are test
accuracy, macro-F1 and ECE. Also lists every frozen-configuration value that differs between the two
runs, so a default that changed on purpose is not mistaken for the refactor.

    python bench/no_loss.py OLD_RECORDS.jsonl[.gz] NEW_RECORDS.jsonl[.gz] [--out FILE.md]

The records come from ``manage.py simulate`` (one JSON line per round); make them with the same command
at both commits, e.g.

    manage.py simulate --data ../shared/data/trec --strategy active --seeds 1 --labels 200 --batch 50 \\
      --seed-labels 100 --k 2 --engine hf --pool-sample 1000 --test-sample 300 --workers 1 --no-report
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rawfiles import open_raw  # noqa: E402


def load(path: str) -> list[dict[str, Any]]:
    with open_raw(Path(path)) as f:
        return [json.loads(line) for line in f if line.strip()]


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def report(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    key = lambda r: (r["strategy"], r["seed"], r["round"])  # noqa: E731
    by_new = {key(r): r for r in new}
    lines = [
        f"old: commit {old[0].get('commit', '?')[:12]}, {len(old)} rounds; "
        f"new: commit {new[0].get('commit', '?')[:12]}, {len(new)} rounds",
        "",
        "| arm | seed | round | labels | same batch | accuracy old → new | macro-F1 old → new | ECE old → new |",
        "|---|---:|---:|---:|---|---|---|---|",
    ]
    for o in old:
        n = by_new.get(key(o))
        if n is None:
            continue
        same = "yes" if o.get("batch_ids") == n.get("batch_ids") else "no"
        lines.append(
            f"| {o['strategy']} | {o['seed']} | {o['round']} | {o['labels']} | {same} | "
            f"{100 * o['accuracy']:.1f} → {100 * n['accuracy']:.1f} | "
            f"{100 * o['macro_f1']:.1f} → {100 * n['macro_f1']:.1f} | {o['ece']:.3f} → {n['ece']:.3f} |"
        )
    a, b = flat(old[0].get("config", {})), flat(new[0].get("config", {}))
    changed = [f"- `{k}`: {a.get(k, '—')} → {b.get(k, '—')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    lines += ["", "Frozen configuration, old → new:" if changed else "Frozen configuration: identical.", *changed]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--out", default="", help="also write the table here")
    a = p.parse_args()
    text = report(load(a.old), load(a.new))
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
