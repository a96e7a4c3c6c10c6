"""Split forward for adapters that adapt only the top layers: the frozen trunk runs once, the top
runs every step.

An adapter trained with ``TrainConfig.top_layers = n`` holds LoRA weights in the last n decoder
layers only. Everything below them (the embeddings and the first L − n layers, "the trunk") is the
base model, identical for every adapter and every training step, so the hidden states that enter
layer L − n are a fixed function of the prompt. They are computed once (``trunk``): for the shared
prefix, and for each item's suffix attending to the prefix. Training steps, scoring and evaluation
then run only the top n layers on those states (``top_prefix`` + ``top_last``): exact, the same
logits and gradients as the whole model on the full prompt
(``tests/integration/test_toplayers.py``), at n / L of the layers' kernels — the cost that bounds a
135M model's step on a GPU (``bench/RESULTS.md``: ~11,000 kernel launches a step with LoRA on all 30
layers).

The layers are called one by one with a small key/value store of our own (``_KV``), not through
the model's forward, so that the top layers can start from a hidden state and keep their own layer
indices. The only parts of the model used are ``embed_tokens``, ``rotary_emb``, ``layers[i]``,
``norm`` and the output embeddings, whose signatures have been stable across transformers 5.x
(the name of the cache argument changed; it is read from the layer's signature).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

KVs = dict[int, tuple[Any, Any]]  # layer index -> (keys, values), each [rows, kv_heads, tokens, head_dim]


def adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """A saved PEFT adapter's adapter_config.json."""
    return dict(json.loads((Path(adapter_dir) / "adapter_config.json").read_text()))


def adapter_start_layer(adapter_dir: str | Path) -> int:
    """The lowest decoder layer a saved PEFT adapter adapts (0 when it adapts every layer)."""
    layers = adapter_config(adapter_dir).get("layers_to_transform")
    if layers is None:
        return 0
    if isinstance(layers, int):
        return int(layers)
    return min(int(i) for i in layers) if layers else 0


def adapted_layers(config: dict[str, Any]) -> int:
    """How many decoder layers an adapter of this adapter_config.json adapts (0 when every layer)."""
    layers = config.get("layers_to_transform")
    if layers is None:
        return 0
    return 1 if isinstance(layers, int) else len({int(i) for i in layers})


def model_start_layer(model: Any) -> int:
    """The lowest decoder layer any LoRA module sits in, for a (PEFT-wrapped) causal LM; the number
    of layers when none does."""
    decoder = decoder_of(model)
    for index, layer in enumerate(decoder.layers):
        if any("lora_A" in name for name, _ in layer.named_modules()):
            return index
    return len(decoder.layers)


def decoder_of(model: Any) -> Any:
    """The transformer body of a (PEFT-wrapped) causal LM; PEFT injects LoRA into it in place."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder()


def output_layer_of(model: Any) -> Any:
    """The output embeddings (lm_head) of a (PEFT-wrapped) causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_output_embeddings()


class _KV:
    """What a decoder layer's attention calls ``update`` on: returns the past keys/values of that
    layer (if any) followed by the new ones, and records the new ones."""

    def __init__(self, past: KVs | None = None) -> None:
        self.past = past or {}
        self.new: KVs = {}

    def update(self, keys: Any, values: Any, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        import torch

        self.new[layer_idx] = (keys, values)
        if layer_idx in self.past:
            past_k, past_v = self.past[layer_idx]
            return torch.cat([past_k, keys], dim=-2), torch.cat([past_v, values], dim=-2)
        return keys, values


def packed_layout(n_prefix: int, lengths: Sequence[int], width: int = 0) -> tuple[Any, Any, Any]:
    """Where each token of a packed sequence (a prefix, then suffixes of ``lengths``) belongs, on the
    host in a few vectorised ops (moved to the device once, not two small kernels per row):
    ``block`` [T] (0 = the prefix, j + 1 = suffix j), ``positions`` [T] (each suffix continues the
    prefix) and ``last`` [rows] (each suffix's last token). ``width`` > the real length pads the
    sequence with a block of its own at position 0 (SplitStack.top_blocks: nobody else sees it)."""
    import torch

    sizes = torch.tensor(list(lengths), dtype=torch.long)
    n_real = n_prefix + int(sizes.sum())
    n_pad = max(0, width - n_real)
    starts = n_prefix + torch.cumsum(sizes, 0) - sizes  # each suffix's first index
    rows = torch.repeat_interleave(torch.arange(1, len(sizes) + 1), sizes)
    pad_block = torch.full((n_pad,), len(sizes) + 1, dtype=torch.long)
    block = torch.cat([torch.zeros(n_prefix, dtype=torch.long), rows, pad_block])
    within = torch.arange(n_real - n_prefix) - torch.repeat_interleave(starts - n_prefix, sizes)
    positions = torch.cat([torch.arange(n_prefix), n_prefix + within, torch.zeros(n_pad, dtype=torch.long)])
    return block, positions, starts + sizes - 1


class SplitStack:
    """The decoder of ``model`` cut at layer ``start``: trunk = layers[:start], top = layers[start:]."""

    def __init__(self, model: Any, start: int) -> None:
        self.model = model
        self.decoder = decoder_of(model)
        n_layers = len(self.decoder.layers)
        if not 0 <= start < n_layers:
            raise ValueError(f"start layer {start} outside 0..{n_layers - 1}")
        self.start = start
        params = inspect.signature(self.decoder.layers[0].forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._sdpa = getattr(self.decoder.config, "_attn_implementation", "sdpa") == "sdpa"

    # -- pieces --------------------------------------------------------------------------------

    def _run(self, hidden: Any, layers: range, positions: Any, mask: Any, past: KVs | None) -> tuple[Any, KVs]:
        cos_sin = self.decoder.rotary_emb(hidden, position_ids=positions)
        store = _KV(past)
        for index in layers:
            out = self.decoder.layers[index](
                hidden,
                attention_mask=mask,
                position_ids=positions,
                position_embeddings=cos_sin,
                **{self._cache_kw: store},
            )
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden, store.new

    def _causal(self, n: int, device: Any, dtype: Any) -> Any:
        """Mask for a prompt attending to itself: None lets SDPA use its causal kernel."""
        import torch

        if self._sdpa:
            return None
        allowed = torch.ones((n, n), dtype=torch.bool, device=device).tril()
        return self._additive(allowed[None, None], dtype)

    def _suffix_mask(self, lengths: Sequence[int], past: int, width: int, device: Any, dtype: Any) -> Any:
        """[rows, 1, width, past + width]: every query sees the whole prefix and its own row's real
        tokens up to itself (right padding)."""
        import torch

        n_rows = len(lengths)
        causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
        valid = torch.arange(width, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
        suffix = causal[None] & valid[:, None, :]
        allowed = torch.cat([torch.ones((n_rows, width, past), dtype=torch.bool, device=device), suffix], dim=-1)
        allowed = allowed[:, None]
        return allowed if self._sdpa else self._additive(allowed, dtype)

    def _block_mask(self, block: Any, hidden: Any) -> Any:
        """[1, 1, T, T] for a packed sequence: block 0 (the prefix) is seen by every token, any other
        block only by its own tokens, causally (packed_layout's ``block``)."""
        import torch

        index = torch.arange(int(hidden.shape[1]), device=hidden.device)
        causal = index[:, None] >= index[None, :]
        same_block = block[:, None] == block[None, :]
        sees_prefix = (block == 0)[None, :]
        allowed = (causal & (same_block | sees_prefix))[None, None]
        return allowed if self._sdpa else self._additive(allowed, hidden.dtype)

    @staticmethod
    def _additive(allowed: Any, dtype: Any) -> Any:
        import torch

        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)

    @staticmethod
    def _expand(kv: KVs, n_rows: int) -> KVs:
        return {i: (k.expand(n_rows, -1, -1, -1), v.expand(n_rows, -1, -1, -1)) for i, (k, v) in kv.items()}

    def _pad(self, rows: Sequence[Any], width: int) -> Any:
        """Right-pad a list of [len, d] hidden states into [rows, width, d]."""

        first = rows[0]
        out = first.new_zeros((len(rows), width, first.shape[-1]))
        for j, row in enumerate(rows):
            out[j, : row.shape[0]] = row
        return out

    # -- public ---------------------------------------------------------------------------------

    def trunk_prefix(self, prefix_ids: Sequence[int]) -> tuple[Any, KVs]:
        """The prefix's hidden state entering layer ``start`` [1, P, d] and the trunk's keys/values."""
        import torch

        device = self.decoder.embed_tokens.weight.device
        ids = torch.tensor([list(prefix_ids)], device=device)
        hidden = self.decoder.embed_tokens(ids)
        positions = torch.arange(len(prefix_ids), device=device)[None]
        mask = self._causal(len(prefix_ids), device, hidden.dtype)
        return self._run(hidden, range(self.start), positions, mask, None)

    def trunk_suffixes(self, trunk_kv: KVs, past: int, suffixes: Sequence[Sequence[int]]) -> list[Any]:
        """Each suffix's hidden states entering layer ``start`` ([len_i, d] each), attending to the
        prefix (``trunk_kv``, ``past`` tokens). One forward for all rows: the caller batches."""
        import torch

        device = self.decoder.embed_tokens.weight.device
        n_rows, width = len(suffixes), max(len(s) for s in suffixes)
        ids = torch.zeros((n_rows, width), dtype=torch.long)
        for j, suffix in enumerate(suffixes):
            ids[j, : len(suffix)] = torch.tensor(list(suffix))
        hidden = self.decoder.embed_tokens(ids.to(device))
        positions = (past + torch.arange(width, device=device)).expand(n_rows, width)
        lengths = [len(s) for s in suffixes]
        mask = self._suffix_mask(lengths, past, width, device, hidden.dtype)
        hidden, _ = self._run(hidden, range(self.start), positions, mask, self._expand(trunk_kv, n_rows))
        return [hidden[j, : lengths[j]] for j in range(n_rows)]

    def trunk_packed(self, prefix_ids: Sequence[int], suffixes: Sequence[Sequence[int]]) -> list[Any]:
        """``trunk_suffixes`` for a packed sequence: the prefix and every suffix in one row
        [1, P + Σ len_i] under the block mask of ``top_blocks`` (each suffix sees the prefix and
        itself, causally), the prefix recomputed rather than expanded per row. The same states
        ([len_i, d] each); one forward of P + Σ len_i tokens instead of rows × (P + width)."""
        import torch

        device = self.decoder.embed_tokens.weight.device
        lengths = [len(s) for s in suffixes]
        ids = torch.tensor([[*prefix_ids, *(t for s in suffixes for t in s)]], device=device)
        block, positions, last = packed_layout(len(prefix_ids), lengths)
        hidden = self.decoder.embed_tokens(ids)
        out, _ = self._run(
            hidden, range(self.start), positions.to(device)[None], self._block_mask(block.to(device), hidden), None
        )
        starts = (last + 1 - torch.tensor(lengths)).tolist()
        return [out[0, a : a + n] for a, n in zip(starts, lengths, strict=True)]

    def top_prefix(self, prefix_hidden: Any) -> KVs:
        """The top layers' keys/values of the prefix (through whatever adapter is active; with
        gradients when the caller records them)."""
        import torch

        n = int(prefix_hidden.shape[1])
        positions = torch.arange(n, device=prefix_hidden.device)[None]
        mask = self._causal(n, prefix_hidden.device, prefix_hidden.dtype)
        _, kv = self._run(prefix_hidden, range(self.start, len(self.decoder.layers)), positions, mask, None)
        return kv

    def top_last(self, top_kv: KVs, past: int, suffix_hidden: Sequence[Any]) -> torch.Tensor:
        """The final-norm hidden state at each row's last token [rows, d], the rows' trunk states
        run through the top layers after the prefix (``top_kv``, ``past`` tokens)."""
        import torch

        n_rows = len(suffix_hidden)
        lengths = [int(h.shape[0]) for h in suffix_hidden]
        width = max(lengths)
        hidden = self._pad(suffix_hidden, width)
        device = hidden.device
        positions = (past + torch.arange(width, device=device)).expand(n_rows, width)
        mask = self._suffix_mask(lengths, past, width, device, hidden.dtype)
        hidden, _ = self._run(
            hidden, range(self.start, len(self.decoder.layers)), positions, mask, self._expand(top_kv, n_rows)
        )
        last = hidden[torch.arange(n_rows, device=device), torch.tensor(lengths, device=device) - 1]
        return self.decoder.norm(last)

    def top_last_packed(self, prefix_hidden: Any, suffix_hidden: Sequence[Any]) -> torch.Tensor:
        """``top_prefix`` + ``top_last`` in one pass: the prefix and every row's suffix packed into one
        sequence [1, P + Σ len_i, d], a block mask letting each suffix see the prefix and itself
        (causally) and the prefix see only itself, each suffix's positions continuing from the
        prefix. The same function, with gradients through the prefix's keys/values, at a third
        fewer operator dispatches a training step (1,552 against 2,995 with CUDA's foreach AdamW:
        bench/step_ops.py), which bound the step on a GPU."""
        import torch

        device = prefix_hidden.device
        lengths = [int(h.shape[0]) for h in suffix_hidden]
        hidden = torch.cat([prefix_hidden[0], *suffix_hidden], dim=0)[None]
        block, positions, last = packed_layout(int(prefix_hidden.shape[1]), lengths)
        return self.top_blocks(hidden, block.to(device), positions.to(device)[None], last.to(device))

    def top_blocks(self, hidden: Any, block: Any, positions: Any, last: Any) -> torch.Tensor:
        """The final-norm hidden state [rows, d] at the indices ``last`` of a packed sequence ``hidden``
        [1, T, d] run through the top layers. ``block`` [T] assigns each token a block: block 0 (the
        prefix) is seen by every token, any other block only by its own tokens, causally; ``positions``
        [1, T] are the tokens' rotary positions. Every shape is fixed by the inputs, so a caller can
        replay it (training.graphstep)."""
        import torch

        mask = self._block_mask(block, hidden)
        out, _ = self._run(hidden, range(self.start, len(self.decoder.layers)), positions, mask, None)
        # index_select, not out[0, last]: its backward is index_add (capturable), not an accumulating index_put
        return self.decoder.norm(torch.index_select(out[0], 0, last))

    def logits(self, last_hidden: Any) -> torch.Tensor:
        return output_layer_of(self.model)(last_hidden)
