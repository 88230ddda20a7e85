"""The sliding window: query i attends to keys with ``|i - j| <= window // 2`` (chapter 8).

:func:`sliding_window_attention` checks its input once and dispatches to a kernel:

* ``"blocked"`` - blocks of ``block_size`` queries on their own key tiles, batched through
  strided views (:mod:`.blocked`). Works on every device and with gradients; on a CPU, when no
  gradient is wanted, its tiles are computed by hand (:mod:`.tiles`), faster than fused SDPA.
* ``"flex"`` - ``torch.compile(flex_attention)`` with a window block mask (:mod:`.flex`);
  opt-in (compiling takes tens of seconds), falls back to ``"blocked"`` where it cannot run.
* ``"fused"`` - the tile steps of :mod:`.tiles` compiled into one C++ loop over the blocks
  (:mod:`.fused`): CPU, float32, no padding, no autograd; opt-in (the first build takes about ten
  seconds), other calls and machines without a C++ compiler take ``"blocked"``.
* ``"dense"`` - dense SDPA with the (n, n) band mask: the quadratic baseline.
* ``"auto"`` - ``"dense"`` when the band covers most of the matrix anyway, else ``"blocked"``.

Every kernel equals :func:`~transformer_lib.sparse.sliding_window_reference`, the readable loop
of chapter 8 (the tests hold them to 1e-5 in float32).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import attention_fast
from ..masks import _band
from .._checks import check_choice, check_sparse_call
from .blocked import blocked_window
from .flex import flex_window
from .fused import fused_window
from .patterns import DEFAULT_BLOCK_SIZE, _band_count

__all__ = ["sliding_window_attention", "WINDOW_KERNELS"]

WINDOW_KERNELS = ("auto", "blocked", "flex", "fused", "dense")


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             causal: bool = False, *, key_mask: torch.Tensor | None = None,
                             kernel: str = "auto", block_size: int = DEFAULT_BLOCK_SIZE,
                             scale: float | None = None) -> torch.Tensor:
    """Each query i attends to keys with ``|i - j| <= window // 2`` (causal: ``i - window // 2 <= j <= i``).

    Args:
        q, k, v: (B, H, L, d_k), (B, H, L, d_k), (B, H, L, d_v).
        window: the band's width w >= 1; a query sees ``2 * (w // 2) + 1`` keys (``w // 2 + 1`` causal).
        causal: keep only the past half of the band.
        key_mask: optional (B, L) boolean, ``True = real token`` (padding is False).
        kernel: ``"auto"``, ``"blocked"``, ``"flex"``, ``"fused"`` or ``"dense"`` (see the module docstring).
        block_size: query rows per tile in the ``"blocked"`` and ``"fused"`` kernels.
        scale: score multiplier, default ``1 / sqrt(d_k)``.

    Returns:
        (B, H, L, d_v), equal to dense attention with ``sliding_window_mask(L, window, causal)``.
    """
    B, H, L, key_mask = check_sparse_call(q, k, v, key_mask, causal, scale, window=window, block_size=block_size)
    check_choice("kernel", kernel, WINDOW_KERNELS)
    return window_attention(q, k, v, window // 2, causal, key_mask, kernel, block_size, scale)


def window_attention(q, k, v, half: int, causal: bool, key_mask, kernel: str, block_size: int,
                     scale) -> torch.Tensor:
    """Unchecked core of :func:`sliding_window_attention` (``key_mask`` already (B, L) or None)."""
    L = q.shape[2]
    if kernel == "auto":
        # when the band covers most of the matrix, skipping the rest saves little: one dense call
        kernel = "dense" if _band_count(L, half, causal) > 0.5 * L * L else "blocked"
    if kernel == "flex":
        out = flex_window(q, k, v, half, causal, key_mask, scale)
        if out is not None:
            return out
        kernel = "blocked"  # flex unavailable here: flex_window has warned once
    if kernel == "fused":
        out = fused_window(q, k, v, half, 0 if causal else half, key_mask, block_size, scale)
        if out is not None:
            return out
        kernel = "blocked"  # another device, dtype, padding or autograd; or the build failed (warned once)
    if kernel == "dense":
        mask = _band(L, half, 0 if causal else half, q.device)  # (L, L): quadratic memory
        if key_mask is None:  # every row sees at least itself: plain SDPA is safe
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        else:
            mask = mask & key_mask[:, None, None, :]  # (B, 1, L, L)
            out = attention_fast(q, k, v, mask, scale=scale)
        return _nan_where_every_score_is_minus_inf(out, q, k, mask, scale)
    return blocked_window(q, k, v, half, causal, key_mask, block_size, scale)


def _nan_where_every_score_is_minus_inf(out, q, k, mask, scale) -> torch.Tensor:
    """NaN for a row that sees keys but whose every visible score is -inf (an inf in q or k).

    Its softmax is 0/0: the readable path (and the blocked and fused kernels) give NaN, but
    PyTorch's SDPA gives such a row zeros, a plausible wrong number. Only rows SDPA left exactly
    zero can be such rows, so only their scores are computed, one (batch, head) at a time."""
    silent = (out == 0).all(-1)  # (B, H, L)
    if not silent.any():
        return out
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    mask = mask.expand(*out.shape[:2], *mask.shape[-2:])  # (B, H, L, L)
    poisoned = torch.zeros_like(silent)
    for b, h in silent.nonzero()[:, :2].unique(dim=0).tolist():
        rows = silent[b, h].nonzero().squeeze(-1)  # (n,)
        scores = (q[b, h, rows] @ k[b, h].transpose(-1, -2)) * scale  # (n, d) @ (d, L) -> (n, L)
        seen = mask[b, h, rows]  # (n, L)
        poisoned[b, h, rows] = seen.any(-1) & ~(seen & (scores > float("-inf"))).any(-1)
    return out.masked_fill(poisoned[..., None], float("nan"))
