"""What every cache whose rows hold different lengths shares (chapter 28).

A batch of prompts of different lengths cannot share one offset: row i's next token sits at
position ``len_i``, its own length. The model asks its cache two things before each forward pass
(:meth:`~transformer_lib.kv_cache.KVCache.offset` and ``mask``), and a ragged cache answers per
row:

* ``offset()`` -> (B,) the position where each row's new tokens start (RoPE rotates, and a
  learned or sinusoidal table adds, by these positions);
* ``mask(L)`` -> (B, 1, L, W + L) boolean, ``W`` the longest row: key slot j is visible to row
  i's new token t when ``j <= len_i + t``. Slot j holds position j in every layout here, so this
  one inequality is the causal mask *and* the padding mask: a row's slots past its own length
  are padding (or another row's future), and no query of the row reaches them.

The new keys of row i go to slots ``len_i .. len_i + L - 1``; how a slot maps to memory is the
subclass's business (:class:`~.batching.PaddedKVCache`: one contiguous buffer per layer,
:class:`~.paged_cache.PagedKVCache`: blocks from a pool). A forward pass of L tokens advances every
row by L; :meth:`set_lengths` then cuts rows back, which is how a right-padded batch of prompts
forgets its pad tokens (their keys were written after the real ones and are overwritten next).
"""
from __future__ import annotations

import torch

from .._checks import check_cache_update, check_int, check_row_lengths
from ..masks import ragged_mask


class RaggedCache:
    """Per-layer keys and values of B rows of different lengths (the protocol of
    :class:`~transformer_lib.kv_cache.KVCache`, per row). Subclasses implement ``_begin(L)``
    (make room for L new slots per row), ``_write(layer, k, v)`` (store them) and
    ``_read(layer, width)`` (keys and values of slots 0 .. width - 1, (B, H_kv, width, d) each)."""

    ragged = True  # rows hold different lengths: the fused one-row step does not apply

    def __init__(self, num_layers: int):
        check_int("num_layers", num_layers)
        self.num_layers = num_layers
        self._step: int | None = None  # L of the step under way (None: between steps)
        self._updated = [False] * num_layers

    # the rows' lengths, (B,) long: subclasses keep them
    def row_lengths(self) -> torch.Tensor:
        raise NotImplementedError

    def _set_row_lengths(self, lengths: torch.Tensor) -> None:
        raise NotImplementedError

    @property
    def length(self) -> int:
        """The longest row's cached positions (the width of the keys before the next step)."""
        lengths = self.row_lengths()
        return int(lengths.max()) if lengths.numel() else 0

    @property
    def lengths(self) -> list[int]:
        """Per layer, the width of the cached keys (the longest row), this step's L included once
        the layer has been updated: what :class:`~transformer_lib.multihead.MultiHeadAttention`
        reads as its past."""
        w = self.length
        return [w + (self._step if done else 0) for done in self._updated]

    def offset(self, layer: int | None = None) -> torch.Tensor:
        """(B,) where each row's new tokens start: its own length (the same for every layer)."""
        return self.row_lengths()

    def mask(self, L: int) -> torch.Tensor:
        """(B, 1, L, W + L): key slot j visible to row i's new token t when ``j <= len_i + t``."""
        return ragged_mask(self.row_lengths(), L)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store row i's L new keys/values (B, H_kv, L, d) at slots len_i .. len_i + L - 1 and return
        every row's slots 0 .. W + L - 1, (B, H_kv, W + L, d) each (padding included: the mask hides it)."""
        check_cache_update(layer, k, v, [None] * self.num_layers)
        B, L = k.shape[0], k.shape[2]
        if B != self.row_lengths().numel():
            raise ValueError(f"k: the cache holds {self.row_lengths().numel()} rows, the new keys have {B}")
        if self._step is None:
            self._begin(L)  # may raise (a full pool) before anything changed
            self._step = L
        elif L != self._step or self._updated[layer]:
            raise ValueError(f"layer {layer}: every layer takes the step's {self._step} new positions once")
        width = self.length + L
        self._write(layer, k, v)
        self._updated[layer] = True
        out = self._read(layer, width)
        if all(self._updated):  # the last layer of the step: every row advances by L
            self._set_row_lengths(self.row_lengths() + L)
            self._step, self._updated = None, [False] * self.num_layers
        return out

    def set_lengths(self, lengths) -> None:
        """Cut each row back to ``lengths[i]`` positions (after a right-padded prefill: forget the pads)."""
        self._set_row_lengths(check_row_lengths(lengths, self.row_lengths()))

    def write_slots(self, L: int) -> torch.Tensor:
        """(B, L) the slots (= positions) this step's new tokens take in each row."""
        lengths = self.row_lengths()
        return lengths[:, None] + torch.arange(L, device=lengths.device)

    def _begin(self, L: int) -> None:
        raise NotImplementedError

    def _write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        raise NotImplementedError

    def _read(self, layer: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError
