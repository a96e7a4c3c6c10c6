"""A training step of fixed shapes for top-layer adapters, captured once as a CUDA graph and replayed.

Why: a step of SmolLM2's top 8 layers is bound by dispatching its ~1,550 small operators from
Python and autograd (~57 µs each on the H200: 88 ms a step, bench/RESULTS.md session 6), not by
the GPU's arithmetic. A CUDA graph records the step's kernels once — forward, backward, gradient
clipping and the AdamW update — and replays them with one launch.

A graph replays fixed shapes at fixed addresses, so every step of a run is made the same shape:
- the packed sequence (the shared prefix + the batch's suffixes, ``SplitStack.top_last_packed``)
  is padded to the run's widest: the prefix plus the most suffix tokens any of the run's batches
  holds (all steps', whatever step a resumed run starts from, so a resumed run pads alike).
  Padding tokens form a block of their own (they attend to each other only, nobody attends to
  them), so they change no real token's output and receive no gradient;
- a short batch (the last of an epoch) is padded to ``batch_size`` rows whose loss weight is 0;
- the loss is the weighted sum of per-row cross-entropies, the weights 1 / (real rows): the same
  mean as the eager step's;
- the learning rate is a tensor the optimiser reads in place (AdamW ``capturable=True``).

Each step then only copies its inputs into the static buffers (a few small host-to-device copies)
and replays. Before capture, two warm-up steps run on a side stream (lazy initialisation of the
optimiser state, cuBLAS workspaces, autograd's streams, as torch.cuda.graph's documentation asks)
from a snapshot of the LoRA weights and optimiser state that is restored afterwards, so the
warm-up leaves no trace in the adapter.

The GPU profile's default (``TrainConfig.graph_step = "auto"``, annotate/loopconfig.py): on the H200
the captured step gives the eager step's losses to 1e-5 (session 10); a 500-label K=2 round took
7.50 s (8 layers) and 10.85 s (16) with it, 14.96 s with the per-batch step at 16 layers, and 6.21 /
9.60 s with TF32 matmuls (bench/RESULTS.md, session 11 has the table). Every capture
of a process runs on one stream (``_capture_stream``, why below); session 10's one stream per run
kept ~100 MB of GPU memory per run.

``FixedStep(graph=False)`` runs the same fixed-shape step eagerly on any device: the CPU tests
compare it with the per-batch step (tests/integration/test_toplayers.py); on the GPU bench/round_time.py
compares the captured step with the eager one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scoring.toplayers import packed_layout

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
WARMUP_STEPS = 2  # torch.cuda.graph's whole-network example warms up on a side stream before capture


class FixedStep:
    """The packed top-layer step at fixed shapes for one run (one model, one optimiser)."""

    def __init__(
        self,
        *,
        stack: Any,  # scoring.toplayers.SplitStack
        prefix_hidden: Any,  # [1, P, d]
        hidden: Sequence[Any],  # per example [suffix len, d]
        targets: Sequence[int],  # per example: the class the loss pushes towards (vocab id or label index)
        label_ids: Sequence[int] | None,  # restrict the softmax to these vocab ids (label_softmax), or None
        batch_size: int,
        suffix_tokens: int,  # the most suffix tokens any batch of the run holds: fixes the sequence width
        params: list[Any],
        optimizer: Any,
        max_grad_norm: float,
        graph: bool,
    ) -> None:
        import torch

        self.stack, self.params, self.optimizer = stack, params, optimizer
        self.max_grad_norm, self.batch_size = max_grad_norm, batch_size
        self.prefix_hidden, self.hidden = prefix_hidden, list(hidden)
        self.n_prefix = int(prefix_hidden.shape[1])
        device = prefix_hidden.device
        self.width = self.n_prefix + suffix_tokens
        self.all_targets = torch.tensor(list(targets), dtype=torch.long)
        self.label_ids = None if label_ids is None else torch.tensor(list(label_ids), device=device)
        d = int(prefix_hidden.shape[-1])
        self.x = prefix_hidden.new_zeros((1, self.width, d))
        self.block = torch.zeros(self.width, dtype=torch.long, device=device)
        self.positions = torch.zeros((1, self.width), dtype=torch.long, device=device)
        self.last = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.targets = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.weights = torch.zeros(batch_size, dtype=torch.float32, device=device)
        self.loss: torch.Tensor | None = None
        self.graph: Any = None
        self.use_graph = graph

    # -- inputs ----------------------------------------------------------------------------------

    def _fill(self, indices: Sequence[int], lr: float) -> None:
        """Copy one batch into the static buffers (host-built index vectors, one copy each)."""
        import torch

        if not 0 < len(indices) <= self.batch_size:
            raise ValueError(f"a batch of {len(indices)} rows for a step of {self.batch_size}")
        lengths = [int(self.hidden[i].shape[0]) for i in indices]
        n_real = self.n_prefix + sum(lengths)
        n_pad = self.width - n_real
        if n_pad < 0:
            raise ValueError(f"a batch of {n_real} tokens for a step {self.width} wide")
        rows = [self.hidden[i] for i in indices]
        with torch.no_grad():
            self.x[0, : self.n_prefix].copy_(self.prefix_hidden[0])
            self.x[0, self.n_prefix : n_real].copy_(torch.cat(rows, dim=0))
            if n_pad:
                self.x[0, n_real:].zero_()
        block, positions, row_last = packed_layout(self.n_prefix, lengths, self.width)
        n_rows = len(indices)
        last = torch.zeros(self.batch_size, dtype=torch.long)
        last[:n_rows] = row_last
        targets = torch.zeros(self.batch_size, dtype=torch.long)
        targets[:n_rows] = self.all_targets[list(indices)]
        weights = torch.zeros(self.batch_size, dtype=torch.float32)
        weights[:n_rows] = 1.0 / n_rows
        for buffer, value in (
            (self.block, block),
            (self.positions[0], positions),
            (self.last, last),
            (self.targets, targets),
            (self.weights, weights),
        ):
            buffer.copy_(value)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    # -- the step --------------------------------------------------------------------------------

    def _compute(self) -> torch.Tensor:
        """Forward, backward, clip, AdamW update: every operation on the static buffers."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        last = self.stack.top_blocks(self.x, self.block, self.positions, self.last)
        logits = self.stack.logits(last).float()
        if self.label_ids is not None:
            logits = torch.index_select(logits, 1, self.label_ids)
        loss = (F.cross_entropy(logits, self.targets, reduction="none") * self.weights).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        return loss.detach()

    def step(self, indices: Sequence[int], lr: float) -> torch.Tensor:
        """One optimiser step on the examples at ``indices``; the batch loss as a 0-d tensor (no host
        sync: the caller reads the losses when it needs them)."""
        self._fill(indices, lr)
        if self.use_graph and (self.graph is not None or self._capture()):
            self.graph.replay()
            assert self.loss is not None
            return self.loss.clone()
        self.optimizer.zero_grad(set_to_none=True)
        return self._compute()

    @property
    def mode(self) -> str:
        """ "graph" once captured (or until a capture is tried), "eager" otherwise."""
        return "graph" if self.use_graph else "eager"

    def _capture(self) -> bool:
        """Capture the step; on failure put the weights back, log why and run eagerly from then on
        (the same step, per-step dispatch): a graph is a speed-up, never a reason for a round to fail."""
        import torch

        snapshot = _snapshot(self.params, self.optimizer)
        try:
            self._record()
        except RuntimeError:
            log.exception("CUDA graph capture of the training step failed; stepping eagerly")
            torch.cuda.synchronize()
            _restore(snapshot, self.params, self.optimizer)
            self.use_graph, self.graph, self.loss = False, None, None
            return False
        _restore(snapshot, self.params, self.optimizer)
        return True

    def _record(self) -> None:
        import torch

        stream = _capture_stream(self.x.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):
                self.optimizer.zero_grad(set_to_none=True)
                self._compute()
        torch.cuda.current_stream().wait_stream(stream)
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward allocates (and then refills) .grad
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            self.loss = self._compute()
        self.graph = graph


# One warm-up/capture stream per device for the process. cuBLAS keeps a workspace per (handle,
# stream), allocated from the caching allocator and never freed while the process lives, so a new
# stream per run left one run's workspaces behind every run: on the H200 a simulation job's peak
# reserved memory grew ~200 MiB a round to 4.1 GiB at 1,000 labels (session 10); with one stream it
# levels off at 2.2-3.0 GiB (8 layers) and 3.8 GiB (CLINC150, 16 layers; session 11). PyTorch's
# maintainers give the same workaround (pytorch/pytorch#99196). Each capture still takes a private
# memory pool, freed with its graph at the end of the run: sharing one pool handle across runs
# tripped the allocator ("use_count > 0" assert in c10's CUDACachingAllocator) on every capture after
# the first run had released it, and the step ran eagerly.
_STREAMS: dict[str, Any] = {}


def _capture_stream(device: Any) -> Any:
    """The process's warm-up and capture stream for ``device``."""
    import torch

    key = str(device)
    if key not in _STREAMS:
        _STREAMS[key] = torch.cuda.Stream(device=device)
    return _STREAMS[key]


def _snapshot(params: list[Any], optimizer: Any) -> tuple[list[Any], dict[int, dict[str, Any]] | None]:
    """The LoRA weights and (if the optimiser has stepped before: a resumed or warm run) its state."""
    weights = [p.detach().clone() for p in params]
    if not optimizer.state:
        return weights, None
    state = {
        id(p): {k: v.clone() if hasattr(v, "clone") else v for k, v in optimizer.state[p].items()}
        for p in params
        if p in optimizer.state
    }
    return weights, state


def _restore(snapshot: tuple[list[Any], dict[int, dict[str, Any]] | None], params: list[Any], optimizer: Any) -> None:
    """Put weights and optimiser state back in place (same tensors: the graph holds their addresses).
    A fresh optimiser's state, created by the warm-up, goes back to zero: moments 0, step 0."""
    import torch

    weights, state = snapshot
    with torch.no_grad():
        for p, saved in zip(params, weights, strict=True):
            p.copy_(saved)
        for p in params:
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor):
                    continue
                if state is None:
                    value.zero_()
                else:
                    value.copy_(state[id(p)][key])
