"""The readable sliding-window kernel: the loop chapter 8 builds by hand, kept as the reference.

Every fast kernel in this package is tested against it (and it against dense attention with the
band mask). It is slow on purpose: one Python iteration per block of queries, each block's
scores written out by :func:`transformer_lib.scaled_dot_product_attention`.
"""
from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from .._checks import check_sparse_call
from .patterns import DEFAULT_BLOCK_SIZE

__all__ = ["sliding_window_reference"]


def sliding_window_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             causal: bool = False, *, key_mask: torch.Tensor | None = None,
                             block_size: int = DEFAULT_BLOCK_SIZE, scale: float | None = None) -> torch.Tensor:
    """Sliding-window attention, one block of queries at a time (chapter 8, "A kernel that
    computes only the band").

    Query i sees the keys j with ``-right <= i - j <= half``, where ``half = window // 2`` and
    ``right = 0`` if causal else ``half``. So the block of queries ``[s, e)`` can only see keys
    ``[s - half, e + right)``: a tile of at most ``block_size + half + right`` keys. The block
    attends to its tile with the band written as a mask in tile coordinates, and never looks at
    any other key: about ``n * (w + block_size)`` scores in all, instead of ``n^2``.

    q, k, v: (B, H, L, d_k), (B, H, L, d_k), (B, H, L, d_v); key_mask: optional (B, L) with
    True = real token (a query that sees no real key gets a zero output). Returns (B, H, L, d_v),
    equal to dense attention with ``sliding_window_mask(L, window, causal)``.
    """
    B, H, L, key_mask = check_sparse_call(q, k, v, key_mask, causal, scale, window=window,
                                          block_size=block_size)
    half = window // 2
    right = 0 if causal else half
    out = q.new_zeros(B, H, L, v.shape[-1])  # (B, H, L, d_v)
    for s in range(0, L, block_size):
        e = min(L, s + block_size)  # queries [s, e)
        ks, ke = max(0, s - half), min(L, e + right)  # the only keys they can see: [ks, ke)
        i = torch.arange(s, e, device=q.device).unsqueeze(1)  # (b, 1) query positions
        j = torch.arange(ks, ke, device=q.device).unsqueeze(0)  # (1, tile) key positions
        band = (i - j <= half) & (i - j >= -right)  # (b, tile): the band inside the tile
        if key_mask is not None:
            band = band & key_mask[:, None, None, ks:ke]  # (B, 1, b, tile): padding keys hidden
        block_out, _ = scaled_dot_product_attention(q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke],  # (B, H, b, d)
                                                    band, scale=scale)
        out[:, :, s:e] = block_out  # (B, H, b, d_v)
    return out
