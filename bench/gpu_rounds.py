"""Three real rounds on the GPU machine: TREC, the bundled SmolLM2, oracle labels from the CSV.

No Django, Celery or Redis there: this drives training/loop.py — the same step functions the round
services call, in the same order — and prints per-step times and each round's metrics.

    python bench/gpu_rounds.py --model-dir var/models/smollm2-135m-instruct [--engine vllm] \
        [--data ../shared/data/trec] [--rounds 3] [--k 4] [--batch 50] [--candidates 2000]

Round 1 is a cold start (random); rounds 2.. score candidates (random sample + last round's top
share) with the previous round's K prod adapters, send low label mass to review, pick a random
slice + top-M + k-center, label by oracle, train K prod members (warm start) plus the equal-size
active / random arms, and evaluate on the fixed test set (TREC's test.csv).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TREC_CODES = {"abbreviation": "A", "description": "D", "entity": "E", "human": "H", "location": "L", "numeric": "N"}


def read_csv(path: Path) -> tuple[list[str], list[str]]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def config_for(args: argparse.Namespace) -> Any:
    from scoring.prompts import LabelSpec, PromptSpec
    from training.loop import LoopConfig, RescoringConfig, SelectionConfig
    from training.lora import TrainConfig

    prompt = PromptSpec(
        instructions="Classify the question by the type of its answer.",
        labels=tuple(LabelSpec(name=n, description="", code=c) for n, c in TREC_CODES.items()),
        item_template="Text: {text}\nLabel:",
    )
    return LoopConfig(
        model_dir=args.model_dir,
        engine=args.engine,
        prompt=prompt,
        max_context=512,  # TREC questions are short; prefix ~150 tokens
        k=args.k,
        scratch_every=0,
        selection=SelectionConfig(
            batch_size=args.batch, oversample=4.0, random_share=0.2, mass_threshold=args.mass_threshold
        ),
        rescoring=RescoringConfig(candidate_sample=args.candidates, carry_top_share=0.1, first_pass_share=1.0),
        train=TrainConfig(max_steps=args.max_steps),
    )


class Timer:
    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float, str]] = []

    def run(self, number: int, step: str, fn: Any, note: str = "") -> Any:
        t0 = time.perf_counter()
        out = fn()
        self.rows.append((number, step, time.perf_counter() - t0, note))
        print(f"  round {number} {step}: {time.perf_counter() - t0:.1f} s {note}", flush=True)
        return out


def main() -> None:  # noqa: PLR0915 - one linear script, kept in the services' order on purpose
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=str(ROOT / "var" / "models" / "smollm2-135m-instruct"))
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "trec"))
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mass-threshold", type=float, default=0.05)
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="gpu-rounds-"))
    args = parser.parse_args()

    from scoring.bundled import encoder_path
    from scoring.cache import ScoreCache, require_current, text_hash
    from scoring.embeddings import EmbeddingCache
    from scoring.engines import AdapterRef, adapter_set_hash
    from scoring.rescoring import choose_candidates
    from training import loop
    from training.evaluate import gain_with_uncertainty

    out = Path(args.out)
    config = config_for(args)
    names = list(TREC_CODES)
    pool_texts, pool_labels = read_csv(Path(args.data) / "train.csv")
    test_texts, test_labels = read_csv(Path(args.data) / "test.csv")
    pool_y = np.array([names.index(x) for x in pool_labels])
    test_y = np.array([names.index(x) for x in test_labels])
    hashes = [text_hash(t) for t in pool_texts]
    renderer = loop.make_renderer(config.model_dir, config.prompt, config.max_context)
    engine = loop.make_engine(config)
    cache = ScoreCache(out / "score-cache")
    embedder = EmbeddingCache(out / "embeddings", encoder_path())
    timer = Timer()

    labeled: list[int] = []  # pool positions, in labelling order
    sources: list[str] = []
    in_review: set[int] = set()
    prod: list[AdapterRef] = []
    last_ids, last_u = np.zeros(0, np.int64), np.zeros(0)
    next_id = 1
    points: list[dict[str, Any]] = []
    for number in range(1, args.rounds + 1):
        seed = args.seed + number
        eligible = np.array(sorted(set(range(len(pool_texts))) - set(labeled) - in_review), dtype=np.int64)
        cold = not prod
        if cold:
            sel = timer.run(
                number,
                "select (cold)",
                lambda e=eligible, s=seed: loop.select(
                    cold=True, n_eligible=len(e), config=config.selection, rng=loop.step_rng(s, "select")
                ),
            )
            chosen = [(int(eligible[i]), "cold") for i in sel.indices]
        else:
            cand = choose_candidates(
                eligible,
                sample=config.rescoring.candidate_sample,
                last_ids=last_ids,
                last_uncertainty=last_u,
                carry_top_share=config.rescoring.carry_top_share,
                rng=loop.step_rng(seed, "candidates"),
            )
            scored = timer.run(
                number,
                "score",
                lambda c=cand, s=seed, refs=prod: loop.score_items(
                    engine,
                    renderer,
                    [pool_texts[i] for i in c],
                    [hashes[i] for i in c],
                    refs,  # noqa: B023 - called at once by Timer.run
                    cache=cache,
                    kind=config.selection.uncertainty,
                    rng=loop.step_rng(s, "second-stage-0"),
                ),
                f"({len(cand)} items x K={len(prod)})",
            )
            require_current(adapter_set_hash(prod), adapter_set_hash(prod))  # the services check the DB's set
            sig = loop.signals(scored.p, scored.mass, config.selection)
            in_review |= {int(i) for i in cand[sig.review]}
            last_ids, last_u = cand, sig.uncertainty
            keep = ~sig.review
            ids, u = cand[keep], sig.uncertainty[keep]

            def pick(ids: np.ndarray = ids, u: np.ndarray = u, s: int = seed, done: list[int] = labeled) -> Any:
                emb = embedder.embed([pool_texts[i] for i in ids], [hashes[i] for i in ids])
                lab = embedder.embed([pool_texts[i] for i in done], [hashes[i] for i in done])  # noqa: B023 - called at once by Timer.run
                return loop.select(
                    cold=False,
                    n_eligible=len(ids),
                    config=config.selection,
                    rng=loop.step_rng(s, "select"),
                    uncertainty=u,
                    emb=emb,
                    labeled_emb=lab,
                )

            sel = timer.run(number, "select", pick, f"(review bucket {int(sig.review.sum())})")
            chosen = [
                (int(ids[i]), "random" if r else "active") for i, r in zip(sel.indices, sel.is_random, strict=True)
            ]
        labeled += [i for i, _ in chosen]
        sources += [s for _, s in chosen]
        plan: dict[str, list[int]] = {f"prod:{k}": list(range(len(labeled))) for k in range(config.k)}
        for arm, pos in loop.arm_training_sets(sources, loop.step_rng(seed, "arms")).items():
            plan[f"{arm}:0"] = pos.tolist()
        adapters: dict[str, list[AdapterRef]] = {}
        for key, positions in plan.items():
            arm, k = key.split(":")
            warm = prod[int(k)].path if arm == "prod" and prod else None
            trained = timer.run(
                number,
                f"train {key}",
                lambda p=positions, a=arm, kk=int(k), w=warm, s=seed: loop.train_member(
                    config=config,
                    renderer=renderer,
                    texts=[pool_texts[labeled[i]] for i in p],  # noqa: B023 - called at once by Timer.run
                    label_indices=[int(pool_y[labeled[i]]) for i in p],  # noqa: B023 - called at once by Timer.run
                    out_dir=out / "adapters" / f"round_{number}" / f"{a}_{kk}",  # noqa: B023 - called at once by Timer.run
                    round_seed=s,
                    arm=a,
                    k=kk,
                    warm_from=w,
                ),
                f"({len(positions)} labels)",
            )
            name = f"r{number}-{arm}{k}-{trained.content_hash[:12]}"
            adapters.setdefault(arm, []).append(AdapterRef(name=name, int_id=next_id, path=trained.path))
            next_id += 1
        results: dict[str, tuple[dict[str, Any], np.ndarray]] = {}
        for arm, refs in adapters.items():
            results[arm] = timer.run(
                number,
                f"evaluate {arm}",
                lambda r=refs: loop.evaluate_adapters(engine, renderer, test_texts, test_y, r, names),
            )
        prod = adapters["prod"]
        metrics = {"labels": len(labeled), "accuracy": results["prod"][0]["accuracy"]}
        metrics.update({k: results["prod"][0][k] for k in ("macro_f1", "ece")})
        points.append({"round": number, "arm": "prod", "labels": len(labeled), "accuracy": metrics["accuracy"]})
        if "active" in results:
            n_arm = len(plan["random:0"])
            correct = {a: results[a][1].argmax(1) == test_y for a in ("active", "random")}
            gain = gain_with_uncertainty(
                results["active"][0]["accuracy"],
                results["random"][0]["accuracy"],
                len(test_y),
                labels=n_arm,
                correct_active=correct["active"],
                correct_random=correct["random"],
            )
            metrics.update({f"{a}_accuracy": results[a][0]["accuracy"] for a in ("active", "random")})
            metrics["gain"] = gain["sentence"]
            points += [
                {"round": number, "arm": a, "labels": n_arm, "accuracy": results[a][0]["accuracy"]}
                for a in ("active", "random")
            ]
        print(f"round {number} metrics: {json.dumps(metrics)}", flush=True)
    (out / "curve.svg").write_text(loop.curve_svg(points, "TREC, SmolLM2: test accuracy vs labels"))
    print("\n| round | step | seconds | note |\n|---|---|---|---|")
    for number, step, seconds, note in timer.rows:
        print(f"| {number} | {step} | {seconds:.1f} | {note} |")
    digest = hashlib.sha256(json.dumps(points).encode()).hexdigest()[:12]
    print(f"\ncurve: {out / 'curve.svg'}  points digest {digest}")


if __name__ == "__main__":
    main()
