"""transformers + PEFT engine: CPU or GPU, batched by length, shared-prefix KV cache.

The prefix's KV cache is computed once per (adapter version, prompt) and expanded over every batch,
so the model only runs the item tokens. Suffixes are right-padded; the logits are taken at each
row's last real token, from a log-softmax over the whole vocabulary (label mass = Σ exp over the
label tokens). ``prefix_cache=False`` runs the plain full prompt instead (the parity reference).

An adapter that adapts only the top layers (``TrainConfig.top_layers``) is scored through
``scoring.toplayers``: the frozen trunk's output for the prefix and for each item is computed once
and kept (LRU, ``trunk_cache_bytes``), so a round's K adapters, and the next rounds' adapters on
the same test set, stop set and candidates, run only the top layers.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scoring.engines.base import AdapterRef, ScoreResult, distribution_from_logprobs, validate_adapters

if TYPE_CHECKING:
    from scoring.prompts import PromptRenderer

KV = list[tuple[Any, Any]]  # per layer (keys, values), each [1, kv_heads, P, head_dim]


def packed_choice(value: Any, *, on_gpu: bool) -> bool:
    """Engine option packed_scoring: None = on a GPU; a bool, or 0 / 1 (a number from a shell's JSON
    edit), as given; anything else (a string such as "false") is refused rather than read as true."""
    if value is None:
        return on_gpu
    if isinstance(value, bool) or (isinstance(value, int | float) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"engine option packed_scoring must be true, false, 0 or 1 (or absent), got {value!r}")


class HFEngine:
    def __init__(
        self,
        model_dir: str,
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int | None = None,
        max_batch_tokens: int | None = None,
        prefix_cache: bool = True,
        max_cached_prefixes: int = 16,
        max_loaded_adapters: int = 8,
        trunk_cache_bytes: int | None = None,
        packed_scoring: bool | float | None = None,
        packed_tokens: int = 4096,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from scoring.device import torch_device

        self.device = torch_device(device)
        on_gpu = self.device.startswith("cuda")
        # float32 on CPU (bf16 matmuls are slow there and the parity test wants 1e-4); bf16 on GPU like vLLM.
        torch_dtype = getattr(torch, dtype) if dtype != "auto" else (torch.bfloat16 if on_gpu else torch.float32)
        loaded: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype)
        self.base: Any = loaded.to(self.device).eval()
        self.model: Any = self.base  # becomes a PeftModel (wrapping self.base in place) once an adapter loads
        # Rows per forward, bounded again by max_batch_tokens: 256 on a GPU (a 135M model's forward
        # over 64 short suffixes is launch-bound), 64 on the CPU.
        self.batch_size = batch_size or (256 if on_gpu else 64)
        # Rows × (prefix + padded suffix) per forward: the expanded prefix KV dominates activation memory.
        # 65,536 on a GPU: every row carries its own copy of the prefix's keys/values inside the
        # forward (rows × prefix × layers), so a long prefix at 256 rows peaked at 6 GiB for no gain.
        self.max_batch_tokens = max_batch_tokens or (65_536 if on_gpu else 16_384)
        self.prefix_cache = prefix_cache
        # Top-layer adapters (the trunk cache path): each batch is one packed sequence, the prefix
        # followed by the suffixes of as many items as hold ``packed_tokens`` suffix tokens, under a
        # block mask (SplitStack.trunk_packed / top_last_packed, the training step's layout), instead
        # of rows × (prefix + padded suffix) with the prefix's keys/values expanded per row, which
        # max_batch_tokens caps at ~70 rows for a 900-token prefix. The same scores (the CPU tests
        # compare them) in a third of the forwards; the prefix is recomputed once per batch. On by
        # default on a GPU (engine option "packed_scoring"; None: on a GPU): on the H200 it scored 2,000
        # candidates × 2 adapters at 16 layers in 1.3-2.0 s where the per-row path took 2.5-4.4 s
        # (bench/raw/2026-12-02/round-time-ps-w1-128e624*.json). Off on the CPU, where it was not measured.
        self.packed_scoring = packed_choice(packed_scoring, on_gpu=on_gpu)
        if packed_tokens < 1:
            raise ValueError(f"packed_tokens must be positive, got {packed_tokens}")
        self.packed_tokens = packed_tokens
        self.max_cached_prefixes = max_cached_prefixes
        self._kv: OrderedDict[tuple[str, str], KV] = OrderedDict()
        # Adapters kept loaded (least recently used dropped): a long simulation loads K new ones every
        # round, and PEFT keeps every adapter it was given (~20 MB each for SmolLM2 at rank 8).
        self.max_loaded_adapters = max_loaded_adapters
        self._loaded: OrderedDict[str, str] = OrderedDict()  # PEFT name (one per adapter id) → AdapterRef.name
        # Trunk outputs kept for top-layer adapters: (prompt hash, start layer, suffix ids) → [len, d].
        # 1 GiB on a GPU (~45,000 items of 20 tokens in bf16: a test set, a stop set and every
        # candidate of a long simulation), 256 MiB on the CPU.
        self.trunk_cache_bytes = (
            trunk_cache_bytes if trunk_cache_bytes is not None else (1 << 30 if on_gpu else 1 << 28)
        )
        self._trunk: OrderedDict[tuple[str, int, tuple[int, ...]], Any] = OrderedDict()
        self._trunk_bytes = 0
        self._trunk_prefix: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._top_kv: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._starts: dict[str, int] = {}
        decoder = self.base.get_decoder()
        self._cache_kw = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
        self.last_timings: dict[str, float] = {}

    # -- adapters -------------------------------------------------------------------------------

    @staticmethod
    def _peft_name(adapter: AdapterRef) -> str:
        return f"a{adapter.int_id}"  # ids are unique per adapter version; names may hold characters PEFT rejects

    def _load(self, adapter: AdapterRef) -> None:
        from peft import PeftModel

        name = self._peft_name(adapter)
        if self._loaded.get(name) == adapter.name:
            self._loaded.move_to_end(name)
            return
        # New, or the same id under another name (another version): PEFT loads over that name.
        if isinstance(self.model, PeftModel):
            self.model.load_adapter(adapter.path, adapter_name=name, is_trainable=False)
        else:
            self.model = PeftModel.from_pretrained(self.base, adapter.path, adapter_name=name, is_trainable=False)
        self.model.eval()
        self._loaded[name] = adapter.name
        self._loaded.move_to_end(name)
        while len(self._loaded) > self.max_loaded_adapters:
            self._unload(next(iter(self._loaded)), keep=name)

    def _unload(self, peft_name: str, *, keep: str) -> None:
        """Drop one adapter and its cached prefixes; ``keep`` (the one just loaded) becomes active."""
        old_name = self._loaded.pop(peft_name)
        self.model.set_adapter(keep)
        self.model.delete_adapter(peft_name)
        for cache_key in [k for k in self._kv if k[0] == f"{old_name}#{peft_name[1:]}"]:
            del self._kv[cache_key]
        for cache_key in [k for k in self._top_kv if k[0] == f"{old_name}#{peft_name[1:]}"]:
            del self._top_kv[cache_key]

    @contextlib.contextmanager
    def _active(self, adapter: AdapterRef | None) -> Iterator[None]:
        if adapter is None:
            ctx = self.model.disable_adapter() if self.model is not self.base else contextlib.nullcontext()
            with ctx:
                yield
            return
        self._load(adapter)
        self.model.set_adapter(self._peft_name(adapter))
        yield

    # -- forward --------------------------------------------------------------------------------

    def _prefix_kv(self, renderer: PromptRenderer, key: str) -> KV:
        import torch

        cache_key = (key, renderer.prompt_hash)
        if cache_key not in self._kv:
            ids = torch.tensor([renderer.prefix_ids], device=self.device)
            out = self.base.get_decoder()(input_ids=ids, use_cache=True)
            cache = getattr(out, "cache", None)  # transformers >= 5.2x; `past_key_values` before
            cache = cache if cache is not None else out.past_key_values
            self._kv[cache_key] = [(layer.keys, layer.values) for layer in cache.layers]
            while len(self._kv) > self.max_cached_prefixes:
                self._kv.popitem(last=False)
        self._kv.move_to_end(cache_key)
        return self._kv[cache_key]

    def _forward_last(self, rows: Sequence[list[int]], kv: KV | None, label_ids: Any) -> np.ndarray:
        """Label log-probs at each row's last real token. ``kv`` = the prefix cache (rows are suffixes)
        or None (rows are full prompts)."""
        import torch
        from transformers import DynamicCache

        n_rows, width = len(rows), max(len(r) for r in rows)
        past = 0 if kv is None else int(kv[0][0].shape[-2])
        ids = torch.zeros((n_rows, width), dtype=torch.long)
        mask = torch.zeros((n_rows, past + width), dtype=torch.long)
        mask[:, :past] = 1
        lengths = torch.tensor([len(r) for r in rows])
        for j, row in enumerate(rows):
            ids[j, : len(row)] = torch.tensor(row)
            mask[j, past : past + len(row)] = 1
        positions = (past + torch.arange(width)).expand(n_rows, width)
        kwargs: dict[str, Any] = {}
        if kv is not None:
            cache = DynamicCache()  # filled through update(): stable across transformers 5.x releases
            for layer_idx, (k, v) in enumerate(kv):
                cache.update(k.expand(n_rows, -1, -1, -1), v.expand(n_rows, -1, -1, -1), layer_idx)
            kwargs = {self._cache_kw: cache, "use_cache": True}
        hidden = self.base.get_decoder()(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            **kwargs,
        ).last_hidden_state
        last = hidden[torch.arange(n_rows, device=self.device), (lengths - 1).to(self.device)]
        logits = self.base.get_output_embeddings()(last).float()
        return torch.log_softmax(logits, dim=-1)[:, label_ids].cpu().numpy()

    def _batches(self, lengths: np.ndarray, past: int) -> Iterator[np.ndarray]:
        """Indices grouped by similar length (sorted), within the row and token budgets."""
        order = np.argsort(lengths, kind="stable")
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order)
                and end - start < self.batch_size
                and (end - start + 1) * (past + int(lengths[order[end]])) <= self.max_batch_tokens
            ):
                end += 1
            yield order[start:end]
            start = end

    def _label_logprobs(
        self, renderer: PromptRenderer, suffix_ids: list[list[int]], key: str
    ) -> tuple[np.ndarray, int]:
        import torch

        label_ids = torch.tensor(renderer.label_token_ids, device=self.device)
        kv = self._prefix_kv(renderer, key) if self.prefix_cache else None
        rows = suffix_ids if kv is not None else [renderer.prefix_ids + s for s in suffix_ids]
        lengths = np.array([len(r) for r in rows])
        out = np.empty((len(rows), len(renderer.label_token_ids)), dtype=np.float32)
        for idx in self._batches(lengths, len(renderer.prefix_ids) if kv is not None else 0):
            out[idx] = self._forward_last([rows[i] for i in idx], kv, label_ids)
        return out, int(lengths.sum())

    # -- top-layer adapters ---------------------------------------------------------------------

    def _start_layer(self, adapter: AdapterRef | None) -> int:
        """The first layer ``adapter`` adapts; 0 (the whole-model path) for the base model."""
        from scoring.toplayers import adapter_start_layer

        if adapter is None:
            return 0
        if adapter.path not in self._starts:
            start = adapter_start_layer(adapter.path)
            self._starts[adapter.path] = start if start < len(self.base.get_decoder().layers) else 0
        return self._starts[adapter.path]

    def _trunk_states(self, stack: Any, renderer: PromptRenderer, suffix_ids: list[list[int]]) -> tuple[Any, list[Any]]:
        """The trunk's output for the prefix and for every suffix, from the cache where present;
        what is missing is computed with every adapter off (the trunk is the base model)."""
        start, past = stack.start, len(renderer.prefix_ids)
        pkey = (renderer.prompt_hash, start)
        keys = [(renderer.prompt_hash, start, tuple(s)) for s in suffix_ids]
        states: list[Any] = [None] * len(keys)
        for j, key in enumerate(keys):
            if key in self._trunk:
                self._trunk.move_to_end(key)
                states[j] = self._trunk[key]
        missing = [j for j, state in enumerate(states) if state is None]
        if pkey not in self._trunk_prefix or missing:
            with self._active(None):
                if pkey not in self._trunk_prefix:
                    self._trunk_prefix[pkey] = stack.trunk_prefix(renderer.prefix_ids)
                    while len(self._trunk_prefix) > self.max_cached_prefixes:
                        del self._trunk_prefix[next(iter(self._trunk_prefix))]
                trunk_kv = self._trunk_prefix[pkey][1]
                lengths = np.array([len(suffix_ids[j]) for j in missing])
                if self.packed_scoring:
                    batches = self._packed_batches(lengths)
                    run = functools.partial(stack.trunk_packed, renderer.prefix_ids)
                else:
                    batches = self._batches(lengths, past)
                    run = functools.partial(stack.trunk_suffixes, trunk_kv, past)
                for idx in batches:
                    rows = [missing[i] for i in idx]
                    computed = run([suffix_ids[j] for j in rows])
                    for j, state in zip(rows, computed, strict=True):
                        states[j] = state.clone()  # its own storage, not a view of the batch
                        self._remember(keys[j], states[j])
        return self._trunk_prefix[pkey][0], states

    def _remember(self, key: tuple[str, int, tuple[int, ...]], state: Any) -> None:
        if key in self._trunk:
            return
        self._trunk[key] = state
        self._trunk_bytes += state.numel() * state.element_size()
        while self._trunk_bytes > self.trunk_cache_bytes and len(self._trunk) > 1:
            _, old = self._trunk.popitem(last=False)
            self._trunk_bytes -= old.numel() * old.element_size()

    def _label_logprobs_split(
        self, renderer: PromptRenderer, suffix_ids: list[list[int]], key: str, start: int
    ) -> tuple[np.ndarray, int]:
        """Label log-probs through the trunk cache and the top layers (the active adapter)."""
        import torch

        from scoring.toplayers import SplitStack

        stack = SplitStack(self.model, start)
        label_ids = torch.tensor(renderer.label_token_ids, device=self.device)
        past = len(renderer.prefix_ids)
        prefix_hidden, states = self._trunk_states(stack, renderer, suffix_ids)
        lengths = np.array([len(s) for s in suffix_ids])
        out = np.empty((len(suffix_ids), len(renderer.label_token_ids)), dtype=np.float32)
        if self.packed_scoring:
            for idx in self._packed_batches(lengths):
                last = stack.top_last_packed(prefix_hidden, [states[i] for i in idx])
                out[idx] = self._label_log_softmax(stack, last, label_ids)
            return out, int(lengths.sum())
        top_key = (key, renderer.prompt_hash)
        if top_key not in self._top_kv:
            self._top_kv[top_key] = stack.top_prefix(prefix_hidden)
            while len(self._top_kv) > self.max_cached_prefixes:
                self._top_kv.popitem(last=False)
        top_kv = self._top_kv[top_key]
        for idx in self._batches(lengths, past):
            last = stack.top_last(top_kv, past, [states[i] for i in idx])
            out[idx] = self._label_log_softmax(stack, last, label_ids)
        return out, int(lengths.sum())

    @staticmethod
    def _label_log_softmax(stack: Any, last: Any, label_ids: Any) -> np.ndarray:
        import torch

        logits = stack.logits(last).float()
        return torch.log_softmax(logits, dim=-1)[:, label_ids].cpu().numpy()

    def _packed_batches(self, lengths: np.ndarray) -> Iterator[np.ndarray]:
        """Consecutive indices holding at most ``packed_tokens`` suffix tokens (at least one item)."""
        start = 0
        while start < len(lengths):
            end, tokens = start + 1, int(lengths[start])
            while end < len(lengths) and tokens + int(lengths[end]) <= self.packed_tokens:
                tokens += int(lengths[end])
                end += 1
            yield np.arange(start, end)
            start = end

    def score(self, renderer: PromptRenderer, texts: Sequence[str], adapters: Sequence[AdapterRef]) -> ScoreResult:
        import torch

        validate_adapters(adapters)
        t0 = time.perf_counter()
        batch = renderer.render(texts)
        t1 = time.perf_counter()
        n_labels = len(renderer.label_token_ids)
        logp = np.empty((max(1, len(adapters)), len(texts), n_labels), dtype=np.float32)
        computed = 0
        with torch.inference_mode():
            for k, adapter in enumerate(adapters or [None]):
                key = "base" if adapter is None else f"{adapter.name}#{adapter.int_id}"
                start = self._start_layer(adapter) if self.prefix_cache else 0
                with self._active(adapter):
                    if texts and start > 0:
                        logp[k], tokens = self._label_logprobs_split(renderer, batch.suffix_ids, key, start)
                        computed += tokens
                    elif texts:
                        logp[k], tokens = self._label_logprobs(renderer, batch.suffix_ids, key)
                        computed += tokens
        p, mass = distribution_from_logprobs(logp)
        t2 = time.perf_counter()
        self.last_timings = {"render_s": t1 - t0, "forward_s": t2 - t1}
        prompt_tokens = sum(len(renderer.prefix_ids) + len(s) for s in batch.suffix_ids)
        return ScoreResult(p=p, mass=mass, truncated=batch.truncated, tokens=prompt_tokens, computed_tokens=computed)
