"""Auto-accept at a target precision, measured on held-out items, with adapters from a simulation.

For each data set: score a *fit* split and a *held-out* split with the simulation's K adapters (the
prompt rebuilt exactly as the simulation's projects render it: default instructions and item
template, codes from suggest_codes over the sorted label names), fit the calibrator and per-class
thresholds on the fit split only (predictor.calibrate, the production code), then apply them to the
held-out split and report coverage and the measured precision of what was auto-accepted (Wilson 95 %
interval), overall and per class. The fit split is dev.csv where the data set has one, else a seeded
half of test.csv, the other half held out; the simulation trains on train.csv only, so neither split
was trained on.

    python bench/autoaccept_report.py --model /path/smollm2 --engine vllm \\
        --run trec=/tmp/sim/trec/work --run sst2=/tmp/sim/sst2/work [--target 0.95] [--cascade agreement] \\
        [--limit 0] [--out bench/autoaccept_results.md]

``--run NAME=ROOT``: ROOT is searched for the newest ``round_<n>/prod_<k>`` adapter folders of one
project (the simulation's VAR_DIR/adapters/project_<p>/round_<n>/prod_<k>); ``NAME=base`` scores the
base model (no adapters), for a smoke test. Needs torch, transformers, peft (+ vllm for --engine vllm)
and Django (read for the Project field defaults only; no database is opened).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def project_defaults() -> tuple[str, str]:
    """The instructions and item template a simulation project gets (Project field defaults)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()
    from annotate.models import Project

    fields = {f.name: f for f in Project._meta.get_fields() if hasattr(f, "default")}
    return str(fields["instructions"].default), str(fields["item_template"].default)


def read_split(path: Path) -> tuple[list[str], list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    return [r[0] for r in rows], [r[1] for r in rows]


def splits(data_dir: Path, seed: int) -> tuple[str, tuple[list[str], list[str]], tuple[list[str], list[str]]]:
    test = read_split(data_dir / "test.csv")
    if (data_dir / "dev.csv").is_file():
        return "dev.csv → test.csv", read_split(data_dir / "dev.csv"), test
    order = np.random.default_rng(seed).permutation(len(test[0]))
    half = len(order) // 2

    def pick(rows: np.ndarray) -> tuple[list[str], list[str]]:
        return [test[0][i] for i in rows], [test[1][i] for i in rows]

    return "test.csv halves (seeded)", pick(order[:half]), pick(order[half:])


def adapter_dirs(root: str) -> list[Path]:
    """The newest round's prod_<k> folders under root (sorted by k)."""
    if root == "base":
        return []
    found: dict[tuple[str, int], list[Path]] = {}
    for path in Path(root).rglob("prod_*"):
        match = re.fullmatch(r"round_(\d+)", path.parent.name)
        if path.is_dir() and match and (path / "adapter_config.json").is_file():
            found.setdefault((str(path.parent.parent), int(match.group(1))), []).append(path)
    if not found:
        raise SystemExit(f"no round_<n>/prod_<k> adapters under {root}")
    newest = max(found, key=lambda key: (key[1], key[0]))
    return sorted(found[newest], key=lambda p: int(p.name.split("_")[1]))


def score(engine: Any, renderer: Any, texts: list[str], refs: list[Any]) -> np.ndarray:
    parts = [engine.score(renderer, texts[i : i + 512], refs).p for i in range(0, len(texts), 512)]
    return np.concatenate(parts, axis=1)


def one(name: str, root: str, args: argparse.Namespace, defaults: tuple[str, str]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from predictor import calibrate as cal
    from scoring.engines import AdapterRef, get_engine
    from scoring.labels import suggest_codes
    from scoring.pipeline import make_renderer
    from scoring.prompts import LabelSpec, PromptSpec

    how, (fit_x, fit_y), (test_x, test_y) = splits(Path(args.data_dir) / name, args.seed)
    if args.limit:
        fit_x, fit_y, test_x, test_y = (
            fit_x[: args.limit],
            fit_y[: args.limit],
            test_x[: args.limit],
            test_y[: args.limit],
        )
    names = sorted(set(read_split(Path(args.data_dir) / name / "train.csv")[1]))
    from scoring.labels import MAX_LABELS

    if len(names) > MAX_LABELS:
        return {"data": name, "skipped": f"{len(names)} labels (the label-code limit is {MAX_LABELS})"}
    codes = suggest_codes(AutoTokenizer.from_pretrained(args.model), names)
    instructions, template = defaults
    spec = PromptSpec(instructions, tuple(LabelSpec(n, "", c) for n, c in zip(names, codes, strict=True)), (), template)
    renderer = make_renderer(args.model, spec, args.max_context)
    dirs = adapter_dirs(root)
    refs = [
        AdapterRef(name=f"{name}-{d.parent.name}-{d.name}", int_id=900_000 + k, path=str(d)) for k, d in enumerate(dirs)
    ]
    engine = get_engine(args.engine, args.model, **json.loads(args.engine_options))
    index = {n: i for i, n in enumerate(names)}
    started = time.perf_counter()
    p_fit, p_test = score(engine, renderer, fit_x, refs), score(engine, renderer, test_x, refs)
    seconds = time.perf_counter() - started
    y_fit, y_test = np.array([index[y] for y in fit_y]), np.array([index[y] for y in test_y])
    calibrator = cal.fit_calibrator(p_fit.mean(0), y_fit)
    pred, conf = cal.model_tier(p_fit.mean(0), calibrator)
    rules = cal.fit_thresholds(pred, conf, y_fit, label_names=names, target=args.target)
    tier2_rules = None
    if args.cascade == "agreement" and len(refs) >= 2:
        p2, c2 = cal.agreement_tier(p_fit, calibrator)
        tier2_rules = cal.fit_thresholds(p2, c2, y_fit, label_names=names, target=args.target)
    # held-out: decide with the rules fitted above, then measure
    tpred, tconf = cal.model_tier(p_test.mean(0), calibrator)
    accepted = cal.accept(tpred, tconf, [r.threshold for r in rules])
    final = tpred.copy()
    tier2 = np.zeros(len(tpred), bool)
    if tier2_rules is not None:
        p2, c2 = cal.agreement_tier(p_test, calibrator)
        ok2 = ~accepted & cal.accept(p2, c2, [r.threshold for r in tier2_rules])
        final[ok2], tier2, accepted = p2[ok2], ok2, accepted | ok2
    right = int((final[accepted] == y_test[accepted]).sum())
    low, high = cal.wilson_interval(right, int(accepted.sum()))
    per_class = []
    for c, label in enumerate(names):
        mask = accepted & (final == c)
        hits = int((y_test[mask] == c).sum())
        lo_c, hi_c = cal.wilson_interval(hits, int(mask.sum()))
        per_class.append(
            {
                "label": label,
                "threshold": rules[c].threshold,
                "accepted": int(mask.sum()),
                "precision": hits / int(mask.sum()) if mask.any() else None,
                "ci": [lo_c, hi_c],
            }
        )
    return {
        "data": name,
        "splits": how,
        "n_fit": len(y_fit),
        "n_test": len(y_test),
        "k": len(refs),
        "adapters": [str(d) for d in dirs],
        "calibrator": calibrator.to_json(),
        "ece_before": cal.reliability(p_test.mean(0), y_test)["ece"],
        "ece_after": cal.reliability(calibrator.apply(p_test.mean(0)), y_test)["ece"],
        "accuracy": float((tpred == y_test).mean()),
        "classes_with_threshold": sum(r.threshold is not None for r in rules),
        "n_classes": len(names),
        "coverage": float(accepted.mean()),
        "coverage_tier2": float(tier2.mean()),
        "accepted": int(accepted.sum()),
        "precision": right / int(accepted.sum()) if accepted.any() else None,
        "precision_ci": [low, high],
        "meets_target": bool(accepted.any() and right / int(accepted.sum()) >= args.target),
        "per_class": per_class,
        "score_seconds": seconds,
    }


def table(results: list[dict[str, Any]], target: float) -> str:
    lines = [
        f"Auto-accept at a {target:.0%} target precision: thresholds fitted on the fit split only, "
        "measured on held-out items.",
        "",
        "| data | splits (fit → held-out) | K | n fit | n held-out | accuracy | ECE before → after (held-out) "
        "| classes with a threshold | coverage (tier 2) | measured precision [95 % CI] | meets target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['data']} | skipped: {r['skipped']} |" + " |" * 9)
            continue
        precision = (
            "—"
            if r["precision"] is None
            else f"{r['precision']:.3f} [{r['precision_ci'][0]:.3f}, {r['precision_ci'][1]:.3f}]"
        )
        lines.append(
            f"| {r['data']} | {r['splits']} | {r['k']} | {r['n_fit']} | {r['n_test']} | {r['accuracy']:.3f} "
            f"| {r['ece_before']:.3f} → {r['ece_after']:.3f} | {r['classes_with_threshold']}/{r['n_classes']} "
            f"| {r['coverage']:.1%} ({r['coverage_tier2']:.1%}) | {precision} "
            f"| {'yes' if r['meets_target'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the HF model directory the simulation used")
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--engine-options", default="{}", help="JSON, e.g. '{\"gpu_memory_utilization\": 0.5}'")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--run", action="append", required=True, help="NAME=ADAPTER_ROOT (or NAME=base)")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--cascade", choices=["none", "agreement"], default="agreement")
    parser.add_argument("--max-context", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="first N items of each split (smoke tests)")
    parser.add_argument("--out", default="", help="also write the markdown table and the JSON next to it")
    args = parser.parse_args()
    defaults = project_defaults()
    results = []
    for spec in args.run:
        name, _, root = spec.partition("=")
        results.append(one(name, root, args, defaults))
        print(json.dumps(results[-1]), flush=True)
    text = table(results, args.target)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
