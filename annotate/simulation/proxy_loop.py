"""The selection rules on the cheap learner: every strategy of acquisition.batch, to 1,000 labels, on
CPU in minutes.

The learner is the embedding proxy (predictor.embedding_proxy: logistic regression on the cached MiniLM vectors,
the cheap loop of ../shared/design/BASELINES.md), retrained from scratch each round; the committee is
that proxy alone. What runs is the production selection code (the strategies of acquisition.strategies and
the portfolio's acquisition.portfolio), so this measures the *rules* — does soft-rank dilute margin, does
the portfolio follow the winning arm, is any rule worse than random — without the LLM. It says
nothing about the LLM loop's own curves: those come from the GPU harness (annotate/simulation/
harness.py). Records have the harness's shape plus ``learner: "proxy"``, so bench/sim_report.py
reads both.

Protocol (BASELINES.md): a random seed set of max(2 × classes, 20) labels identical for every
strategy of a seed, then batches of B (25; 100 with more than 50 classes), random slice 15 %.
``ProxySpec.cold_mode`` other than "random" gives every strategy but random the app's cold start
instead (``seed_set``), as the app's default does.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from acquisition import portfolio
from acquisition.batch import DEFAULT_SOFTRANK_BETA, committee_uncertainty, select_cold_start
from acquisition.strategies import REGISTRY, STRATEGIES, Inputs
from predictor.embedding_proxy import fit_proxy

RANDOM_SHARE = 0.15
OVERSAMPLE = 4.0
Log = Callable[[str], None]


@dataclass(frozen=True)
class ProxyData:
    name: str
    pool_rows: np.ndarray  # int64[N]: each pool item's row in train.csv (record ids "train-<row>")
    pool_x: np.ndarray  # float32[N, d] unit rows
    pool_y: np.ndarray  # int64[N]
    test_x: np.ndarray
    test_y: np.ndarray
    n_classes: int


@dataclass(frozen=True)
class ProxySpec:
    max_labels: int = 1000
    batch: int = 0  # 0: 25, or 100 with more than 50 classes
    seed_labels: int = 0  # 0: max(2 × classes, 20)
    random_share: float = RANDOM_SHARE
    # How the seed set of every strategy but random is drawn (acquisition.batch.select_cold_start);
    # random's is always uniform, the same draw as with "random" here.
    cold_mode: str = "random"
    softrank_beta: float = DEFAULT_SOFTRANK_BETA  # the active strategy's soft-rank exponent
    commit: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # recorded with every row

    def b(self, n_classes: int) -> int:
        return self.batch or (100 if n_classes > 50 else 25)

    def s0(self, n_classes: int) -> int:
        return self.seed_labels or max(2 * n_classes, 20)


def run_job(data: ProxyData, strategy: str, seed: int, spec: ProxySpec) -> list[dict[str, Any]]:
    """One learning curve: a record per round (labels, test accuracy %, the portfolio's split)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    c, n = data.n_classes, len(data.pool_y)
    b = spec.b(c)
    labelled = seed_set(data, strategy, seed, spec)
    arm_of: dict[int, str] = {i: "seed" for i in labelled}
    gen = np.random.default_rng([seed, STRATEGIES.index(strategy)])
    out: list[dict[str, Any]] = []
    round_no = 1
    batch = list(labelled)  # what this round added: the seed set, then each round's picks
    while True:
        started = time.perf_counter()
        model = fit_proxy(data.pool_x[labelled], data.pool_y[labelled], c)
        acc = float((model.predict_proba(data.test_x).argmax(axis=1) == data.test_y).mean())
        record: dict[str, Any] = {
            "data": data.name,
            "strategy": strategy,
            "seed": seed,
            "round": round_no,
            "labels": len(labelled),
            "accuracy": round(acc, 5),  # a fraction, as the harness records it
            "learner": "proxy",
            "cold_mode": "random" if strategy == "random" else spec.cold_mode,
            "softrank_beta": spec.softrank_beta,
            "batch": len(batch),
            "batch_ids": [f"train-{int(data.pool_rows[i])}" for i in batch],
            "commit": spec.commit,
            "loop_options": {"batch": b, "seed_labels": spec.s0(c), "random_share": spec.random_share, **spec.options},
        }
        if len(labelled) >= spec.max_labels or len(labelled) >= n:
            _timed(record, started)
            out.append(record)
            break
        eligible = np.setdiff1d(np.arange(n), labelled)
        k = min(b, spec.max_labels - len(labelled), len(eligible))
        p = model.predict_proba(data.pool_x[eligible])
        shares = None
        if strategy == "portfolio":
            s = portfolio_split(data, labelled, arm_of, gen)
            shares = s.shares
            record["selection"] = portfolio.split_to_json(s)
        inputs = Inputs(
            n=len(eligible),
            uncertainty=committee_uncertainty(p),
            committee_p=p,
            emb=data.pool_x[eligible],
            labeled_emb=data.pool_x[labelled],
            shares=shares,
            random_share=spec.random_share,
            oversample=OVERSAMPLE,
            beta=spec.softrank_beta,
        )
        sel = REGISTRY[strategy].choose(inputs, b=k, rng=gen)
        arms = sel.arms or tuple("random" if r else "active" for r in sel.is_random)
        for pos, arm in zip(sel.indices, arms, strict=True):
            arm_of[int(eligible[pos])] = arm
        batch = [int(eligible[pos]) for pos in sel.indices]
        labelled += batch
        _timed(record, started)
        out.append(record)
        round_no += 1
    return out


def seed_set(data: ProxyData, strategy: str, seed: int, spec: ProxySpec) -> list[int]:
    """Round 1's pool positions: uniform (random, or cold_mode "random": the same draw for every
    strategy of a seed), else the production cold start of that mode."""
    n, size = len(data.pool_y), min(spec.s0(data.n_classes), len(data.pool_y))
    if strategy == "random" or spec.cold_mode == "random":
        return [int(i) for i in np.random.default_rng(seed).choice(n, size=size, replace=False)]
    empty = np.zeros((0, data.pool_x.shape[1]), np.float32)
    sel = select_cold_start(data.pool_x, empty, b=size, rng=seed, mode=spec.cold_mode)  # type: ignore[arg-type]
    return [int(i) for i in sel.indices]


def portfolio_split(
    data: ProxyData, labelled: Sequence[int], arm_of: dict[int, str], gen: np.random.Generator
) -> portfolio.Split:
    """The portfolio's split from the labels so far, each with the arm that picked it (the round
    service does the same from the rounds' stored picks)."""
    at = np.asarray(labelled, dtype=np.int64)
    return portfolio.split_labels(data.pool_x[at], data.pool_y[at], [arm_of[i] for i in labelled], data.n_classes, gen)


def _timed(record: dict[str, Any], started: float) -> None:
    seconds = round(time.perf_counter() - started, 3)
    record["round_seconds"] = seconds
    record["seconds"] = {"fit+select": seconds}


def load_data(
    name: str,
    data_dir: Path,
    embed: Callable[[list[str]], np.ndarray],
    *,
    pool_sample: int = 0,
    holdout: float = 0.0,
) -> ProxyData:
    """train.csv → pool (optionally a fixed sample, like the harness's), test.csv → test, embedded.
    ``holdout`` > 0: a fixed share of train.csv (at most 2,000 rows) is the evaluation set instead of
    test.csv and leaves the pool — for choosing options without looking at the test split."""
    train, test = read_rows(data_dir / "train.csv"), read_rows(data_dir / "test.csv")
    keep = list(range(len(train)))
    if holdout > 0:
        order = np.random.default_rng(1).permutation(len(train))
        n_held = min(int(round(holdout * len(train))), 2000)
        test = [train[int(i)] for i in order[:n_held]]
        keep = sorted(int(i) for i in order[n_held:])
    if 0 < pool_sample < len(keep):  # the harness's sample (its POOL_SAMPLE_SEED is 0 too)
        keep = sorted(keep[int(i)] for i in np.random.default_rng(0).choice(len(keep), size=pool_sample, replace=False))
    train = [train[i] for i in keep]
    names = sorted({label for _, label in train})
    index = {label: i for i, label in enumerate(names)}
    test = [(t, y) for t, y in test if y in index]
    return ProxyData(
        name=name,
        pool_rows=np.asarray(keep, dtype=np.int64),
        pool_x=embed([t for t, _ in train]),
        pool_y=np.array([index[y] for _, y in train], np.int64),
        test_x=embed([t for t, _ in test]),
        test_y=np.array([index[y] for _, y in test], np.int64),
        n_classes=len(names),
    )


def read_rows(path: Path) -> list[tuple[str, str]]:
    """(text, label) rows of a shared-data CSV (the harness's read_rows, without its Django imports)."""
    with path.open(newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def append_records(path: Path, records: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")


def spec_json(spec: ProxySpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)
