"""Dilated attention: query i attends to the keys with ``(j - i) % dilation == 0`` (chapter 8).

The pattern splits the sequence into ``d`` interleaved subsequences ``r, r + d, r + 2d, ...``;
attention never crosses between them and is *dense* inside each. So the ``"strided"`` kernel
regroups the positions, runs one dense SDPA per group of equally long subsequences and scatters
the results back: about n^2 / d scores and no mask at all (``is_causal`` keeps the order inside a
subsequence). ``"dense"`` is the masked reference; ``"auto"`` is ``"strided"``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import attention_fast
from ..masks import _same_residue
from .._checks import check_choice, check_sparse_call

__all__ = ["dilated_attention", "DILATED_KERNELS"]

DILATED_KERNELS = ("auto", "strided", "dense")


def dilated_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dilation: int,
                      causal: bool = False, *, key_mask: torch.Tensor | None = None,
                      kernel: str = "auto", scale: float | None = None) -> torch.Tensor:
    """Query i attends to keys with ``(j - i) % dilation == 0`` (causal: also ``j <= i``).

    q, k, v: (B, H, L, d_k), (B, H, L, d_k), (B, H, L, d_v); key_mask: optional (B, L), True =
    real token. Returns (B, H, L, d_v), equal to dense attention with
    ``dilated_mask(L, dilation, causal)``.
    """
    B, H, L, key_mask = check_sparse_call(q, k, v, key_mask, causal, scale, dilation=dilation)
    check_choice("kernel", kernel, DILATED_KERNELS)
    d = dilation
    if kernel == "dense":
        mask = _same_residue(L, d, causal, q.device)  # (L, L): quadratic memory
        if key_mask is None:  # every row sees at least itself
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return attention_fast(q, k, v, mask & key_mask[:, None, None, :], scale=scale)  # (B, 1, L, L)
    if d == 1:  # one subsequence: plain full attention
        return _dense_group(q, k, v, causal, None if key_mask is None else key_mask[:, None, :], scale)
    m = -(-L // d)  # positions per subsequence, rounding up: L = (m - 1) d + rem
    rem = L - (m - 1) * d  # how many residues r get the full m positions (1 <= rem <= d)
    pad = m * d - L  # 0 when d divides L: then nothing below copies q, k or v

    def regroup(x):  # (B, H, L, e) -> (B*H, d, m, e): "head" r of batch row b*H + h is subsequence r
        if pad:
            x = F.pad(x, (0, 0, 0, pad))  # (B, H, m * d, e): zero rows at the end, never attended
        # a view, not a copy: the layout SDPA gets from the usual (B, L, H, e).transpose(1, 2)
        return x.reshape(B * H, m, d, x.shape[-1]).transpose(1, 2)  # (B*H, m, d, e) -> (B*H, d, m, e)

    qg, kg, vg = regroup(q), regroup(k), regroup(v)
    kmg = None
    if key_mask is not None:
        kmg = F.pad(key_mask, (0, pad)).reshape(B, 1, m, d).transpose(2, 3)  # (B, 1, d, m)
        kmg = kmg.expand(B, H, d, m).reshape(B * H, d, m)  # (B*H, d, m): one row per subsequence
    out = q.new_empty(B, H, m * d, v.shape[-1])  # (B, H, m*d, d_v)
    out_g = out.view(B * H, m, d, v.shape[-1]).transpose(1, 2)  # (B*H, d, m, d_v), a view of out
    # residues 0..rem-1 hold m positions, residues rem..d-1 hold m - 1 (their last row is padding)
    for lo, hi, length in ((0, rem, m), (rem, d, m - 1)):
        if hi <= lo or length == 0:
            continue
        km = None if kmg is None else kmg[:, lo:hi, :length]  # (B*H, hi - lo, length)
        sub = (slice(None), slice(lo, hi), slice(0, length))  # residues lo..hi-1, first `length` rows
        out_g[sub] = _dense_group(qg[sub], kg[sub], vg[sub], causal, km, scale)  # (B*H, hi-lo, length, d_v)
    return out[:, :, :L] if pad else out


def _dense_group(q, k, v, causal: bool, key_mask, scale) -> torch.Tensor:
    """Dense attention over (B, G, n, e) with an optional key mask broadcastable to (B, G, n)."""
    if key_mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    n = q.shape[2]
    mask = key_mask[:, :, None, :]  # (B, G, 1, n)
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (B, G, n, n)
    return attention_fast(q, k, v, mask, scale=scale)
