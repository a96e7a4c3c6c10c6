"""Frozen configs for the plain-Python loop (scoring/, training/), built from a Project row.

Project holds the knobs leads and ML staff set in the UI. The few that are per deployment rather
than per project (context length, training steps, shard count) come from ``settings.LOOP_OPTIONS``
or the ``ALANN_LOOP_OPTIONS`` environment variable (JSON), e.g.
``{"max_context": 256, "n_shards": 2, "train": {"max_steps": 8}}``. Without them a CPU machine gets
a profile that retrains the bundled SmolLM2 in minutes and a GPU machine the full one.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from typing import Any

from django.conf import settings

from annotate.models import Label, Project
from scoring.device import device_kind
from scoring.prompts import LabelSpec, PromptSpec
from scoring.rescoring import RescoringConfig
from scoring.selection import SelectionConfig
from training.ensemble import LoopConfig
from training.lora import TrainConfig

# CPU profile: a round's retrain (2 prod members + the 2 comparison arms) must finish in minutes on
# 2 cores, where one SmolLM2 step on 8 prompts of ~200 tokens costs ~18 CPU-seconds (measured under
# load). 12 steps of 4 prompts ≈ one pass over a 50-label round; lr 1e-3 because so few steps at
# 2e-4 barely move a freshly initialised LoRA; a checkpoint every 4 steps (a kill loses < 4 steps).
CPU_PROFILE: dict[str, Any] = {
    "max_context": 256,  # TREC / SST-2 items are short; the prefix is ~150 tokens
    "train": {"max_steps": 12, "batch_size": 4, "lr": 1e-3, "checkpoint_every": 4},
}
# GPU profile: the trainer's defaults, capped at 300 steps so a round's latency stays bounded as
# the labeled set grows (warm starts carry what earlier rounds learned).
GPU_PROFILE: dict[str, Any] = {"max_context": 1024, "train": {"max_steps": 300}}


def loop_options() -> dict[str, Any]:
    # settings.LOOP_OPTIONS is read from the environment at start-up; the variable is read again here
    # so a process that sets it later (tests, the simulation harness) is heard too.
    configured = getattr(settings, "LOOP_OPTIONS", None) or json.loads(os.environ.get("ALANN_LOOP_OPTIONS", "") or "{}")
    return dict(configured)


def _profile(options: dict[str, Any]) -> dict[str, Any]:
    name = options.get("profile") or device_kind()
    base = GPU_PROFILE if name == "gpu" else CPU_PROFILE
    merged = {**base, **{k: v for k, v in options.items() if k != "train"}}
    merged["train"] = {**base.get("train", {}), **options.get("train", {})}
    return merged


def model_dir_of(project: Project) -> str:
    return project.model_dir or str(settings.LLM_DIR)


def prompt_spec(project: Project) -> PromptSpec:
    labels = list(Label.objects.filter(project=project).order_by("order", "id"))
    few_shot = tuple((str(ex["text"]), str(ex["label"])) for ex in project.few_shot or [])
    return PromptSpec(
        instructions=project.instructions,
        labels=tuple(LabelSpec(name=lab.name, description=lab.description, code=lab.code) for lab in labels),
        few_shot=few_shot,
        item_template=project.item_template,
    )


def train_config(overrides: dict[str, Any]) -> TrainConfig:
    known = {f.name for f in fields(TrainConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown training options {sorted(unknown)} (known: {sorted(known)})")
    return replace(TrainConfig(), **overrides)


def loop_config(project: Project, *, options: dict[str, Any] | None = None) -> LoopConfig:
    opts = _profile(loop_options() if options is None else options)
    return LoopConfig(
        model_dir=model_dir_of(project),
        engine=project.engine,  # type: ignore[arg-type]
        prompt=prompt_spec(project),
        max_context=int(opts["max_context"]),
        k=max(1, project.ensemble_k),
        scratch_every=project.scratch_every,
        selection=SelectionConfig(
            batch_size=project.batch_size,
            oversample=project.oversample,
            random_share=project.random_share,
            mass_threshold=project.mass_threshold,
            uncertainty=project.uncertainty,  # type: ignore[arg-type]
            cold_start_batches=project.cold_start_batches,
            cold_mode=opts.get("cold_mode", "random"),
        ),
        rescoring=RescoringConfig(
            candidate_sample=project.candidate_sample,
            carry_top_share=project.carry_top_share,
            first_pass_share=project.first_pass_share,
            n_shards=int(opts.get("n_shards", 0)),
        ),
        train=train_config(opts["train"]),
        engine_options=tuple(sorted(opts.get("engine_options", {}).items())),
    )
