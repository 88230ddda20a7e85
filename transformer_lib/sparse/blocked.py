"""The ``"blocked"`` sliding-window kernel: blocks of queries on their own key tiles, batched.

It cuts the queries into blocks of b rows and gives each block only its own tile of keys, as
:func:`~transformer_lib.sparse.sliding_window_reference` does, but without a Python iteration
per block: the tiles of all *interior* blocks (those whose tile lies inside the sequence) are
overlapping windows of k and v, which ``as_strided`` exposes as one (H, blocks, width, d) view
without copying, and one fused SDPA call treats the blocks like extra heads. The few blocks at
the two ends take one call per end, and a padded batch one call per block, each with its own mask.
Every interior block sees the same pattern in tile coordinates, so one additive tile mask
serves them all. It works on every device, with padding and with gradients.

On a CPU, when no gradient is wanted, the interior tiles skip SDPA and go through
:mod:`.tiles`, which does the tile's three steps by hand and leaves out the work SDPA's general
softmax must do (the max, base e, normalizing every weight).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import attention_fast
from .tiles import hand_tiles_apply, hand_window, tile_bias, windows

__all__: list[str] = []  # reached through sliding_window_attention(kernel="blocked")

_CHUNK_ROWS = 4096  # queries per batched SDPA call: bounds the temporary output (8 MB at 8 heads x 64)


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
    inner = _interior(L, half, right, b) if key_mask is None else range(0)
    if len(inner) == 0:  # padding, or a sequence too short for interior blocks: one call per block
        out = q.new_empty(B, H, L, v.shape[-1])  # (B, H, L, d_v)
        for s in range(0, L, b):
            _region(q, k, v, out, s, min(L, s + b), half, right, key_mask, scale)
        return out
    if hand_tiles_apply(q, k, v):  # a CPU, no autograd: the tiles by hand (.tiles)
        return hand_window(q, k, v, half, right, b, inner, scale)
    out = q.new_empty(B, H, L, v.shape[-1])  # (B, H, L, d_v): the only O(L) allocation
    _interior_sdpa(q, k, v, out, half, right, b, inner, scale)
    # the two ends: one call each, on the queries before and after the interior blocks
    for s, e in ((0, inner.start * b), (inner.stop * b, L)):
        if e > s:
            _region(q, k, v, out, s, e, half, right, None, scale)
    return out


def _interior_sdpa(q, k, v, out, half: int, right: int, b: int, inner: range, scale) -> None:
    """The interior blocks through fused SDPA, ``_CHUNK_ROWS`` queries per call (any device, autograd)."""
    B, H = q.shape[:2]
    W = b + half + right
    bias = tile_bias(b, W, 0, half + right, q)  # (b, W)
    chunk = max(1, _CHUNK_ROWS // b)
    for bi in range(B):
        for c0 in range(inner.start, inner.stop, chunk):
            c1 = min(inner.stop, c0 + chunk)
            s0, s1 = c0 * b, c1 * b
            qt = q[bi, :, s0:s1].reshape(H, c1 - c0, b, q.shape[-1])  # (H, blocks, b, d_k), a view
            kt, vt = (windows(x[bi], s0 - half, c1 - c0, b, W) for x in (k, v))  # (H, blocks, W, d), views
            o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias, scale=scale)  # (H, blocks, b, d_v)
            out[bi, :, s0:s1] = o.reshape(H, s1 - s0, -1)  # (H, blocks * b, d_v)
