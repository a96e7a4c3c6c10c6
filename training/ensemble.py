"""The training half of a round as plain functions (no Django): the loop's frozen configuration, the
seed of each ensemble member and comparison arm, the equal-size active / random training sets, one
member's training, and the test-set evaluation of an adapter set. The round services
(annotate/services/training.py, evaluation.py) and the simulation harness call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from acquisition.batch import SelectionConfig
from scoring.prompts import PromptSpec
from scoring.rescoring import RescoringConfig
from training.lora import TrainConfig

if TYPE_CHECKING:
    from scoring.engines import AdapterRef, Engine
    from scoring.prompts import PromptRenderer
    from training.lora import TrainedAdapter

Arm = Literal["prod", "scratch", "active", "random"]


@dataclass(frozen=True)
class LoopConfig:
    model_dir: str
    engine: Literal["hf", "vllm"]
    prompt: PromptSpec
    max_context: int
    k: int  # ensemble size
    scratch_every: int  # from-scratch comparison every R rounds (0: never)
    selection: SelectionConfig
    rescoring: RescoringConfig
    train: TrainConfig
    engine_options: tuple[tuple[str, Any], ...] = field(default=())
    arms: bool = True  # train the in-round active / random comparison arms
    arms_every: int = 1  # ... in every Nth round (is_arms_round): the CPU profile's 5 halves a round
    # When the comparison adapters (scratch, active, random) are trained and evaluated: "in_round" with
    # the prod members (the round ends after them), or "deferred": after the round, while the next batch is
    # labelled, on the same plan and seeds. A round frozen before the option existed trained them in-round.
    arms_timing: str = "in_round"
    blend: str = "auto"  # the predictor: adapters + proxy at a held-out weight ("auto") or adapters alone ("off")
    # Consolidation: the prod members are retrained from scratch every N rounds (0: never, warm starts
    # throughout). Warm starts trained a fixed number of steps carry the order labels arrived in (issue 33).
    consolidate_every: int = 0


ARM_SEED_OFFSET = {"prod": 0, "scratch": 100, "active": 200, "random": 300}


def member_seed(round_seed: int, arm: Arm, k: int) -> int:
    """Each ensemble member and arm gets its own seed (LoRA init, data order, dropout)."""
    return (int(round_seed) * 1000 + ARM_SEED_OFFSET[arm] + k) % (2**31 - 1)


def is_scratch_round(number: int, scratch_every: int) -> bool:
    return scratch_every > 0 and number > 1 and number % scratch_every == 0


def is_arms_round(number: int, arms_every: int) -> bool:
    """Whether round ``number`` trains the comparison arms (and the from-scratch check): every round
    for arms_every 1, else rounds arms_every, 2 × arms_every, …"""
    return arms_every <= 1 or number % arms_every == 0


TrainingMode = Literal["warm", "scratch"]


def prod_training_mode(*, number: int, consolidate_every: int, final: bool, has_previous: bool) -> TrainingMode:
    """How round ``number`` trains its prod members: from scratch when there is nothing to start from,
    for the final model (the pool is exhausted, or a user asked for it) and every ``consolidate_every``
    rounds; otherwise each member continues from the previous round's (warm start). A from-scratch
    model depends on the labelled set alone, not on the path the labels arrived by."""
    if final or not has_previous or is_scratch_round(number, consolidate_every):
        return "scratch"
    return "warm"


def make_engine(config: LoopConfig) -> Engine:
    from scoring.engines import get_engine

    return get_engine(config.engine, config.model_dir, **dict(config.engine_options))


# -- training -----------------------------------------------------------------------------------


def arm_training_sets(sources: Sequence[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Positions (into the labeled list) for the equal-size comparison arms: the shared cold-start
    labels plus either every random-slice label or an equal-size sample of the active labels.
    Empty when there are no random-slice or no active labels yet."""
    src = np.asarray(sources)
    cold, rnd, act = (np.flatnonzero(src == s) for s in ("cold", "random", "active"))
    n = min(len(rnd), len(act))
    if n == 0:
        return {}
    random_part = rnd if len(rnd) == n else np.sort(rng.choice(rnd, size=n, replace=False))
    active_part = np.sort(rng.choice(act, size=n, replace=False))
    return {
        "random": np.sort(np.concatenate([cold, random_part])),
        "active": np.sort(np.concatenate([cold, active_part])),
    }


def train_member(
    *,
    config: LoopConfig,
    renderer: PromptRenderer,
    texts: Sequence[str],
    label_indices: Sequence[int],
    out_dir: Path,
    round_seed: int,
    arm: Arm,
    k: int,
    warm_from: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TrainedAdapter:
    """One adapter: its own seed (and so data order); warm-started only for the prod arm."""
    from dataclasses import replace

    from training.lora import train_adapter

    return train_adapter(
        model_dir=config.model_dir,
        renderer=renderer,
        texts=texts,
        label_indices=label_indices,
        out_dir=out_dir,
        config=replace(config.train.for_arm(arm), seed=member_seed(round_seed, arm, k)),
        warm_from=warm_from if arm == "prod" else None,
        progress=progress,
    )


# -- evaluation -------------------------------------------------------------------------------------


def evaluate_adapters(
    engine: Engine,
    renderer: PromptRenderer,
    texts: Sequence[str],
    y: np.ndarray,
    adapters: Sequence[AdapterRef],
    label_names: Sequence[str],
) -> tuple[dict[str, Any], np.ndarray]:
    """Test-set metrics of the ensemble mean (accuracy, macro-F1, per class, confusion, ECE...) and
    the mean distribution itself."""
    from predictor.evaluate import evaluate

    p_mean = ensemble_mean(engine, renderer, texts, adapters)
    return evaluate(p_mean, np.asarray(y), label_names=list(label_names)), p_mean


def ensemble_mean(
    engine: Engine, renderer: PromptRenderer, texts: Sequence[str], adapters: Sequence[AdapterRef]
) -> np.ndarray:
    """The ensemble's mean distribution [N, C] over ``texts`` from one engine call (the evaluation
    passes the test and stop-set texts together, so the prompt prefix is computed once for both)."""
    from scoring.uncertainty import mean_distribution

    return mean_distribution(engine.score(renderer, texts, adapters).p)
