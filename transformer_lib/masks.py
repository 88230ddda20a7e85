"""Boolean attention masks, ``True = may attend``.

Every mask here follows the convention of ``torch.nn.functional.scaled_dot_product_attention``:
a boolean tensor broadcastable to ``(B, H, L_q, L_k)`` in which ``mask[..., i, j]`` is True when
query ``i`` may look at key ``j``. ``torch.nn.MultiheadAttention`` uses the *opposite* meaning
(True = blocked); :func:`to_torch_mha_mask` and :func:`from_torch_mha_mask` translate.

Masks are built from index arithmetic on ``arange`` vectors, so each pattern reads like its
definition: ``j <= i`` for causal, ``|i - j| <= w // 2`` for a sliding window, and so on.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from ._checks import (check_bigbird_blocks, check_bool, check_bool_mask, check_bool_masks, check_causal_lengths,
                      check_int, check_layout_to_mask, check_positions_list, check_row_lengths, check_sequence_lengths,
                      check_torch_mask)

__all__ = [
    "causal_mask",
    "prefix_lm_mask",
    "padding_mask",
    "sliding_window_mask",
    "dilated_mask",
    "global_tokens_mask",
    "dilated_window_mask",
    "longformer_mask",
    "bigbird_block_layout",
    "bigbird_mask",
    "layout_to_mask",
    "combine_masks",
    "to_torch_mha_mask",
    "from_torch_mha_mask",
    "key_padding_to_mask",
    "ragged_mask",
]


def _positions(L_q: int, L_k: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    i = torch.arange(L_q, device=device).unsqueeze(1)  # (L_q, 1) query index
    j = torch.arange(L_k, device=device).unsqueeze(0)  # (1, L_k) key index
    return i, j


def causal_mask(L_q: int, L_k: int | None = None, device=None) -> torch.Tensor:
    """(L_q, L_k) lower-triangular mask: query ``i`` sees keys ``j <= i``.

    When ``L_k > L_q`` (a query block appended to a cached prefix) the diagonal is aligned to the
    end, so the last query sees every key, as in ``is_causal`` decoding with a KV cache. Fewer
    keys than queries is refused: the first queries would see no key at all (the keys must
    include the queries' own; ``MultiHeadAttention(..., causal=True)`` refuses it the same way).
    """
    L_k = L_q if L_k is None else L_k
    check_int("L_q", L_q)
    check_int("L_k", L_k)
    check_causal_lengths(L_q, L_k)
    i, j = _positions(L_q, L_k, device)
    return j <= i + (L_k - L_q)  # (L_q, L_k)


def prefix_lm_mask(n_prefix: int, L: int, device=None) -> torch.Tensor:
    """(L, L) mask of a prefix language model: query i sees key j when ``j < n_prefix`` or ``j <= i``.

    The first ``n_prefix`` tokens (the prompt, or the "source") attend to each other in both
    directions, like an encoder; the rest is causal, like a decoder. It is the decoder-only
    family's way of reading its input bidirectionally (UniLM; the "prefix LM" of the T5 paper;
    chapter 13). ``n_prefix = 0`` gives the causal mask, ``n_prefix = L`` the full one.
    """
    check_int("L", L)
    check_int("n_prefix", n_prefix, 0, L)
    j = torch.arange(L, device=device).unsqueeze(0)  # (1, L) key index
    return causal_mask(L, device=device) | (j < n_prefix)  # (L, L)


def padding_mask(lengths: Sequence[int] | torch.Tensor, max_len: int | None = None,
                 device=None) -> torch.Tensor:
    """(B, 1, 1, L) key mask from true sequence lengths: key ``j`` is real when ``j < length``.

    The two singleton axes broadcast over heads and queries, so every query ignores the pads.
    """
    lengths, max_len = check_sequence_lengths(lengths, max_len, device)
    j = torch.arange(max_len, device=lengths.device)  # (L,)
    keep = j.unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)
    return keep[:, None, None, :]  # (B, 1, 1, L)


def sliding_window_mask(L: int, window: int, causal: bool = False, device=None) -> torch.Tensor:
    """(L, L) band: query ``i`` sees keys with ``|i - j| <= window // 2``.

    With ``causal=True`` only the past half of the band is kept: ``i - window // 2 <= j <= i``.
    """
    check_int("L", L)
    check_int("window", window)
    check_bool("causal", causal)
    return _band(L, window // 2, 0 if causal else window // 2, device)


def _band(L: int, left: int, right: int, device=None) -> torch.Tensor:
    """(L, L) ``i - left <= j <= i + right``, unchecked. Two broadcast comparisons and no (L, L)
    integer temporary: 3 L^2 bytes at the peak instead of about 16 L^2 (matters at L = 32768)."""
    i, j = _positions(L, L, device)
    return (j >= i - left) & (j <= i + right)  # (L, L)


def dilated_mask(L: int, dilation: int, causal: bool = False, device=None) -> torch.Tensor:
    """(L, L) strided pattern: query ``i`` sees keys with ``(j - i) % dilation == 0``.

    ``dilation=1`` is full attention. With ``causal=True`` also ``j <= i``.
    """
    check_int("L", L)
    check_int("dilation", dilation)
    check_bool("causal", causal)
    return _same_residue(L, dilation, causal, device)


def _same_residue(L: int, dilation: int, causal: bool, device=None) -> torch.Tensor:
    """(L, L) ``(j - i) % dilation == 0`` written as ``i % d == j % d`` (no (L, L) integer
    temporary), and ``j <= i`` if causal; unchecked."""
    r = torch.arange(L, device=device) % dilation  # (L,) residue of each position
    mask = r.unsqueeze(1) == r.unsqueeze(0)  # (L, L)
    if causal:
        i, j = _positions(L, L, device)
        mask &= j <= i
    return mask


def global_tokens_mask(L: int, global_positions: Iterable[int], device=None) -> torch.Tensor:
    """(L, L) Longformer-style global attention: the listed tokens see everything and are seen by
    everyone. Combine it with a window by OR-ing: ``sliding_window_mask(...) | global_tokens_mask(...)``.
    """
    check_int("L", L)
    g = torch.zeros(L, dtype=torch.bool, device=device)
    g[torch.as_tensor(check_positions_list("global_positions", global_positions, L), dtype=torch.long,
                      device=device)] = True
    return g.unsqueeze(1) | g.unsqueeze(0)  # row i global OR column j global


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (each broadcastable), ignoring ``None``.

    A key is visible only if every mask allows it: e.g. ``combine_masks(causal, padding)``.
    """
    check_bool_masks(masks)
    result = None
    for m in masks:
        if m is not None:
            result = m if result is None else result & m
    return result


def to_torch_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """Our convention (True = may attend) -> ``nn.MultiheadAttention``'s (True = blocked)."""
    check_bool_mask("mask", mask)
    return ~mask


def from_torch_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention``'s boolean (True = blocked) or additive float mask -> ours.

    A float mask is additive: 0 keeps a key, ``-inf`` blocks it. A NaN entry is refused (it is
    neither, and would silently become "blocked").
    """
    check_torch_mask("mask", mask)
    return ~mask if mask.dtype == torch.bool else mask == 0


def key_padding_to_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """torch's ``key_padding_mask`` (B, L_k), True = pad, -> our (B, 1, 1, L_k), True = real."""
    check_torch_mask("key_padding_mask", key_padding_mask, dims=2)
    return from_torch_mha_mask(key_padding_mask)[:, None, None, :]  # (B, 1, 1, L_k)


# -- sparse-attention patterns (chapter 8): dilated windows, Longformer, BigBird -------------------

def dilated_window_mask(L: int, window: int, dilation: int, causal: bool = False, device=None) -> torch.Tensor:
    """(L, L) dilated sliding window: keys ``j = i + t * dilation`` for ``|t| <= window // 2``.

    The window keeps ``window // 2`` taps on each side (like a convolution kernel of size
    ``2 * (window // 2) + 1``) but spaces them ``dilation`` apart, so one layer reaches
    ``(window // 2) * dilation`` positions away at the same cost. ``dilation = 1`` is
    :func:`sliding_window_mask`. Stacking such layers is where dilation pays off, and where a
    fixed rate leaves holes (chapter 8, "Dilated attention"; ``sparse.receptive_field``).
    """
    for name, value in (("L", L), ("window", window), ("dilation", dilation)):
        check_int(name, value)
    check_bool("causal", causal)
    i, j = _positions(L, L, device)
    mask = ((j - i) % dilation == 0) & ((j - i).abs() <= (window // 2) * dilation)
    return mask & (j <= i) if causal else mask


def longformer_mask(L: int, window: int, global_positions: Iterable[int], causal: bool = False,
                    device=None) -> torch.Tensor:
    """(L, L) Longformer pattern: the sliding window OR the global tokens' rows and columns.

    With ``causal=True`` everything is also restricted to ``j <= i`` (a global token then sees
    the whole past and is seen by the whole future).
    """
    check_bool("causal", causal)
    mask = sliding_window_mask(L, window, device=device) | global_tokens_mask(L, global_positions, device=device)
    if causal:
        i, j = _positions(L, L, device)
        mask = mask & (j <= i)
    return mask


def bigbird_block_layout(num_blocks: int, window_blocks: int = 3, global_blocks: int = 1,
                         random_blocks: int = 1, seed: int = 0) -> torch.Tensor:
    """(num_blocks, num_blocks) boolean block layout of BigBird (Zaheer et al., 2020).

    Query block r sees: the ``window_blocks`` blocks centred on it (r - w//2 .. r + w//2), the
    first ``global_blocks`` blocks (which also see everything), and ``random_blocks`` other
    blocks drawn at random (seeded, so the pattern is reproducible) among those it does not
    already see. :func:`layout_to_mask` turns it into a token mask.
    """
    check_bigbird_blocks(num_blocks, window_blocks, global_blocks, random_blocks, seed)
    r = torch.arange(num_blocks)
    layout = (r[:, None] - r[None, :]).abs() <= window_blocks // 2  # (nb, nb) window of blocks
    layout[:global_blocks, :] = True  # global blocks see everything ...
    layout[:, :global_blocks] = True  # ... and are seen by everything
    gen = torch.Generator().manual_seed(seed)
    for row in range(global_blocks, num_blocks):
        free = (~layout[row]).nonzero().flatten()
        take = free[torch.randperm(free.numel(), generator=gen)[:random_blocks]]
        layout[row, take] = True
    return layout


def layout_to_mask(layout: torch.Tensor, block_size: int, L: int | None = None) -> torch.Tensor:
    """Expand a (nb, nb) block layout to an (L, L) token mask (cut to ``L`` if given)."""
    check_layout_to_mask(layout, block_size, L)
    mask = layout.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)  # (nb*b, nb*b)
    return mask if L is None else mask[:L, :L]


def bigbird_mask(L: int, block_size: int, window_blocks: int = 3, global_blocks: int = 1,
                 random_blocks: int = 1, seed: int = 0) -> torch.Tensor:
    """(L, L) BigBird mask: :func:`bigbird_block_layout` expanded to tokens."""
    check_int("L", L)
    check_int("block_size", block_size)
    nb = -(-L // block_size)  # ceil(L / block_size)
    return layout_to_mask(bigbird_block_layout(nb, window_blocks, global_blocks, random_blocks, seed), block_size, L)


def ragged_mask(lengths: torch.Tensor, L: int) -> torch.Tensor:
    """(B, 1, L, W + L) boolean, ``W = max(lengths)``: row i's new token t (at position
    ``lengths[i] + t``) may attend to key slot j when ``j <= lengths[i] + t``. Causal and padding
    mask in one inequality, because slot j holds position j in every row."""
    check_row_lengths(lengths, torch.as_tensor(lengths), "lengths")
    check_int("L", L)
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    width = (int(lengths.max()) if lengths.numel() else 0) + L
    query = lengths[:, None] + torch.arange(L, device=lengths.device)  # (B, L) positions of the new tokens
    slots = torch.arange(width, device=lengths.device)  # (W + L,)
    return (slots[None, None, :] <= query[:, :, None])[:, None]  # (B, 1, L, W + L)
