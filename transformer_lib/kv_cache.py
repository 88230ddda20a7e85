"""The key/value cache: what a decoder remembers between generation steps (chapter 17).

A causal decoder computes, for every new token, its query, key and value in every layer. The
keys and values of the earlier tokens never change (they only see tokens before them), so a
decoder that recomputes them at every step does the same work again and again: step t costs a
forward pass over t tokens, and generating n tokens costs O(n^2) token-passes. Keeping each
layer's keys and values turns step t into one token's pass plus attention over the t cached keys.

The price is memory, per token of context::

    bytes per token = layers x 2 (K and V) x kv_heads x head_dim x bytes per number

Grouped-query attention (``num_kv_heads`` of :class:`~transformer_lib.multihead.MultiHeadAttention`) shrinks it by caching fewer
key/value heads than query heads. :func:`cache_bytes_per_token` is the formula;
:meth:`KVCache.nbytes` measures the tensors actually held; :func:`step_times` measures the gain
(one decoding step's time at several context lengths, with and without the cache).

``KVCache`` keeps one preallocated (B, H_kv, capacity, d) buffer per layer for keys and one for
values and writes each step into it in place (capacity doubles when full), so a step does not copy
the whole history the way ``torch.cat`` would.
"""
from __future__ import annotations

import torch

from ._checks import (check_cache_sizes, check_cache_update, check_int, check_new_cache, check_reorder_index,
                      check_step_times)
from .profiling import median_time

__all__ = ["KVCache", "cache_bytes_per_token", "step_times"]


def cache_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int = 4) -> int:
    """Bytes the cache grows by per token: ``num_layers * 2 * num_kv_heads * head_dim * bytes``."""
    check_cache_sizes(num_layers, num_kv_heads, head_dim, bytes_per_element)
    return num_layers * 2 * num_kv_heads * head_dim * bytes_per_element


class KVCache:
    """Per-layer keys and values of the tokens seen so far.

    ``update(layer, k, v)`` appends the new (B, H_kv, L_new, d) keys/values of ``layer`` and
    returns all of them so far, (B, H_kv, L_past + L_new, d) each (views into the buffer). Values
    may have their own width (latent attention caches its latent as keys and its rotary key as values).
    :attr:`length` is the number of cached positions (the offset of the next token's position).
    Every layer must be updated once per step, in any order; the length advances when the last
    layer has been updated.
    """

    def __init__(self, num_layers: int, initial_capacity: int = 256):
        check_new_cache(num_layers, initial_capacity)
        self.num_layers, self.initial_capacity = num_layers, initial_capacity
        self.keys: list[torch.Tensor | None] = [None] * num_layers  # (B, H_kv, capacity, d) buffers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.lengths = [0] * num_layers

    @property
    def length(self) -> int:
        """Cached positions (all layers agree between steps)."""
        return min(self.lengths)

    def offset(self, layer: int | None = None) -> int:
        """Where the new tokens' positions start, for ``layer`` (None: the model's, before any layer):
        the cached length, the same for every row. A cache whose rows hold different lengths
        (:class:`~transformer_lib.serving.batching.PaddedKVCache`, chapter 28) returns one offset per row."""
        return self.length if layer is None else self.lengths[layer]

    def mask(self, L: int) -> None:
        """The attention mask of the next ``L`` tokens: None, since every row attends to every
        cached key and the causal mask (aligned to the end of the keys) is the whole rule. A cache
        with rows of different lengths returns its own (B, 1, L, L_past + L) mask, causal included."""
        return None

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_cache_update(layer, k, v, self.keys, self.values)
        start, new = self.lengths[layer], k.shape[2]
        buf_k, buf_v = self.keys[layer], self.values[layer]
        if buf_k is None or start + new > buf_k.shape[2]:
            capacity = max(self.initial_capacity, 2 * (start + new))
            B, H, _, d = k.shape
            grown_k = k.new_empty(B, H, capacity, d)  # (B, H_kv, capacity, d)
            grown_v = v.new_empty(B, H, capacity, v.shape[3])  # (B, H_kv, capacity, d_v)
            if buf_k is not None:
                grown_k[:, :, :start] = buf_k[:, :, :start]
                grown_v[:, :, :start] = buf_v[:, :, :start]
            self.keys[layer], self.values[layer] = buf_k, buf_v = grown_k, grown_v
        buf_k[:, :, start:start + new] = k  # written in place: no copy of the history
        buf_v[:, :, start:start + new] = v
        self.lengths[layer] = start + new
        return buf_k[:, :, :start + new], buf_v[:, :, :start + new]  # (B, H_kv, L_total, d) views

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (the buffers are kept and overwritten later)."""
        check_int("length", length, 0, self.length)
        self.lengths = [length] * self.num_layers

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam search: each surviving beam takes its parent's cache)."""
        batch = next((k.shape[0] for k in self.keys if k is not None), None)
        check_reorder_index(index, batch)
        for i in range(self.num_layers):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i].index_select(0, index)
                self.values[i] = self.values[i].index_select(0, index)

    def nbytes(self) -> int:
        """Bytes of the cached keys and values (the used part of the buffers)."""
        total = 0
        for k, v, n in zip(self.keys, self.values, self.lengths):
            if k is not None:
                total += (k[:, :, :n].numel() + v[:, :, :n].numel()) * k.element_size()
        return total

    def __repr__(self) -> str:
        return f"KVCache(layers={self.num_layers}, length={self.length}, {self.nbytes() / 2**20:.2f} MiB)"


@torch.no_grad()
def step_times(model, ids: torch.Tensor, contexts, repeat: int = 3) -> dict[str, list[float]]:
    """Seconds of one decoding step after each context length in ``contexts``: ``{"cached": [...],
    "uncached": [...]}``, the median of ``repeat`` steps each.

    Cached: ``c`` tokens of ``ids`` (1, >= max(contexts) + 1) sit in the cache and token ``c`` goes
    through the model alone. The cache is filled once with the longest context and cut back
    (:meth:`KVCache.truncate`) to each shorter one, longest first, so no step pays for a prefill.
    Uncached: one forward pass over the ``c + 1`` tokens, what a decoder without a cache runs to
    get the same next-token logits. The difference is the point of the cache: the first grows
    little with ``c``, the second about linearly (chapter 17; ``benchmarks/generate.py``)."""
    contexts = check_step_times(ids, contexts, repeat)
    cache = model.new_cache(initial_capacity=max(contexts) + 1)
    model(ids[:, :max(contexts)], cache=cache)
    measured = {}
    for c in sorted(set(contexts), reverse=True):  # the cache is only ever cut shorter

        def cached_step():
            cache.truncate(c)  # keep the first c tokens, then add token c
            model(ids[:, c:c + 1], cache=cache)

        measured[c] = (median_time(cached_step, repeat=repeat, warmup=0),
                       median_time(lambda: model(ids[:, :c + 1]), repeat=repeat, warmup=0))
    return {"cached": [measured[c][0] for c in contexts], "uncached": [measured[c][1] for c in contexts]}
