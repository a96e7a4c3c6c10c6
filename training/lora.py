"""LoRA adapters for the scoring ensemble: train one adapter (from scratch or warm-started from the
previous round's), crash-safe and idempotent. The only module that imports PEFT.

The training example is exactly the scoring prompt: ``renderer.render_training(text, label)`` gives
the full prompt (shared few-shot prefix + item turn + assistant header) and the code token the model
should emit next. The loss is the cross-entropy of the logits at the prompt's last position against
that token, so training optimises the very number the engines read at scoring time.

Choices, and why:
- Loss over the full vocabulary (default). Besides ranking the right code first it raises the label
  mass (total probability on the code tokens), which the label-mass filter and the ``mass`` output
  of the engines rely on. ``TrainConfig.loss="label_softmax"`` restricts the softmax to the C code
  tokens instead: the pure classification objective, but it leaves the mass wherever it was.
- The shared prefix runs once per micro-batch (``TrainConfig.prefix_sharing``). It passes through
  the LoRA-adapted layers too, so it cannot be cached across steps; but within a step every row
  has the same prefix, so its keys/values are computed once, with gradients, and expanded over the
  rows. Exact (the same logits and gradients as full prompts), and a step then costs the item
  tokens only: ~10× fewer tokens with an 800-token prefix and 50-token items.
- Left padding + ``logits_to_keep=1``: every row's last real token sits in the last column, so only
  one [B, V] logits slice is materialised instead of [B, T, V]. Position ids are computed from the
  attention mask so a padded row sees the same positions as it would alone (and as in scoring).
- Memory: activations, not weights, dominate training (SmolLM2, 8 × 300-token full prompts: ~12 GB
  stored). With the prefix shared only the item tokens' activations are stored; token-budget
  micro-batches (gradients summed into the same batch update) bound them. The full-prompt path
  uses gradient checkpointing instead. On a GPU the frozen base weights are bf16 (``precision``).
- Determinism and resumability: the data order of epoch e is a permutation drawn from (seed, e), and
  the torch RNG (LoRA dropout) is reseeded from (seed, step) before every step. Together with the
  adapter weights and the AdamW state saved in a checkpoint, a run killed at any step and started
  again ends bit-identical to an uninterrupted run (on the same device and thread count).

One trainer per ``out_dir`` at a time (the round's status guard ensures it): two live runs would
share checkpoints. A second run that merely finishes later finds the published adapter and keeps it.

Layout of one run, for ``out_dir = <root>/adapter-0``:

    <root>/.adapter-0.ckpt/step-000025/   adapter (PEFT), optimizer.pt, state.json — deleted at the end
    <root>/.adapter-0.tmp-<pid>/          the finished adapter being written
    <root>/adapter-0/                     published by one rename: adapter_model.safetensors,
                                          adapter_config.json, training.json, DONE
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from scoring.device import torch_device
from scoring.toplayers import SplitStack, decoder_of, model_start_layer, output_layer_of

if TYPE_CHECKING:
    import torch

    from scoring.prompts import PromptRenderer

Progress = Callable[[int, int], None]
DONE_MARKER = "DONE"
TRAINING_INFO = "training.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
# Fields of adapter_config.json that depend on where the files lie, not on what was trained.
_LOCATION_FIELDS = ("base_model_name_or_path", "revision")
# Label sets larger than this train TrainConfig.wide_top_layers (when set) instead of top_layers.
# Only the shared sets were measured: CLINC150's 151 labels gained from 16 layers; the 2- to 8-label
# sets ran with 8 only. Between 8 and 151 nothing was measured, so 50 is a choice, not a finding.
WIDE_LABELS = 50


class TrainingStateError(RuntimeError):
    """``out_dir`` holds something other than the adapter this call would train."""


@dataclass(frozen=True)
class TrainConfig:
    # Rank 8 on every linear layer: the usual LoRA default; a 135M model at rank 8 trains ~4.9M
    # parameters, plenty for a C-way classification head expressed through one token.
    rank: int = 8
    # alpha = 2 × rank keeps the update scale (alpha / rank = 2) fixed if the rank is changed.
    alpha: int = 16
    # Light dropout on the LoRA input: rounds start with tens of labels, so overfitting is the risk.
    dropout: float = 0.05
    # "all-linear" = attention and MLP projections, not lm_head (PEFT excludes the output layer):
    # adapting the MLPs too works better than q/v only for classification-style fine-tunes.
    target_modules: str | tuple[str, ...] = "all-linear"
    # 2e-4: the common LoRA rate for AdamW (LoRA's B starts at zero, so updates need a rate ~10×
    # a full fine-tune's); with warm starts each round only nudges the previous adapter.
    lr: float = 2e-4
    # Two passes over the (small) labeled set; max_steps caps it when the set grows large.
    epochs: int = 2
    # 8 prompts of ~300 tokens fit CPU memory and a small GPU; larger batches give no gain at
    # the few hundred labels a round has.
    batch_size: int = 8
    # 0 = no cap. A cap bounds round latency as the labeled set grows (warm starts carry the rest).
    max_steps: int = 0
    # At least this many steps a run (0: the epochs decide; max_steps still caps it). Epochs alone
    # starve small label sets: 3 epochs of 100 labels in batches of 32 are 12 steps, and one adapter
    # on 100 SNIPS labels reached 28–33 % test accuracy after 12 steps, 86–87 % after 72 (two seeds;
    # bench/steps_probe.py, bench/raw/2026-12-01/steps-probe-snips-100.json).
    min_steps: int = 0
    # Drives LoRA init (from scratch), the data order of every epoch and dropout; the ensemble
    # members differ only by seed.
    seed: int = 0
    # No weight decay by default: decaying LoRA weights towards zero pulls a warm-started adapter
    # back to the base model each round.
    weight_decay: float = 0.0
    # Linear warm-up over the first 10 % of steps (then linear decay to 0) protects a warm-started
    # adapter from a first full-size AdamW step computed from fresh, zero moment estimates.
    warmup_ratio: float = 0.1
    # Clip the gradient norm at 1: a few mislabeled items in a tiny batch otherwise spike the update.
    max_grad_norm: float = 1.0
    # Checkpoint every 25 steps (0 = never): a killed worker loses at most 25 steps; the adapter and
    # AdamW state of a 135M model take ~60 MB and a fraction of a second to write.
    checkpoint_every: int = 25
    # Rows × padded width per forward/backward; a larger batch is split and its gradients summed
    # (same update). 2048 bounds activation memory on a shared CPU box; raise it on a GPU.
    micro_batch_tokens: int = 2048
    # Recompute each layer in the backward pass instead of storing its activations: SmolLM2 with
    # 8 × 300-token prompts holds ~12 GB of activations without it, well under 1 GB with it, for
    # one extra forward (~+30 % step time). Turn off on a GPU with memory to spare.
    gradient_checkpointing: bool = True
    # "full_vocab" (default) or "label_softmax": see the module docstring.
    loss: Literal["full_vocab", "label_softmax"] = "full_vocab"
    # Run the shared prompt prefix (instructions, labels, few-shot: ~90 % of a prompt's tokens) once
    # per micro-batch and expand its keys/values over the rows, gradients flowing through it: the
    # same function of the weights as full prompts (exact up to LoRA dropout, whose prefix mask is
    # then shared by the rows), at the cost of the item tokens only. False runs every full prompt
    # (the reference the parity test compares against). Gradient checkpointing is not used on this
    # path (it cannot keep a cache), and needs no help: the item tokens' activations are small.
    prefix_sharing: bool = True
    # "float32" everywhere (default). "auto": on a GPU the frozen base weights in bfloat16 with
    # float32 LoRA weights, matmuls under bf16 autocast — less memory, but not faster: a 135M
    # model's step is bound by kernel launches (~11,000 a step), and autocast adds a cast per LoRA
    # weight. On the H200 (bench/train_profile.py, batch 32): float32 0.34 s a step, bf16 0.38 s
    # without dropout, 0.73 s with it (that row ran first in its process, warm-up likely included).
    # "tf32": float32 weights and activations, the training steps' float32 matmuls on a CUDA device
    # in TensorFloat-32 (10-bit mantissa inputs, float32 accumulation; torch.backends.cuda.matmul
    # .allow_tf32, set for the run and restored after it); the same as "float32" on a CPU. Meant for
    # the graph step, which is bound by float32 arithmetic once dispatch is gone (session 10: ~45 ms
    # a step at 16 layers).
    precision: Literal["auto", "float32", "tf32"] = "float32"
    # LoRA in the last ``top_layers`` decoder layers only (0: every layer). The layers below are then
    # the frozen base model, so the hidden states entering the first adapted layer are computed once
    # per run and every step runs the top layers alone (scoring/toplayers.py): exact, and a step
    # costs top_layers / L of the kernels. The engines read the adapter's layers from its config, so
    # scoring and evaluation take the same short path.
    top_layers: int = 0
    # With top_layers: each step runs the prefix and the batch's suffixes packed into one sequence
    # under a block mask (SplitStack.top_last_packed) instead of the prefix first and the suffixes
    # after it — the same function at a third fewer operator dispatches; on the H200 a 500-label
    # round's training took 8.5 s instead of 11.6 (bench/RESULTS.md, session 6).
    packed: bool = True
    # A project with more than WIDE_LABELS labels trains LoRA in the last ``wide_top_layers`` layers
    # instead of ``top_layers`` (0: top_layers whatever the label count; see for_labels). Measured on
    # CLINC150 (151 labels, 3 seeds, H200, bench/RESULTS.md session 8): 16 layers instead of 8 took
    # active to 71.0 % at 1,000 labels (67.7 with 8) and random to 67.4 (66.0), 4.0 GiB a job.
    wide_top_layers: int = 0
    # The packed top-layer step at fixed shapes (training.graphstep). "auto": captured once as a CUDA
    # graph and replayed every step, on a CUDA device with no dropout in float32 or tf32 (a step of a
    # 135M model's top layers is bound by dispatching ~1,550 small operators): on the H200 a 500-label
    # K=2 round took 7.50 s (8 layers) and 10.85 s (16) instead of 14.96 s with the per-batch step at
    # 16 layers, the same losses to 1e-5 (bench/RESULTS.md, sessions 10-11). The GPU profile turns it
    # on (annotate/loopconfig.py); the dataclass default stays "off" so a caller gets the per-batch
    # step unless asked. "eager": the fixed-shape step without capture, on any device (what the CPU
    # tests run). "off": the per-batch step. A fixed mode needs the packed top-layer path and a batch
    # that fits micro_batch_tokens whole; otherwise the per-batch step runs.
    graph_step: Literal["auto", "eager", "off"] = "off"
    # The active / random comparison arms' steps a run (min_steps = max_steps = arm_steps; 0: the same rule
    # as the prod members). The arms train on equal-size subsets, each a fifth of the labels or less (the
    # cold start plus the random slice, or as many active labels), so the same recipe for both keeps the
    # comparison like for like at a fraction of the prod members' steps. Measured on the CPU round (bench/
    # cpu_round.py, 2026-12-06, bc2810a: arms of 183 labels each): 24 steps saved 10.6 s of a 95.1 s round but
    # left the arms at 31 % test accuracy instead of 48 % (prod 72 %): too weak a comparison, so no profile
    # sets it.
    arm_steps: int = 0

    def for_arm(self, arm: str) -> TrainConfig:
        """This config for an adapter of ``arm``: the comparison arms ("active", "random") with
        ``arm_steps`` when set; prod and scratch members as they are."""
        if arm in ("active", "random") and self.arm_steps > 0:
            return replace(self, min_steps=self.arm_steps, max_steps=self.arm_steps)
        return self

    def for_labels(self, n_labels: int) -> TrainConfig:
        """This config for a project of ``n_labels`` labels: ``wide_top_layers`` replaces a smaller
        ``top_layers`` above WIDE_LABELS labels (one token per label leaves a many-way decision to a
        few adapted layers; a 6-label project keeps the cheaper round)."""
        if n_labels > WIDE_LABELS and 0 < self.top_layers < self.wide_top_layers:
            return replace(self, top_layers=self.wide_top_layers)
        return self

    def __post_init__(self) -> None:
        if (
            self.rank < 1
            or self.epochs < 1
            or self.batch_size < 1
            or self.max_steps < 0
            or self.lr <= 0
            or self.top_layers < 0
            or self.min_steps < 0
            or self.wide_top_layers < 0
            or self.arm_steps < 0
        ):
            raise ValueError(f"invalid training config: {self}")
        if self.loss not in ("full_vocab", "label_softmax"):
            raise ValueError(f"loss must be 'full_vocab' or 'label_softmax', not {self.loss!r}")
        if self.precision not in ("auto", "float32", "tf32"):
            raise ValueError(f"precision must be 'auto', 'float32' or 'tf32', not {self.precision!r}")
        if self.graph_step not in ("auto", "eager", "off"):
            raise ValueError(f"graph_step must be 'auto', 'eager' or 'off', not {self.graph_step!r}")


@dataclass(frozen=True)
class TrainedAdapter:
    path: str
    content_hash: str  # sha256 of the adapter weights + config (location fields excluded)
    steps: int
    seconds: float
    final_loss: float  # training loss of the last step
    losses: tuple[float, ...] = field(default=(), repr=False)  # one per step (mean over the batch)
    reused: bool = False  # True when out_dir already held the finished adapter: nothing was trained


@dataclass(frozen=True)
class _Example:
    input_ids: list[int]
    target_id: int
    target_index: int
    prefix_len: int = 0  # input_ids[:prefix_len] is the renderer's shared prefix

    @property
    def suffix(self) -> list[int]:
        return self.input_ids[self.prefix_len :]


# -- public API ---------------------------------------------------------------------------------


def total_steps(n_items: int, config: TrainConfig) -> int:
    """Optimiser steps a run over ``n_items`` labels takes (for progress bars before it starts)."""
    steps = max(config.epochs * math.ceil(n_items / config.batch_size), config.min_steps)
    return min(steps, config.max_steps) if config.max_steps > 0 else steps


def train_adapter(
    *,
    model_dir: str | Path,
    renderer: PromptRenderer,
    texts: Sequence[str],
    label_indices: Sequence[int],
    out_dir: str | Path,
    config: TrainConfig,
    warm_from: str | Path | None = None,
    progress: Progress | None = None,
    device: str | None = None,
) -> TrainedAdapter:
    """Train one LoRA adapter on (texts, label_indices) and publish it at ``out_dir``.

    Idempotent: a finished adapter already at ``out_dir`` is returned without training. Crash-safe:
    a run killed mid-way resumes from its last checkpoint. ``warm_from`` (a PEFT adapter directory)
    continues from those weights, with that adapter's LoRA shape; None trains from scratch.
    ``progress(done, total)`` is called with optimiser steps, starting at (resumed step, total)."""
    out = Path(out_dir)
    examples = _render(renderer, texts, label_indices)
    fingerprint = _fingerprint(examples, config, warm_from)
    finished = _finished(out, fingerprint)
    if finished is not None:
        return finished
    run = _Run(Path(model_dir), renderer, examples, out, config, warm_from, fingerprint, torch_device(device))
    try:
        return run.train(progress)
    finally:
        del run
        release_device_memory()


def label_probabilities(
    *,
    model_dir: str | Path,
    adapter_path: str | Path | None,
    renderer: PromptRenderer,
    texts: Sequence[str],
    batch_size: int = 8,
    device: str | None = None,
) -> np.ndarray:
    """Full-vocabulary probabilities of the C label tokens, float64[N, C] (not renormalised), with the
    same forward pass as training. A reference for tests and parity checks; rounds score through
    ``scoring.engines``."""
    import torch

    dev = torch_device(device)
    model = _load_base(Path(model_dir), dev)
    if adapter_path is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_path))
    model.eval()
    label_ids = torch.tensor(renderer.label_token_ids, device=dev)
    rows = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            prompts = [renderer.render_training(text, 0)[0] for text in chunk]
            logits = _last_logits(model, prompts, dev)
            rows.append(torch.softmax(logits.float(), dim=-1)[:, label_ids].double().cpu().numpy())
    return np.concatenate(rows) if rows else np.zeros((0, len(label_ids)))


def adapter_content_hash(path: str | Path) -> str:
    """sha256 over the adapter weights and its config (minus location fields)."""
    path = Path(path)
    digest = hashlib.sha256()
    digest.update((path / ADAPTER_WEIGHTS).read_bytes())
    adapter_config = json.loads((path / ADAPTER_CONFIG).read_text())
    for key in _LOCATION_FIELDS:
        adapter_config.pop(key, None)
    # PEFT writes set-valued fields (target_modules) in set order, which varies with PYTHONHASHSEED:
    # sort them so identical weights hash the same in every process.
    canonical = {
        k: sorted(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else v
        for k, v in adapter_config.items()
    }
    digest.update(json.dumps(canonical, sort_keys=True).encode())
    return digest.hexdigest()


# -- the training run -----------------------------------------------------------------------------


class _Run:
    """One call's training state: model, optimiser, step counter, checkpoints, publishing."""

    def __init__(
        self,
        model_dir: Path,
        renderer: PromptRenderer,
        examples: list[_Example],
        out: Path,
        config: TrainConfig,
        warm_from: str | Path | None,
        fingerprint: str,
        device: str,
    ) -> None:
        if not examples:
            raise ValueError("no labeled items to train on")
        self.model_dir, self.renderer, self.examples, self.out = model_dir, renderer, examples, out
        self.config, self.warm_from, self.fingerprint, self.device = config, warm_from, fingerprint, device
        self.ckpt_root = out.parent / f".{out.name}.ckpt"
        self.total = total_steps(len(examples), config)
        self.batches_per_epoch = math.ceil(len(examples) / config.batch_size)
        self.bf16 = config.precision == "auto" and device.startswith("cuda")
        self.prefix_ids = examples[0].input_ids[: examples[0].prefix_len]
        self._split: _Split | None = None  # set by train() when only the top layers are adapted
        self.phases: dict[str, float] = {}  # seconds per phase of this call (not a resumed run's earlier ones)

    def train(self, progress: Progress | None) -> TrainedAdapter:
        with _matmul_precision(self.device, tf32=self.config.precision == "tf32"):
            return self._train(progress)

    def _train(self, progress: Progress | None) -> TrainedAdapter:
        import torch

        started = time.monotonic()
        checkpoint = self._latest_checkpoint()
        model = self._model(checkpoint)
        model.train()
        self._phase("load", started)
        self._split = self._split_stack(model)
        self._phase("trunk", started)
        mode = self._fixed_mode()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = self._optimizer(params, graph=mode == "graph")
        step, losses, seconds = 0, [], 0.0
        if checkpoint is not None:
            optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location=self.device))
            if mode == "graph":  # the captured update reads the rate from a device tensor in place
                for group in optimizer.param_groups:
                    group["lr"] = torch.tensor(float(group["lr"]), device=self.device)
            state = json.loads((checkpoint / "state.json").read_text())
            step, losses, seconds = state["step"], state["losses"], state["seconds"]
        fixed = None if mode is None else self._fixed_step(params, optimizer, graph=mode == "graph")
        pending: list[Any] = []  # the fixed step's losses, still on the device (read in one sync)
        if progress is not None:
            progress(step, self.total)
        while step < self.total:
            if fixed is None:
                losses.append(self._step(model, optimizer, params, step))
            else:
                torch.manual_seed(self.config.seed * 1_000_003 + step)  # as _step: (seed, step) only
                pending.append(fixed.step(self._batch_indices(step), self._lr(step)))
            step += 1
            if self.config.checkpoint_every and step % self.config.checkpoint_every == 0 and step < self.total:
                losses, pending = losses + _host(pending), []
                self._checkpoint(model, optimizer, step, losses, seconds + time.monotonic() - started)
            if progress is not None:
                progress(step, self.total)
        losses = losses + _host(pending)
        self._phase("steps", started)
        mode = None if fixed is None else fixed.mode  # "eager" if a capture failed
        return self._publish(model, losses, seconds + time.monotonic() - started, mode)

    def _phase(self, name: str, started: float) -> None:
        """Seconds from ``started`` to the end of phase ``name`` (the device's work included), kept for
        training.json: where a run's time goes (loading, the frozen trunk, the steps)."""
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        self.phases[name] = round(time.monotonic() - started - sum(self.phases.values()), 3)

    def _optimizer(self, params: list[Any], *, graph: bool) -> Any:
        import torch

        if not graph:
            return torch.optim.AdamW(params, lr=self.config.lr, weight_decay=self.config.weight_decay)
        # capturable: the step count and the rate live on the device, so one captured update serves every step
        lr = torch.tensor(self.config.lr, device=self.device)
        return torch.optim.AdamW(params, lr=lr, weight_decay=self.config.weight_decay, capturable=True)

    def _fixed_mode(self) -> str | None:
        """ "graph" or "eager" when the run's steps go through training.graphstep, else None."""
        config = self.config
        if config.graph_step == "off" or self._split is None or not config.packed:
            return None
        widest = max(len(ex.suffix) for ex in self.examples)
        if config.batch_size * widest > config.micro_batch_tokens:  # the per-batch step would split it
            return None
        if config.graph_step == "eager":
            return "eager"
        if self.device.startswith("cuda") and config.dropout == 0 and not self.bf16:  # float32 or tf32
            return "graph"
        return None

    def _fixed_step(self, params: list[Any], optimizer: Any, *, graph: bool) -> Any:
        from training.graphstep import FixedStep

        split = self._split
        assert split is not None
        label_softmax = self.config.loss == "label_softmax"
        return FixedStep(
            stack=split.stack,
            prefix_hidden=split.prefix_hidden,
            hidden=split.hidden,
            targets=[ex.target_index if label_softmax else ex.target_id for ex in self.examples],
            label_ids=self.renderer.label_token_ids if label_softmax else None,
            batch_size=min(self.config.batch_size, len(self.examples)),
            suffix_tokens=max(
                sum(len(self.examples[i].suffix) for i in self._batch_indices(step)) for step in range(self.total)
            ),
            params=params,
            optimizer=optimizer,
            max_grad_norm=self.config.max_grad_norm,
            graph=graph,
        )

    def _model(self, checkpoint: Path | None) -> Any:
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model

        base = _load_base(self.model_dir, self.device, bf16=self.bf16)
        if self.config.gradient_checkpointing and not self.config.prefix_sharing:
            # non-reentrant: no need for inputs that require grad; RNG state is replayed for dropout
            # (transformers >= 5.2x renamed gradient_checkpointing_enable; the GPU image has 5.17)
            enable = getattr(base, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        resume_from = checkpoint / "adapter" if checkpoint is not None else self.warm_from
        if resume_from is not None:
            # autocast_adapter_dtype: LoRA weights in float32 over a bf16 base (updates of ~lr × grad
            # vanish in bf16 weights)
            return PeftModel.from_pretrained(base, str(resume_from), is_trainable=True, autocast_adapter_dtype=True)
        torch.manual_seed(self.config.seed)  # LoRA A init (B starts at zero)
        targets: str | list[str] = (
            self.config.target_modules
            if isinstance(self.config.target_modules, str)
            else list(self.config.target_modules)
        )
        layers: dict[str, Any] = {}
        n_layers = len(decoder_of(base).layers)
        if 0 < self.config.top_layers < n_layers:
            # PEFT takes a layer list only with named targets: "all-linear" = a layer's Linear modules
            targets = _linear_names(base) if targets == "all-linear" else targets
            layers = {"layers_to_transform": list(range(n_layers - self.config.top_layers, n_layers))}
        lora = LoraConfig(
            task_type="CAUSAL_LM",
            r=self.config.rank,
            lora_alpha=self.config.alpha,
            lora_dropout=self.config.dropout,
            target_modules=targets,
            bias="none",
            **layers,
        )
        return get_peft_model(base, lora, autocast_adapter_dtype=True)

    def _split_stack(self, model: Any) -> _Split | None:
        """With LoRA in the top layers only (and the prefix shared): the trunk's output for the
        prefix and every example, computed once for the whole run (the trunk is the frozen base)."""
        import torch

        start = model_start_layer(model)
        if (
            not self.config.prefix_sharing
            or not self.prefix_ids
            or start == 0
            or start >= len(decoder_of(model).layers)
        ):
            return None
        stack = SplitStack(model, start)
        hidden: list[Any] = []
        with torch.no_grad(), _autocast(self.device, self.bf16):
            prefix_hidden, trunk_kv = stack.trunk_prefix(self.prefix_ids)
            suffixes = [ex.suffix for ex in self.examples]
            for begin in range(0, len(suffixes), 64):
                hidden.extend(stack.trunk_suffixes(trunk_kv, len(self.prefix_ids), suffixes[begin : begin + 64]))
        del trunk_kv
        return _Split(stack, prefix_hidden, hidden)

    def _batch_indices(self, step: int) -> list[int]:
        epoch, index = divmod(step, self.batches_per_epoch)
        order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.examples))
        size = self.config.batch_size
        return [int(i) for i in order[index * size : (index + 1) * size]]

    def _lr(self, step: int) -> float:
        warmup = max(1, math.ceil(self.config.warmup_ratio * self.total))
        if step < warmup:
            return self.config.lr * (step + 1) / warmup
        return self.config.lr * max(0.0, (self.total - step) / max(1, self.total - warmup))

    def _step(self, model: Any, optimizer: Any, params: list[Any], step: int) -> float:
        import torch

        torch.manual_seed(self.config.seed * 1_000_003 + step)  # dropout masks depend on (seed, step) only
        indices = self._batch_indices(step)
        batch = [self.examples[i] for i in indices]
        optimizer.zero_grad(set_to_none=True)
        shared = self.config.prefix_sharing and len(self.prefix_ids) > 0
        prefix = len(self.prefix_ids) if shared else 0
        split = self._split
        losses = []
        done = 0  # examples of the batch in earlier chunks: chunks are consecutive slices of it
        for chunk in _micro_batches(batch, self.config.micro_batch_tokens, prefix=prefix):
            with _autocast(self.device, self.bf16):
                if split is not None:
                    rows = [split.hidden[i] for i in indices[done : done + len(chunk)]]
                    if self.config.packed:
                        last = split.stack.top_last_packed(split.prefix_hidden, rows)
                    else:
                        last = split.stack.top_last(split.stack.top_prefix(split.prefix_hidden), prefix, rows)
                    logits = split.stack.logits(last)
                elif shared:
                    logits = _last_logits_shared(model, self.prefix_ids, [ex.suffix for ex in chunk], self.device)
                else:
                    logits = _last_logits(model, [ex.input_ids for ex in chunk], self.device)
            loss = self._loss(logits, chunk) * (len(chunk) / len(batch))  # chunks sum to the batch mean
            loss.backward()
            losses.append(loss.detach())
            done += len(chunk)
        batch_loss = float(torch.stack(losses).sum())  # one host sync per step, not one per chunk
        for group in optimizer.param_groups:
            group["lr"] = self._lr(step)
        torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        optimizer.step()
        return batch_loss

    def _loss(self, logits: torch.Tensor, batch: list[_Example]) -> torch.Tensor:
        import torch
        import torch.nn.functional as F  # noqa: N812

        logits = logits.float()
        if self.config.loss == "label_softmax":
            label_ids = torch.tensor(self.renderer.label_token_ids, device=logits.device)
            targets = torch.tensor([ex.target_index for ex in batch], device=logits.device)
            return F.cross_entropy(logits[:, label_ids], targets)
        targets = torch.tensor([ex.target_id for ex in batch], device=logits.device)
        return F.cross_entropy(logits, targets)

    # -- checkpoints and publishing --------------------------------------------------------------

    def _latest_checkpoint(self) -> Path | None:
        if not self.ckpt_root.is_dir():
            return None
        for candidate in sorted(self.ckpt_root.glob("step-*"), reverse=True):
            state_file = candidate / "state.json"
            if state_file.is_file() and json.loads(state_file.read_text()).get("fingerprint") == self.fingerprint:
                return candidate
        shutil.rmtree(self.ckpt_root)  # checkpoints of other data or config: start over
        return None

    def _checkpoint(self, model: Any, optimizer: Any, step: int, losses: list[float], seconds: float) -> None:
        import torch

        self.ckpt_root.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt_root / f".tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp / "adapter"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        state = {"fingerprint": self.fingerprint, "step": step, "losses": losses, "seconds": seconds}
        (tmp / "state.json").write_text(json.dumps(state))
        final = self.ckpt_root / f"step-{step:06d}"
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for older in self.ckpt_root.glob("step-*"):
            if older != final:
                shutil.rmtree(older, ignore_errors=True)

    def _publish(self, model: Any, losses: list[float], seconds: float, mode: str | None) -> TrainedAdapter:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp))
        content_hash = adapter_content_hash(tmp)
        info = {
            "content_hash": content_hash,
            "fingerprint": self.fingerprint,
            "steps": len(losses),
            "seconds": round(seconds, 3),
            "final_loss": losses[-1],
            "losses": losses,
            "n_items": len(self.examples),
            "config": asdict(self.config),
            "warm_from": None if self.warm_from is None else str(self.warm_from),
            # layers run once per run instead of every step (0: the whole model ran every step)
            "trunk_layers": 0 if self._split is None else self._split.stack.start,
            # "graph": fixed-shape steps replayed from one CUDA graph, "eager": fixed shapes, None: per batch
            "fixed_step": mode,
            "phase_seconds": self.phases,
        }
        (tmp / TRAINING_INFO).write_text(json.dumps(info, indent=1))
        (tmp / DONE_MARKER).write_text(content_hash + "\n")
        try:
            tmp.rename(self.out)
        except OSError:  # another worker published first: keep theirs if it is the same training
            shutil.rmtree(tmp, ignore_errors=True)
            finished = _finished(self.out, self.fingerprint)
            if finished is None:
                raise
            return finished
        shutil.rmtree(self.ckpt_root, ignore_errors=True)
        return _from_info(self.out, info, reused=False)


# -- helpers ------------------------------------------------------------------------------------


@dataclass
class _Split:
    """A run's frozen-trunk outputs (see ``_Run._split_stack``)."""

    stack: Any  # scoring.toplayers.SplitStack
    prefix_hidden: Any  # [1, P, d]
    hidden: list[Any]  # per example, [suffix len, d]


def _host(losses: list[Any]) -> list[float]:
    """Device scalars as floats, in one transfer."""
    if not losses:
        return []
    import torch

    return [float(x) for x in torch.stack(losses).tolist()]


def _linear_names(model: Any) -> list[str]:
    """Names of the Linear modules inside a decoder layer (what "all-linear" means there)."""
    import torch

    layer = decoder_of(model).layers[0]
    return sorted({name.rsplit(".", 1)[-1] for name, mod in layer.named_modules() if isinstance(mod, torch.nn.Linear)})


def _render(renderer: PromptRenderer, texts: Sequence[str], label_indices: Sequence[int]) -> list[_Example]:
    if len(texts) != len(label_indices):
        raise ValueError(f"{len(texts)} texts but {len(label_indices)} labels")
    n_labels = len(renderer.label_token_ids)
    examples = []
    for text, label in zip(texts, label_indices, strict=True):
        if not 0 <= int(label) < n_labels:
            raise ValueError(f"label index {label} outside 0..{n_labels - 1}")
        input_ids, target_id = renderer.render_training(text, int(label))
        examples.append(_Example(list(input_ids), int(target_id), int(label), len(renderer.prefix_ids)))
    return examples


def _fingerprint(examples: list[_Example], config: TrainConfig, warm_from: str | Path | None) -> str:
    """What the run trains: prompts, targets, config and the warm-start weights (not their path)."""
    digest = hashlib.sha256()
    settings = asdict(config)
    settings.pop("checkpoint_every")  # changes when state is saved, not what is trained
    settings.pop("wide_top_layers")  # resolved into top_layers by for_labels before a run starts
    digest.update(json.dumps(settings, sort_keys=True).encode())
    digest.update(adapter_content_hash(warm_from).encode() if warm_from is not None else b"scratch")
    for ex in examples:
        digest.update(json.dumps([ex.input_ids, ex.target_id]).encode())
    return digest.hexdigest()


def _finished(out: Path, fingerprint: str) -> TrainedAdapter | None:
    if not out.exists():
        return None
    if not (out / DONE_MARKER).is_file():
        raise TrainingStateError(f"{out} exists but holds no finished adapter (no {DONE_MARKER} marker)")
    info = json.loads((out / TRAINING_INFO).read_text())
    if info.get("fingerprint") != fingerprint:
        raise TrainingStateError(f"{out} holds an adapter trained on other data, config or warm start")
    return _from_info(out, info, reused=True)


def _from_info(out: Path, info: dict[str, Any], *, reused: bool) -> TrainedAdapter:
    return TrainedAdapter(
        path=str(out),
        content_hash=info["content_hash"],
        steps=info["steps"],
        seconds=info["seconds"],
        final_loss=info["final_loss"],
        losses=tuple(info["losses"]),
        reused=reused,
    )


def _micro_batches(batch: list[_Example], max_tokens: int, *, prefix: int = 0) -> list[list[_Example]]:
    """Consecutive chunks whose rows × longest prompt stay within ``max_tokens`` (at least one row).
    ``prefix`` > 0: the rows share that many prefix tokens, run once, so a row costs its suffix."""
    chunks: list[list[_Example]] = []
    current: list[_Example] = []
    for ex in batch:
        width = max([len(ex.input_ids)] + [len(c.input_ids) for c in current]) - prefix
        if current and (len(current) + 1) * width > max_tokens:
            chunks.append(current)
            current = []
        current.append(ex)
    return [*chunks, current] if current else chunks


_BASE_CACHE: dict[tuple[str, str, bool], Any] = {}


def _load_base(model_dir: Path, device: str, *, bf16: bool = False) -> Any:
    """A fresh copy of the base model. The last one loaded stays in memory, untouched, so a worker
    training K members a round copies it on the device (milliseconds) instead of reading and
    moving the weights again (a second or two each, most of a small round's fixed cost)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    key = (str(model_dir), device, bf16)
    if key not in _BASE_CACHE:
        # float32 by default: CPU bf16 matmuls are slow. bf16 (GPU) holds only the frozen base
        # weights in bf16; the LoRA weights stay float32 (autocast_adapter_dtype), so small updates survive.
        dtype = torch.bfloat16 if bf16 else torch.float32
        model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
        _BASE_CACHE.clear()  # one base at a time: a process trains one project's model
        _BASE_CACHE[key] = model.to(device).eval()
    return copy.deepcopy(_BASE_CACHE[key])


def release_device_memory() -> None:
    """Hand the CUDA allocator's cached blocks back, so other jobs on the GPU can use them."""
    import gc
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


@contextlib.contextmanager
def _matmul_precision(device: str, *, tf32: bool) -> Iterator[None]:
    """TensorFloat-32 float32 matmuls for the block on a CUDA device (TrainConfig.precision "tf32"),
    the process's setting put back after it; anything else runs the block unchanged."""
    import torch

    if not (tf32 and device.startswith("cuda")):
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _autocast(device: str, bf16: bool) -> Any:
    import torch

    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=torch.bfloat16)


def _last_logits_shared(model: Any, prefix_ids: list[int], suffixes: Sequence[list[int]], device: str) -> torch.Tensor:
    """Logits [B, V] at each row's last token of ``prefix_ids + suffixes[row]``, the prefix run once.

    The prefix's keys/values (computed with gradients, through the LoRA-adapted layers) are
    expanded over the B rows; ``expand`` is a view whose backward sums the rows' gradients, so the
    result and its gradient equal those of B full prompts. Suffixes are right-padded; positions
    continue from the prefix, exactly as the hf engine scores them."""
    import torch
    from transformers import DynamicCache

    decoder = decoder_of(model)
    prefix = torch.tensor([prefix_ids], device=device)
    out = decoder(input_ids=prefix, use_cache=True)
    cache = getattr(out, "cache", None)  # transformers >= 5.2x; `past_key_values` before
    cache = cache if cache is not None else out.past_key_values
    n_rows, width, past = len(suffixes), max(len(s) for s in suffixes), len(prefix_ids)
    ids = torch.zeros((n_rows, width), dtype=torch.long)
    mask = torch.zeros((n_rows, past + width), dtype=torch.long)
    mask[:, :past] = 1
    for row, suffix in enumerate(suffixes):
        ids[row, : len(suffix)] = torch.tensor(suffix)
        mask[row, past : past + len(suffix)] = 1
    expanded = DynamicCache()
    for layer_idx, layer in enumerate(cache.layers):
        expanded.update(layer.keys.expand(n_rows, -1, -1, -1), layer.values.expand(n_rows, -1, -1, -1), layer_idx)
    kw = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
    hidden = decoder(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=(past + torch.arange(width)).expand(n_rows, width).to(device),
        use_cache=True,
        **{kw: expanded},
    ).last_hidden_state
    lengths = torch.tensor([len(s) for s in suffixes], device=device)
    last = hidden[torch.arange(n_rows, device=device), lengths - 1]
    return output_layer_of(model)(last)


def _last_logits(model: Any, prompts: Sequence[list[int]], device: str) -> torch.Tensor:
    """Logits [B, V] at each prompt's last token. Left-padded so that position is the last column;
    position ids count real tokens only, so padding changes nothing for a row."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)  # pad id irrelevant: masked out
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        logits_to_keep=1,
        use_cache=False,
    )
    return out.logits[:, -1, :]
