"""Batched decoding of prompts of different lengths (chapter 28): one forward pass per step for
the whole batch, each row equal to its own one-at-a-time generation.

Three things make a batch of ragged rows behave like B separate decoders:

* **padding**: prompts of lengths l_1 .. l_B are right-padded to the longest, so they stack into
  one (B, L) tensor; the pads' keys are written after each row's real ones and then forgotten
  (:meth:`~.ragged.RaggedCache.set_lengths`), so the next token overwrites them;
* **per-row positions**: row i's next token sits at position ``len_i``, its own length, not the
  batch's (RoPE rotates by it, a learned table adds its row);
* **an attention mask**: row i's query at position p sees key slots ``0 .. p`` only, never a pad
  and never a longer row's slots (:meth:`~.ragged.RaggedCache.mask`).

Everything else is the model's ordinary ``forward(tokens, cache)``: the cache answers the
per-row questions. :class:`PaddedKVCache` is the contiguous way to hold such a batch, one
(B, H_kv, capacity, d) buffer per layer as :class:`~transformer_lib.kv_cache.KVCache` keeps, each
row reserving the longest row's room; :class:`~.paged_cache.PagedKVCache` holds the same slots in
fixed-size blocks. :func:`generate_batch` is the loop on either (static batching: the batch starts
together and ends with its longest row).

Why it pays: a decoding step reads every weight once whether it serves one row or sixteen
(chapter 19's roofline: decode is memory-bound), so rows are nearly free until the arithmetic of
B rows catches up with the bytes.
"""
from __future__ import annotations

import torch

from .._checks import check_choice, check_int, check_number, check_prompt_list, check_ragged_model
from .._checks.sampling import check_fits
from .ragged import RaggedCache

__all__ = ["PaddedKVCache", "generate_batch", "pad_prompts", "decode_step_time", "CACHES"]

CACHES = ("padded", "paged")


def decode_step_time(batch: int, weight_bytes: float, bandwidth: float, flops_per_row: float,
                     peak_flops: float) -> float:
    """The roofline of one decoding step of ``batch`` rows (seconds): the weights are read once for
    every row (``weight_bytes / bandwidth``), the arithmetic grows with the rows
    (``batch * flops_per_row / peak_flops``), and the step takes the longer of the two. Tokens/s
    ``= batch / time`` grows with the batch until the arithmetic binds (chapter 19's roofline with
    B rows of x: B times the arithmetic intensity)."""
    check_int("batch", batch)
    for name, value in (("weight_bytes", weight_bytes), ("bandwidth", bandwidth), ("flops_per_row", flops_per_row),
                        ("peak_flops", peak_flops)):
        check_number(name, value, 0, low_open=True)
    return max(weight_bytes / bandwidth, batch * flops_per_row / peak_flops)


class PaddedKVCache(RaggedCache):
    """Rows of different lengths in one contiguous buffer per layer: row i's keys at slots
    0 .. len_i - 1 of (B, H_kv, capacity, d), the rest padding (capacity doubles when the longest
    row needs it). ``nbytes()`` counts the real tokens' keys and values, ``reserved_bytes()`` the
    buffers: the difference is what padding and preallocation waste."""

    def __init__(self, num_layers: int, batch: int, initial_capacity: int = 256):
        super().__init__(num_layers)
        check_int("batch", batch)
        check_int("initial_capacity", initial_capacity)
        self.batch, self.initial_capacity = batch, initial_capacity
        self.keys: list[torch.Tensor | None] = [None] * num_layers  # (B, H_kv, capacity, d) buffers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self._lengths = torch.zeros(batch, dtype=torch.long)
        self._slots = None  # this step's (B, L) write slots

    def row_lengths(self) -> torch.Tensor:
        return self._lengths

    def _set_row_lengths(self, lengths: torch.Tensor) -> None:
        self._lengths = lengths

    def _begin(self, L: int) -> None:
        self._slots = self.write_slots(L)  # (B, L)

    def _write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        B, H, L, d = k.shape
        need = self.length + L
        buf_k, buf_v = self.keys[layer], self.values[layer]
        if buf_k is None or need > buf_k.shape[2]:
            capacity = max(self.initial_capacity, need if buf_k is None else 2 * need)  # preallocated, then doubled
            grown_k = k.new_zeros(B, H, capacity, d)  # (B, H_kv, capacity, d)
            grown_v = v.new_zeros(B, H, capacity, v.shape[3])
            if buf_k is not None:
                grown_k[:, :, :buf_k.shape[2]] = buf_k
                grown_v[:, :, :buf_v.shape[2]] = buf_v
            self.keys[layer], self.values[layer] = buf_k, buf_v = grown_k, grown_v
        slots = self._slots.to(k.device)[:, None, :, None]  # (B, 1, L, 1): row i writes at len_i + t
        buf_k.scatter_(2, slots.expand(B, H, L, d), k)
        buf_v.scatter_(2, slots.expand(B, H, L, v.shape[3]), v)

    def _read(self, layer: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer][:, :, :width], self.values[layer][:, :, :width]  # (B, H_kv, W + L, d) views

    def nbytes(self) -> int:
        """Bytes of the rows' real keys and values (sum of the row lengths, every layer)."""
        total = 0
        for k, v in zip(self.keys, self.values):
            if k is not None:
                per_slot = (k.shape[1] * k.shape[3] + v.shape[1] * v.shape[3]) * k.element_size()
                total += int(self._lengths.sum()) * per_slot
        return total

    def reserved_bytes(self) -> int:
        """Bytes of the buffers held (B rows x capacity, every layer)."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                   for k, v in zip(self.keys, self.values) if k is not None)

    def __repr__(self) -> str:
        return (f"PaddedKVCache(layers={self.num_layers}, rows={self.batch}, lengths={self._lengths.tolist()}, "
                f"{self.nbytes() / 2**20:.2f} of {self.reserved_bytes() / 2**20:.2f} MiB used)")


def pad_prompts(prompts: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad prompts to the longest: (tokens (B, L_max), lengths (B,)). The pad id is any valid
    id: no real token ever attends to a pad (they come after it, and the cache forgets them)."""
    prompts = check_prompt_list(prompts)
    lengths = torch.tensor([len(p) for p in prompts])  # (B,)
    tokens = torch.full((len(prompts), int(lengths.max())), pad_id, dtype=torch.long)  # (B, L_max)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)] = torch.tensor(p)
    return tokens, lengths


def new_ragged_cache(model, rows: int, cache: str = "padded", block_size: int = 16, capacity: int = 256):
    """An empty ragged cache for ``rows`` sequences of ``model``: ``"padded"`` (contiguous) or
    ``"paged"`` (blocks; the sequences are named 0 .. rows - 1 and selected in that order)."""
    from .paged_cache import PagedKVCache
    if cache == "padded":
        return PaddedKVCache(len(model.blocks), rows, capacity)
    paged = PagedKVCache(len(model.blocks), num_blocks=rows * (-(-capacity // block_size)) + rows,
                         block_size=block_size)
    for i in range(rows):
        paged.add_sequence(i)
    paged.select(list(range(rows)))
    return paged


@torch.no_grad()
def generate_batch(model, prompts, max_new_tokens: int, eos_id: int | None = None, cache: str = "padded",
                   block_size: int = 16, return_logits: bool = False):
    """Greedy continuations of prompts of different lengths, decoded together (static batching):
    one right-padded prefill, then one forward pass of B tokens per step. Returns each prompt's
    new ids (up to and with its first ``eos_id``), and with ``return_logits`` also each row's
    float32 logits per new token ((n_i, V) each). Row i equals
    ``sampling.generate_ids(model, prompts[i], max_new_tokens, eos_id=eos_id)`` (tests hold the
    ids equal and the logits to float32 rounding). ``cache`` is ``"padded"`` or ``"paged"``."""
    check_int("max_new_tokens", max_new_tokens)
    check_choice("cache", cache, CACHES)
    check_ragged_model(model)
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    prompts = check_prompt_list(prompts, model.embed.num_embeddings)
    device = next(model.parameters()).device
    tokens, lengths = pad_prompts(prompts)
    check_fits(model, tokens.shape[1], max_new_tokens, None)
    B = len(prompts)
    kv = new_ragged_cache(model, B, cache, block_size, capacity=tokens.shape[1] + max_new_tokens)
    logits = model(tokens.to(device), cache=kv)  # (B, L_max, V): the prefill, pads included
    kv.set_lengths(lengths)  # forget the pads' keys
    logits = logits[torch.arange(B), lengths.to(device) - 1].float()  # (B, V): each row's last real token
    new, steps, done = [[] for _ in range(B)], [[] for _ in range(B)], [False] * B
    for _ in range(max_new_tokens):
        token = logits.argmax(-1)  # (B,)
        for i, t in enumerate(token.tolist()):
            if not done[i]:
                new[i].append(t)
                if return_logits:
                    steps[i].append(logits[i])
                done[i] = eos_id is not None and t == eos_id
        if all(d or len(r) == max_new_tokens for d, r in zip(done, new)):
            break
        logits = model(token[:, None], cache=kv)[:, -1].float()  # (B, V): one token per row
    if return_logits:
        return new, [torch.stack(s) for s in steps]
    return new
