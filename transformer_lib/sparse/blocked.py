"""The ``"blocked"`` sliding-window kernel: blocks of queries on their own key tiles, batched.

It cuts the queries into blocks of b rows and gives each block only its own tile of keys, as
:func:`~transformer_lib.sparse.sliding_window_reference` does, but without a Python iteration
per block: the tiles of all *interior* blocks (those whose tile lies inside the sequence) are
overlapping windows of k and v, which ``as_strided`` exposes as one (H, blocks, width, d) view
without copying, and one fused SDPA call treats the blocks like extra heads. The few blocks at
the two ends take one call per end, and a padded batch one call per block, each with its own mask.
Every interior block sees the same pattern in tile coordinates, so one additive tile mask
serves them all. It works on every device, with padding and with gradients.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import attention_fast

__all__: list[str] = []  # reached through sliding_window_attention(kernel="blocked")

_CHUNK_ROWS = 4096  # queries per batched SDPA call: bounds the temporary output (8 MB at 8 heads x 64)


def _tiles(x: torch.Tensor, start: int, count: int, step: int, width: int) -> torch.Tensor:
    """Overlapping windows of a (H, L, d) tensor: window t = x[:, start + t*step : start + t*step + width].

    Returns a (H, count, width, d) *view* (no copy): consecutive windows share memory.
    """
    sh, sl, sd = x.stride()
    return x.as_strided((x.shape[0], count, width, x.shape[2]), (sh, step * sl, sl, sd),
                        x.storage_offset() + start * sl)


def _tile_bias(rows: int, cols: int, lo: int, hi: int, like: torch.Tensor) -> torch.Tensor:
    """(rows, cols) additive mask: 0 where ``r + lo <= c <= r + hi`` (tile row r, column c), else -inf."""
    r = torch.arange(rows, device=like.device).unsqueeze(1)  # (rows, 1)
    c = torch.arange(cols, device=like.device).unsqueeze(0)  # (1, cols)
    keep = (c >= r + lo) & (c <= r + hi)  # (rows, cols)
    return torch.zeros(keep.shape, dtype=like.dtype, device=like.device).masked_fill(~keep, float("-inf"))


def _region(q, k, v, out, s: int, e: int, half: int, right: int, key_mask, scale) -> None:
    """Queries [s, e) against every key any of them can see, [s - half, e + right) clipped to the
    sequence, with the band (and the padding) as a boolean mask; written into ``out[:, :, s:e]``."""
    L = q.shape[2]
    ks, ke = max(0, s - half), min(L, e + right)
    i = torch.arange(s, e, device=q.device).unsqueeze(1)  # (rows, 1) query positions
    j = torch.arange(ks, ke, device=q.device).unsqueeze(0)  # (1, keys) key positions
    band = (i - j <= half) & (i - j >= -right)  # (rows, keys)
    qs, kk, vv = q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke]  # (B, H, rows, d), (B, H, keys, d) views
    if key_mask is None:  # no row is ever empty (j = i is in the band): plain SDPA
        out[:, :, s:e] = F.scaled_dot_product_attention(qs, kk, vv, attn_mask=band, scale=scale)
    else:  # padding: a row may see no real key; attention_fast returns zeros for it
        out[:, :, s:e] = attention_fast(qs, kk, vv, band & key_mask[:, None, None, ks:ke], scale=scale)  # (B, 1, rows, keys)


def _interior(L: int, half: int, right: int, b: int) -> range:
    """Blocks whose whole tile [s - half, s + b + right) lies inside [0, L) (may be empty)."""
    return range(-(-half // b), (L - right) // b)


def blocked_window(q, k, v, half: int, causal: bool, key_mask, block_size: int, scale) -> torch.Tensor:
    """The ``"blocked"`` kernel (unchecked): interior blocks batched on one shared tile mask.

    In tile coordinates (row r = query s + r, column c = key s - half + c) query r sees columns
    r .. r + half + right, the same for every interior block.
    """
    B, H, L, _ = q.shape
    right, b = (0 if causal else half), block_size
    W = b + half + right  # keys per tile
    out = q.new_empty(B, H, L, v.shape[-1])  # (B, H, L, d_v): the only O(L) allocation
    inner = _interior(L, half, right, b) if key_mask is None else range(0)
    if len(inner) == 0:  # padding, or a sequence too short for interior blocks: one call per block
        for s in range(0, L, b):
            _region(q, k, v, out, s, min(L, s + b), half, right, key_mask, scale)
        return out
    tile_bias = _tile_bias(b, W, 0, half + right, q)  # (b, W)
    chunk = max(1, _CHUNK_ROWS // b)
    for bi in range(B):
        for c0 in range(inner.start, inner.stop, chunk):
            c1 = min(inner.stop, c0 + chunk)
            s0, s1 = c0 * b, c1 * b
            qt = q[bi, :, s0:s1].reshape(H, c1 - c0, b, q.shape[-1])  # (H, blocks, b, d_k), a view
            kt, vt = (_tiles(x[bi], s0 - half, c1 - c0, b, W) for x in (k, v))  # (H, blocks, W, d), views
            o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=tile_bias, scale=scale)  # (H, blocks, b, d_v)
            out[bi, :, s0:s1] = o.reshape(H, s1 - s0, -1)  # (H, blocks * b, d_v)
    # the two ends: one call each, on the queries before and after the interior blocks
    for s, e in ((0, inner.start * b), (inner.stop * b, L)):
        if e > s:
            _region(q, k, v, out, s, e, half, right, None, scale)
    return out
