"""Frozen configs for the plain-Python loop (training/, acquisition/, scoring/), built from a Project row, and
frozen once per round.

Project holds the knobs leads and ML staff set in the UI. The few that are per deployment rather
than per project come from one place: ``ALANN_LOOP_OPTIONS`` (JSON) is read once, by
config/settings.py, into ``settings.LOOP_OPTIONS``; ``loop_options()`` turns that into a checked,
typed ``LoopOptions`` (an unknown key is an error, not a silent no-op), and ``loop_config`` is its
only reader. E.g. ``{"profile": "gpu", "n_shards": 2, "train": {"max_steps": 8}}``. The profile is
the deployment's choice (``"cpu"`` unless set): the CPU one retrains the bundled SmolLM2 in minutes,
the GPU one is the full loop. No process derives it from the device it happens to run on.

A round's configuration is resolved once, when the round is requested (``freeze_config``), and stored
on the round with its fingerprint; every step of that round, in whichever process, reads it back
(``round_config``), so a CPU planner and a GPU scorer cannot disagree on the prompt or the training.
A worker checks that it can honour it (``worker_config``) and refuses by the option's name otherwise.
The exceptions are how a worker runs its engine on its GPU (``LOCAL_ENGINE_OPTIONS``): its share of the
GPU (how many engines share one is the host's business) and vLLM's CUDA-graph capture (a faster start,
the same kernels), which change no score.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from django.conf import settings

from acquisition.batch import SelectionConfig
from annotate.models import Label, Project, Round
from scoring.prompts import LabelSpec, PromptSpec
from scoring.rescoring import RescoringConfig
from training.ensemble import LoopConfig
from training.lora import TrainConfig

logger = logging.getLogger(__name__)

# CPU profile (issue 32, problem 5: a default project's round at 200 labels in at most 90 s on 2
# cores, bench/cpu_round.py): LoRA on the last 4 of SmolLM2's 30 layers only, so the 26 below run once
# per training run (and stay cached in the engine for scoring and evaluation) instead of forward and
# backward at every step; 48 steps of 16 whatever the label count (min_steps = max_steps: a round
# costs the same at 40 labels as at 400, and 12 steps starved small label sets, see GPU_PROFILE's
# steps probe); lr 1e-3 because so few steps at 2e-4 barely move a fresh LoRA; no dropout (as on the
# GPU); a checkpoint every 16 steps (a kill loses < 16 steps of ~0.3 s). arms_every 5: the active /
# random comparison arms (two more adapters trained and the test set scored twice more) every 5th
# round only: they doubled a CPU round. arms_timing "deferred": even then they are trained and
# evaluated after the round, while the next batch is labelled (issue 32, problem 5: an arms round took
# 95-107 s, the arms 68 s of training and 15 s of evaluation of it). The full loop (every layer, arms
# each round, in the round) stays one option away:
# {"train": {"top_layers": 0}, "arms_every": 1, "arms_timing": "in_round"}.
CPU_PROFILE: dict[str, Any] = {
    # 0: fitted to the prompt (scoring.pipeline.make_renderer): a prompt takes the tokens it has, so a
    # fixed cap only cut long items short, or refused a long prefix (few-shot examples) outright.
    "max_context": 0,
    "arms_every": 5,
    "arms_timing": "deferred",
    "train": {
        "min_steps": 48,
        "max_steps": 48,
        "batch_size": 16,
        "lr": 1e-3,
        "dropout": 0.0,
        "checkpoint_every": 16,
        "top_layers": 4,
        "wide_top_layers": 8,
    },
}
# What a project created from the setup page starts with, per profile (the fields stay editable). On
# a CPU: one adapter (K=1: the embedding proxy is the committee's second member), batches of 20, one
# cold-start round, and 300 scored candidates a round rather than the whole pool (scoring is linear
# in it: 300 prompts through 4 adapted layers take seconds). On a GPU: the model's defaults.
NEW_PROJECT_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"ensemble_k": 1, "batch_size": 20, "cold_start_batches": 1, "candidate_sample": 300},
    "gpu": {},
}
# GPU profile: the configuration the six-set simulation of 2026-12-01 measured (bench/RESULTS.md,
# "Session 5"): LoRA in the last 8 of SmolLM2's 30 layers (the trunk below runs once per training
# run and stays cached in the engine: a K=2 round at 500 labels alone on an H200, 48 steps a member,
# in 14.6 s instead of 55.6 s, 3.5 instead of 5.9 GiB), 3 epochs capped at 48 steps of 32, lr 1e-3 (a warm adapter
# barely moves in a few dozen steps at 2e-4), no dropout. Its cost: 89.2 % instead of 95.0 % on
# TREC at 500 random labels in that benchmark (one seed); top_layers 0 trains every layer again.
# min_steps 48: every round takes the 48 steps a round at 500+ labels takes anyway; by epochs alone
# a 100-label round got 12, and one adapter on 100 SNIPS labels reached 28–33 % after 12 steps,
# 63–65 % after 36, 86–87 % after 72 (two seeds, bench/steps_probe.py,
# bench/raw/2026-12-01/steps-probe-snips-100.json). With it and the trainer's packed steps
# (TrainConfig.packed, on by default) the session-6 run (bench/RESULTS.md) reached 1,000 labels on
# all six sets and the round above took 13.3 s and 2.1 GiB. wide_top_layers 16: a project with more
# than 50 labels (training.lora.WIDE_LABELS) adapts 16 layers, measured on CLINC150's 151 in session 8
# (71.0 % instead of 67.7 at 1,000 active labels, 4.0 GiB a job); smaller label sets keep 8.
# graph_step "auto" and precision "tf32" (session 11): each step replayed from one CUDA graph, its
# float32 matmuls in TensorFloat-32 — a K=2 round at 500 labels alone on the H200 in 6.2 s (8
# layers) and 9.6 s (16 layers) instead of 7.5 / 10.9 s with float32 graphs and 15.0 s with the
# per-batch step at 16 layers (one sitting); a simulation job's GPU memory levels off at 2.2-3.0 GiB
# (3.8 GiB for CLINC150's 16 layers). micro_batch_tokens 4096: a step's batch must be whole for the
# graph, so batches of items up to 128 tokens are; longer items take the per-batch step (the packed
# sequence, and its float block mask, stay ~5k tokens).
GPU_PROFILE: dict[str, Any] = {
    "max_context": 1024,
    "eval_shards": 4,  # the deployed shape's gpu workers (four on one GPU) evaluate side by side
    "train": {
        "epochs": 3,
        "min_steps": 48,
        "max_steps": 48,
        "batch_size": 32,
        "lr": 1e-3,
        "dropout": 0.0,
        "top_layers": 8,
        "wide_top_layers": 16,
        "graph_step": "auto",
        "precision": "tf32",
        "micro_batch_tokens": 4096,
    },
}


@dataclass(frozen=True)
class LoopOptions:
    """The deployment's loop options, checked and merged over the machine's profile."""

    profile: str  # "cpu" (default) or "gpu": the deployment's choice, never the device of the process
    max_context: int  # prompt tokens: the prefix plus the longest item must fit; 0: fitted to the prompt
    n_shards: int  # 0: one shard per SHARD_ITEMS candidates
    cold_mode: str  # cold-start rounds of every strategy but random: one of acquisition.batch.COLD_MODES
    arms: bool  # train the in-round active / random comparison arms (the simulation turns them off)
    arms_every: int  # ... in every Nth round only (1: every round; training.ensemble.is_arms_round)
    # When those arms (and the from-scratch check) train: "deferred" (the CPU profile) after the round, as
    # units of their own once the next round's batch is out, so the round ends with its prod adapters;
    # "in_round" (the GPU profile: its eval shards score them beside the prod members) inside it.
    arms_timing: str
    # Items of the fixed stop set each evaluation predicts (κ between rounds: the stopping criterion);
    # 0 turns it off. 500 (the default): near κ = 0.99 with 6 balanced classes the 95 % sampling error
    # of κ is about ±0.01, the margin the 0.99 threshold tests; it costs the evaluation 500 prompts on
    # the prefix the test set already computed.
    stop_set_size: int
    # Evaluation shards (annotate/services/evaluation.py): the gpu workers score N slices of the evaluation's
    # prompts side by side (WorkClaim eval_shard units, into the round's evaluation score cache) before the one
    # evaluate step computes the metrics from them; 0 (the CPU profile): the evaluate step scores everything
    # itself. Session 26's CLINC150 rounds spent 47-63 s of their 82-117 s in one worker's evaluation
    # (5,500 test items x 6 adapters x 2 label chunks) while three more gpu workers waited.
    eval_shards: int
    # The round's predictor (predictor/blend.py): "auto" blends the adapters' mean with the embedding
    # proxy at a weight fitted on held-out batch labels; "off" predicts with the adapters alone.
    blend: str
    # The active strategy's soft-rank exponent (acquisition.batch.SelectionConfig.softrank_beta):
    # draw probability ∝ rank^-β over the committee's uncertainty
    # (default 1: acquisition.batch.DEFAULT_SOFTRANK_BETA).
    softrank_beta: float
    # Whose uncertainty the active strategy's draws follow (acquisition.batch.SelectionConfig.committee):
    # "members" (default: the K adapters and the proxy as K + 1 equal members) or "blend" (the round's
    # predictor, the adapters and the proxy at the blend weight the last evaluation fitted).
    committee: str
    # Retrain the prod members from scratch every N rounds (training.ensemble.prod_training_mode; 0, the
    # default: warm starts throughout, as measured so far). The pool's end and a requested final model
    # always retrain from scratch, whatever N.
    consolidate_every: int
    train: TrainConfig
    engine_options: tuple[tuple[str, Any], ...]  # passed to the engine, e.g. gpu_memory_utilization


KNOWN_OPTIONS = {f.name for f in fields(LoopOptions)}
PROFILES: dict[str, dict[str, Any]] = {"cpu": CPU_PROFILE, "gpu": GPU_PROFILE}
# The CPU profile unless the deployment says otherwise: the embedded default and every test run on CPUs,
# and a GPU deployment sets ALANN_LOOP_OPTIONS='{"profile": "gpu"}' for the processes that request
# rounds (docker-compose.yml does). The web process requests rounds and must never import torch to ask.
DEFAULT_PROFILE = "cpu"
DEFAULT_STOP_SET_SIZE = 500
BLEND_MODES = ("auto", "off")
ARMS_TIMINGS = ("deferred", "in_round")
# "typical" (TypiClust): on the cheap learner (MiniLM + logistic regression, bench/proxy_sim.py on a
# 20 % holdout of each train split, 5 seeds) the active loop's Δ area under the curve vs random rose on
# five shared sets and tied on SST-2 against a uniform seed set (+0.0 … +8.6 CLINC150). On the H200
# (the LLM loop, 3 seeds, test splits): CLINC150 +3.3 → +5.3, emotion +1.6 → +3.1, SNIPS +1.3 → +1.4,
# TREC +2.1 → +1.7, SST-2 and search snippets +0.7 → +0.3 (bench/RESULTS.md, session 9). A project run
# as random still starts uniformly.
DEFAULT_COLD_MODE = "typical"
MAX_SOFTRANK_BETA = 8.0  # rank^-8 draws from the top few ranks: as greedy as a soft rank needs to be


def _non_negative(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = int(raw.get(key, default))
    if value < 0:
        raise ValueError(f"loop option {key} must be 0 (off) or positive, got {value}")
    return value


def _at_least_one(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = int(raw.get(key, default))
    if value < 1:
        raise ValueError(f"loop option {key} must be 1 or more, got {value}")
    return value


def parse_loop_options(raw: Mapping[str, Any]) -> LoopOptions:
    """``raw`` (settings.LOOP_OPTIONS) over the CPU or GPU profile. ValueError names an unknown key."""
    unknown = set(raw) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown loop options {sorted(unknown)} (known: {sorted(KNOWN_OPTIONS)})")
    profile = str(raw.get("profile") or DEFAULT_PROFILE)
    if profile not in PROFILES:
        raise ValueError(f"loop option profile must be one of {list(PROFILES)}, got {profile!r}")
    base = PROFILES[profile]
    return LoopOptions(
        profile=profile,
        max_context=int(raw.get("max_context", base["max_context"])),
        n_shards=int(raw.get("n_shards", 0)),
        cold_mode=_cold_mode(raw),
        arms=bool(raw.get("arms", True)),
        arms_every=_at_least_one(raw, "arms_every", int(base.get("arms_every", 1))),
        arms_timing=_arms_timing(raw, str(base.get("arms_timing", "in_round"))),
        stop_set_size=_non_negative(raw, "stop_set_size", DEFAULT_STOP_SET_SIZE),
        eval_shards=_non_negative(raw, "eval_shards", int(base.get("eval_shards", 0))),
        blend=_blend_mode(raw),
        softrank_beta=_softrank_beta(raw),
        committee=_committee(raw),
        consolidate_every=_non_negative(raw, "consolidate_every", 0),
        train=train_config({**base.get("train", {}), **raw.get("train", {})}),
        engine_options=_engine_options(raw),
    )


def _cold_mode(raw: Mapping[str, Any]) -> str:
    from acquisition.batch import COLD_MODES

    value = str(raw.get("cold_mode", DEFAULT_COLD_MODE))
    if value not in COLD_MODES:
        raise ValueError(f"loop option cold_mode must be one of {list(COLD_MODES)}, got {value!r}")
    return value


def _engine_options(raw: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The engine's options as given; the hf engine's packed_scoring and vLLM's CUDA-graph options are
    checked here, at start-up, rather than when a worker first builds the engine mid-round."""
    from scoring.engines.hf import packed_choice
    from scoring.engines.vllm import BLOCK_SIZES, CUDAGRAPH_MODES, PREFIX_HASH_ALGOS
    from scoring.labels import MAX_LABELS

    options = dict(raw.get("engine_options", {}))
    if "packed_scoring" in options:
        try:
            packed_choice(options["packed_scoring"], on_gpu=False)
        except ValueError as exc:
            raise ValueError(f"loop option engine_options: {exc}") from None
    mode = options.get("cudagraph_mode")
    if mode is not None and mode not in CUDAGRAPH_MODES:
        raise ValueError(
            f"loop option engine_options: cudagraph_mode must be one of {sorted(CUDAGRAPH_MODES)}, got {mode!r}"
        )
    sizes = options.get("cudagraph_capture_sizes")
    if sizes is not None and not (isinstance(sizes, list) and sizes and all(type(n) is int and n > 0 for n in sizes)):
        raise ValueError(
            "loop option engine_options: cudagraph_capture_sizes must be a non-empty list of positive "
            f"whole numbers (batch sizes), got {sizes!r}"
        )
    kv = options.get("kv_cache_memory_bytes")
    if kv is not None and not (type(kv) is int and kv > 0):
        raise ValueError(
            f"loop option engine_options: kv_cache_memory_bytes must be a positive whole number, got {kv!r}"
        )
    block = options.get("block_size")
    if block is not None and block not in BLOCK_SIZES:
        raise ValueError(f"loop option engine_options: block_size must be one of {list(BLOCK_SIZES)}, got {block!r}")
    algo = options.get("prefix_caching_hash_algo")
    if algo is not None and algo not in PREFIX_HASH_ALGOS:
        raise ValueError(
            f"loop option engine_options: prefix_caching_hash_algo must be one of {sorted(PREFIX_HASH_ALGOS)}, "
            f"got {algo!r}"
        )
    for switch in ("engine_core_process", "parallel_start"):
        value = options.get(switch)
        if value is not None and type(value) is not bool:
            raise ValueError(f"loop option engine_options: {switch} must be true or false, got {value!r}")
    width = options.get("label_logprob_width")
    if width is not None and not (type(width) is int and 1 <= width <= MAX_LABELS):
        raise ValueError(
            f"loop option engine_options: label_logprob_width must be a whole number within [1, {MAX_LABELS}],"
            f" got {width!r}"
        )
    invariant = options.get("batch_invariant")
    if invariant is not None and type(invariant) is not bool:
        raise ValueError(f"loop option engine_options: batch_invariant must be true or false, got {invariant!r}")
    return tuple(sorted(options.items()))


def _committee(raw: Mapping[str, Any]) -> str:
    from acquisition.batch import COMMITTEES

    value = raw.get("committee", "members")
    if value not in COMMITTEES:
        raise ValueError(f"loop option committee must be one of {list(COMMITTEES)}, got {value!r}")
    if value == "blend" and _blend_mode(raw) == "off":
        raise ValueError('loop option committee "blend" needs blend "auto": with blend "off" no weight is fitted')
    return str(value)


def _softrank_beta(raw: Mapping[str, Any]) -> float:
    from acquisition.batch import DEFAULT_SOFTRANK_BETA

    raw_value = raw.get("softrank_beta", DEFAULT_SOFTRANK_BETA)
    try:
        value = float(raw_value)
    except (TypeError, ValueError):
        raise ValueError(f"loop option softrank_beta must be a number, got {raw_value!r}") from None
    if not 0.0 <= value <= MAX_SOFTRANK_BETA:  # NaN fails this too
        raise ValueError(f"loop option softrank_beta must be within [0, {MAX_SOFTRANK_BETA:g}], got {value:g}")
    return value


def _arms_timing(raw: Mapping[str, Any], default: str) -> str:
    value = raw.get("arms_timing", default)
    if value not in ARMS_TIMINGS:
        raise ValueError(f"loop option arms_timing must be one of {list(ARMS_TIMINGS)}, got {value!r}")
    return str(value)


def _blend_mode(raw: Mapping[str, Any]) -> str:
    value = str(raw.get("blend", "auto"))
    if value not in BLEND_MODES:
        raise ValueError(f"loop option blend must be one of {list(BLEND_MODES)}, got {value!r}")
    return value


_PARSED: dict[str, LoopOptions] = {}


def loop_options() -> LoopOptions:
    """settings.LOOP_OPTIONS as a LoopOptions, parsed once per distinct value (the simulation harness
    overrides the setting per job)."""
    raw = dict(getattr(settings, "LOOP_OPTIONS", None) or {})
    key = json.dumps(raw, sort_keys=True, default=str)
    if key not in _PARSED:
        _PARSED[key] = parse_loop_options(raw)
    return _PARSED[key]


def stop_set_size() -> int:
    """The stop-set loop option alone, without resolving the profile (that asks torch for a GPU): the
    web process reads it for the ML page and must never load torch."""
    return _non_negative(dict(getattr(settings, "LOOP_OPTIONS", None) or {}), "stop_set_size", DEFAULT_STOP_SET_SIZE)


def new_project_defaults() -> dict[str, Any]:
    """The setup page's starting values for a new project under the deployment's profile (read without
    parsing the other options: the web process renders the page)."""
    profile = str(dict(getattr(settings, "LOOP_OPTIONS", None) or {}).get("profile") or DEFAULT_PROFILE)
    return dict(NEW_PROJECT_DEFAULTS.get(profile, {}))


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


def loop_config(project: Project) -> LoopConfig:
    opts = loop_options()
    prompt = prompt_spec(project)
    return LoopConfig(
        model_dir=model_dir_of(project),
        engine=project.engine,  # type: ignore[arg-type]
        prompt=prompt,
        max_context=opts.max_context,
        k=max(1, project.ensemble_k),
        scratch_every=project.scratch_every,
        selection=SelectionConfig(
            batch_size=project.batch_size,
            oversample=project.oversample,
            random_share=project.random_share,
            mass_threshold=project.mass_threshold,
            uncertainty=project.uncertainty,  # type: ignore[arg-type]
            cold_start_batches=project.cold_start_batches,
            cold_mode=opts.cold_mode,  # type: ignore[arg-type]
            softrank_beta=opts.softrank_beta,
            committee=opts.committee,  # type: ignore[arg-type]
        ),
        rescoring=RescoringConfig(
            candidate_sample=project.candidate_sample,
            carry_top_share=project.carry_top_share,
            first_pass_share=project.first_pass_share,
            n_shards=opts.n_shards,
        ),
        train=opts.train.for_labels(len(prompt.labels)),
        engine_options=opts.engine_options,
        arms=opts.arms,
        arms_every=opts.arms_every,
        arms_timing=opts.arms_timing,
        blend=opts.blend,
        consolidate_every=opts.consolidate_every,
    )


# -- the round's frozen configuration ---------------------------------------------------------------

CONFIG_VERSION = 1
# Engine options that stay with the worker rather than the round: the share of the GPU a vLLM engine
# takes depends on how many engines that host runs on it (compose's per-worker environment), and no
# score depends on it. Every other option is the round's.
LOCAL_ENGINE_OPTIONS = frozenset(
    {
        "gpu_memory_utilization",
        "cudagraph_capture_sizes",
        "cudagraph_mode",
        "kv_cache_memory_bytes",
        "prefix_caching_hash_algo",
        "engine_core_process",
        "parallel_start",
        "label_logprob_width",
    }
)


class ConfigNotHonouredError(RuntimeError):
    """This worker cannot run the round's frozen configuration (an option it has no device or library for)."""


def freeze_config(project: Project, *, adapter_set: str = "") -> dict[str, Any]:
    """The full effective configuration of a round of ``project`` requested now, as plain JSON: the
    loop's config (prompt, model, engine and its options, K, selection, rescoring, training with every
    default resolved) and the deployment options the steps read besides (profile, stop set). Only the
    process requesting the round calls this; ``adapter_set`` names the adapters it starts from."""
    opts = loop_options()
    loop = loop_config(project)
    engine_options = {k: v for k, v in loop.engine_options if k not in LOCAL_ENGINE_OPTIONS}
    body = asdict(replace(loop, engine_options=()))
    body["engine_options"] = engine_options
    frozen = {
        "version": CONFIG_VERSION,
        "profile": opts.profile,
        "stop_set_size": opts.stop_set_size,
        "eval_shards": opts.eval_shards,
        # whether the many-label rule widened the adapted layers (the ML page says so)
        "widened": loop.train.top_layers != opts.train.top_layers,
        "adapter_set": adapter_set,
        "loop": body,
    }
    return json.loads(json.dumps(frozen, sort_keys=True))  # exactly what the JSON column will hold


def config_fingerprint(frozen: Mapping[str, Any]) -> str:
    """sha256 of the frozen config's canonical JSON: equal configs, equal fingerprints, on any host.
    The adapter set a round starts from is recorded beside the configuration but left out of it: it
    changes every round, and the fingerprint says whether the options did."""
    options = {k: v for k, v in frozen.items() if k != "adapter_set"}
    return hashlib.sha256(json.dumps(options, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def thaw_config(frozen: Mapping[str, Any]) -> LoopConfig:
    """The LoopConfig a frozen config describes (the inverse of ``freeze_config``'s "loop")."""
    if frozen.get("version") != CONFIG_VERSION:
        raise ValueError(f"frozen config version {frozen.get('version')!r} is not {CONFIG_VERSION}")
    body = dict(frozen["loop"])
    prompt = body.pop("prompt")
    train = dict(body.pop("train"))
    if isinstance(train.get("target_modules"), list):
        train["target_modules"] = tuple(train["target_modules"])
    return LoopConfig(
        **{k: v for k, v in body.items() if k not in {"selection", "rescoring", "engine_options"}},
        prompt=PromptSpec(
            instructions=prompt["instructions"],
            labels=tuple(LabelSpec(**lab) for lab in prompt["labels"]),
            few_shot=tuple((str(t), str(lab)) for t, lab in prompt["few_shot"]),
            item_template=prompt["item_template"],
        ),
        selection=SelectionConfig(**body["selection"]),
        rescoring=RescoringConfig(**body["rescoring"]),
        train=TrainConfig(**train),
        engine_options=tuple(sorted(dict(body["engine_options"]).items())),
    )


def round_frozen(row: Round) -> dict[str, Any]:
    """The round's frozen config; a round requested before configs were frozen (an older release) gets
    one now, once: a guarded UPDATE, so two processes reading it first store the same one."""
    if not row.config:
        frozen = freeze_config(row.project)
        Round.objects.filter(id=row.id, config_fingerprint="").update(
            config=frozen, config_fingerprint=config_fingerprint(frozen)
        )
        row.config, row.config_fingerprint = Round.objects.filter(id=row.id).values_list(
            "config", "config_fingerprint"
        )[0]
    return dict(row.config)


def round_config(row: Round) -> LoopConfig:
    """The LoopConfig every step of ``row`` runs with: the one frozen when it was requested."""
    return thaw_config(round_frozen(row))


def round_stop_set_size(row: Round) -> int:
    return int(round_frozen(row)["stop_set_size"])


def round_eval_shards(row: Round) -> int:
    """The evaluation shards of the round's frozen config (0: the evaluate step scores everything; a round
    frozen before the option existed has none)."""
    return int(round_frozen(row).get("eval_shards", 0))


def round_arms_deferred(row: Round) -> bool:
    """Whether the round's comparison adapters (scratch, active, random) are trained and evaluated after
    it (loop option arms_timing "deferred"); a round frozen before the option existed trained them in it."""
    return str(round_frozen(row)["loop"].get("arms_timing", "in_round")) == "deferred"


def worker_config(row: Round) -> LoopConfig:
    """``round_config`` for the process about to run the round's heavy work (score, train, evaluate):
    checked against what this process has, with its own share of the GPU (LOCAL_ENGINE_OPTIONS)."""
    config = round_config(row)
    own = loop_options()
    frozen_profile = round_frozen(row)["profile"]
    if own.profile != frozen_profile:  # worth a line in the worker's log: it may be the deployment's mistake
        logger.info(
            "round %s runs its frozen profile %r; this worker's own options say %r (set the profile on the "
            "processes that request rounds: web and worker)",
            row.number,
            frozen_profile,
            own.profile,
        )
    local = {k: v for k, v in own.engine_options if k in LOCAL_ENGINE_OPTIONS}
    if local:
        config = replace(config, engine_options=tuple(sorted({**dict(config.engine_options), **local}.items())))
    check_honourable(config, round_number=row.number)
    return config


def check_honourable(config: LoopConfig, *, round_number: int) -> None:
    """ConfigNotHonouredError, naming the option, when this process cannot run ``config`` as frozen:
    the vLLM engine without a GPU or without vLLM, an engine option the engine does not take, a CUDA
    device option on a machine without one."""
    import importlib.util

    from annotate.services.workers import worker_id
    from scoring.device import cuda_available
    from scoring.engines import engine_option_names
    from scoring.engines.vllm import vllm_imported_variant

    where = f"round {round_number}'s frozen config"
    here = f"this worker ({worker_id()})"
    if config.engine == "vllm" and not cuda_available():
        raise ConfigNotHonouredError(
            f"{where} has engine 'vllm', which needs a GPU, and {here} has none: run the gpu queue on a GPU "
            "worker, or set the project's engine to hf"
        )
    if config.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigNotHonouredError(f"{where} has engine 'vllm', and {here} has no vllm: pip install '.[gpu]'")
    options = dict(config.engine_options)
    unknown = sorted(set(options) - engine_option_names(config.engine))
    if unknown:
        raise ConfigNotHonouredError(
            f"{where} has engine_options.{unknown[0]}, which the {config.engine} engine does not take "
            f"(it takes: {', '.join(sorted(engine_option_names(config.engine)))})"
        )
    device = str(options.get("device") or "")
    if device.startswith("cuda") and not cuda_available():
        raise ConfigNotHonouredError(f"{where} has engine_options.device {device!r}, and {here} has no GPU")
    if options.get("batch_invariant") and vllm_imported_variant():
        # vLLM reads the switch when it is imported (scoring/engines/vllm.py, batch_invariance)
        raise ConfigNotHonouredError(
            f"{where} has engine_options.batch_invariant, and {here} imported vLLM without it: give the gpu "
            "workers' own loop options batch_invariant too (or their environment VLLM_BATCH_INVARIANT=1)"
        )
