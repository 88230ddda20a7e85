"""Global tokens (Longformer) and block layouts (BigBird), without forming the n x n matrix.

Chapter 8, "Global tokens and BigBird". The masks are in :mod:`transformer_lib.masks`
(``longformer_mask``, ``bigbird_block_layout``, ``layout_to_mask``); each kernel here equals
dense attention with that mask (``kernel="dense"`` is that reference).
"""
from __future__ import annotations

from typing import Iterable

import torch

from ..attention import attention_fast
from ..masks import layout_to_mask, longformer_mask
from .._checks import check_block_layout, check_choice, check_positions_list, check_sparse_call
from .patterns import DEFAULT_BLOCK_SIZE
from .window import window_attention

__all__ = ["longformer_attention", "block_sparse_attention"]


def longformer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                         global_positions: Iterable[int], causal: bool = False, *,
                         key_mask: torch.Tensor | None = None, kernel: str = "auto",
                         block_size: int = DEFAULT_BLOCK_SIZE, scale: float | None = None) -> torch.Tensor:
    """Sliding window plus global tokens: equal to dense attention with ``longformer_mask``.

    ``kernel="blocked"`` (``"auto"``) costs O(n (w + g)) for g global tokens: each query block's
    key tile gets the g global keys prepended (masked where the band already holds them, so no
    key counts twice), and the g global *queries* attend densely to all n keys, overwriting
    their rows. ``kernel="dense"`` is the masked reference.
    """
    B, H, L, key_mask = check_sparse_call(q, k, v, key_mask, causal, scale, window=window, block_size=block_size)
    check_choice("kernel", kernel, ("auto", "blocked", "dense"))
    g = torch.as_tensor(check_positions_list("global_positions", global_positions, L), dtype=torch.long)
    if kernel == "dense":
        mask = longformer_mask(L, window, g.tolist(), causal, device=q.device)  # (L, L)
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]
        return attention_fast(q, k, v, mask, scale=scale)
    half, right = window // 2, (0 if causal else window // 2)
    if g.numel() == 0:
        return window_attention(q, k, v, half, causal, key_mask, "blocked", block_size, scale)
    g = g.to(q.device)
    kg, vg = k[:, :, g], v[:, :, g]  # (B, H, G, d): the global keys and values
    positions = torch.arange(L, device=q.device)
    out = q.new_empty(B, H, L, v.shape[-1])
    for s in range(0, L, block_size):
        e = min(L, s + block_size)
        ks, ke = max(0, s - half), min(L, e + right)
        i = positions[s:e, None]  # (b, 1)
        diff = i - positions[None, ks:ke]  # (b, tile)
        band = (diff <= half) & (diff >= -right)  # (b, tile)
        gdiff = i - g[None, :]  # (b, G)
        extra = ~((gdiff <= half) & (gdiff >= -right))  # global key not already in this row's band
        if causal:
            extra = extra & (gdiff >= 0)
        mask = torch.cat([extra, band], dim=1)[None, None]  # (1, 1, b, G + tile)
        if key_mask is not None:
            mask = mask & torch.cat([key_mask[:, g], key_mask[:, ks:ke]], dim=1)[:, None, None, :]  # (B, 1, b, G + tile)
        kk = torch.cat([kg, k[:, :, ks:ke]], dim=2)  # (B, H, G + tile, d)
        vv = torch.cat([vg, v[:, :, ks:ke]], dim=2)
        out[:, :, s:e] = attention_fast(q[:, :, s:e], kk, vv, mask, scale=scale)
    # the global queries see every key (the past only, if causal)
    gmask = None
    if causal:
        gmask = positions[None, :] <= g[:, None]  # (G, L)
    if key_mask is not None:
        km = key_mask[:, None, None, :]  # (B, 1, 1, L)
        gmask = km if gmask is None else gmask & km
    out[:, :, g] = attention_fast(q[:, :, g], k, v, gmask, scale=scale)
    return out


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: torch.Tensor,
                           block_size: int, *, key_mask: torch.Tensor | None = None,
                           kernel: str = "auto", scale: float | None = None) -> torch.Tensor:
    """Attention under a (nb, nb) block layout, e.g. ``bigbird_block_layout``.

    ``kernel="blocked"`` (``"auto"``): each query block gathers the key blocks its layout row
    lists and runs one SDPA call on them, so the cost is (number of True blocks) x block_size^2.
    ``kernel="dense"`` is the reference with ``layout_to_mask``.
    """
    B, H, L, key_mask = check_sparse_call(q, k, v, key_mask, False, scale, block_size=block_size)
    check_choice("kernel", kernel, ("auto", "blocked", "dense"))
    check_block_layout(layout, L, block_size)
    nb = -(-L // block_size)
    if kernel == "dense":
        mask = layout_to_mask(layout, block_size, L).to(q.device)  # (L, L)
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]
        return attention_fast(q, k, v, mask, scale=scale)
    out = q.new_zeros(B, H, L, v.shape[-1])  # rows whose layout row is empty stay zero
    positions = torch.arange(L, device=q.device)
    for row in range(nb):
        cols = layout[row].nonzero().flatten().tolist()
        if not cols:
            continue
        s, e = row * block_size, min(L, (row + 1) * block_size)
        idx = torch.cat([positions[c * block_size:(c + 1) * block_size] for c in cols])  # key positions
        km = None if key_mask is None else key_mask[:, idx][:, None, None, :]  # (B, 1, 1, keys)
        out[:, :, s:e] = attention_fast(q[:, :, s:e], k[:, :, idx], v[:, :, idx], km, scale=scale)
    return out
