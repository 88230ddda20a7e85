"""Scaled dot-product attention, written out, plus a fast path through torch's SDPA.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V

The readable path (:func:`scaled_dot_product_attention`) materializes the score matrix so the
book can plot the weights. The fast path (:func:`attention_fast`) calls
``torch.nn.functional.scaled_dot_product_attention``, which uses fused / flash kernels and never
returns weights. A test holds the two equal.

Masks are boolean with ``True = may attend`` (see :mod:`transformer_lib.masks`). Blocked scores
become ``-inf`` rather than a large finite negative number, so a blocked key gets *exactly* zero
weight. A query row with no visible key at all would be ``softmax([-inf, ..., -inf]) = NaN``; we
define its weights and output as zero instead, and we do it without ever computing the NaN, so
gradients stay finite too.

Each public function checks its input once (:mod:`transformer_lib._checks`) and hands it to a
private core (``_attention``, ``_attention_fast``) that does not check again; modules that have
already checked their input, like :class:`~transformer_lib.multihead.MultiHeadAttention`, call
the cores directly.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import check_mask, check_qkv

__all__ = ["scaled_dot_product_attention", "attention_fast"]


def _visible_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(..., L_q, 1) True where the query row can see at least one key."""
    return None if mask is None else mask.any(dim=-1, keepdim=True)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention written out: returns ``(output, weights)``.

    Args:
        q: (..., L_q, d_k) queries, usually (B, H, L_q, d_k).
        k: (..., L_k, d_k) keys.
        v: (..., L_k, d_v) values.
        mask: optional boolean, ``True = may attend``, broadcastable to (..., L_q, L_k).
        scale: multiplier of the scores; default ``1 / sqrt(d_k)``. Pass ``1.0`` to see what
            happens without the scaling (chapter 1).
        bias: optional additive float bias on the scores (ALiBi, relative positions).
        dropout_p: dropout on the weights (training only; 0 in all the book's comparisons).
        need_weights: when False, take the fast path and return ``(output, None)``.

    Returns:
        output (..., L_q, d_v) and weights (..., L_q, L_k); each weight row sums to 1, or is all
        zeros when the mask leaves the row nothing to attend to.
    """
    check_mask(mask, check_qkv(q, k, v))  # the one check; the cores below trust their input
    if not need_weights:
        return _attention_fast(q, k, v, mask, scale, bias, dropout_p), None
    return _attention(q, k, v, mask, scale, bias, dropout_p)


def _attention(q, k, v, mask, scale, bias, dropout_p) -> tuple[torch.Tensor, torch.Tensor]:
    """The readable core of :func:`scaled_dot_product_attention`, without input checks."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., L_q, d_k) @ (..., d_k, L_k) -> (..., L_q, L_k)
    if bias is not None:
        scores = scores + bias
    visible = _visible_rows(mask)
    if mask is not None:
        # Rows that see nothing keep finite scores (no NaN is ever formed) and are zeroed below.
        scores = scores.masked_fill(~(mask | ~visible), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if visible is not None:
        weights = weights * visible  # fully masked rows -> all-zero weights
    weights_used = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    output = weights_used @ v  # (..., L_q, L_k) @ (..., L_k, d_v) -> (..., L_q, d_v)
    return output, weights


def attention_fast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                   *, scale: float | None = None, bias: torch.Tensor | None = None,
                   dropout_p: float = 0.0) -> torch.Tensor:
    """Same result as :func:`scaled_dot_product_attention` through ``F.scaled_dot_product_attention``.

    Returns only the output (..., L_q, d_v). Fully masked rows give zeros, as in the readable path.
    """
    check_mask(mask, check_qkv(q, k, v))
    return _attention_fast(q, k, v, mask, scale, bias, dropout_p)


def _attention_fast(q, k, v, mask, scale, bias, dropout_p, enable_gqa: bool = False) -> torch.Tensor:
    """The core of :func:`attention_fast`, without input checks. ``enable_gqa``: k and v have fewer
    heads than q, each shared by ``H / H_kv`` query heads (grouped-query attention)."""
    if mask is not None and mask.dim() < 2:
        mask = mask.unsqueeze(0)  # (L_k,) -> (1, L_k): SDPA wants at least a 2-D mask
    visible = _visible_rows(mask)
    attn_mask = None if mask is None else (mask | ~visible)
    if bias is not None:
        bias = bias.to(q.dtype)
        attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
    if enable_gqa:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale,
                                             enable_gqa=True)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    if visible is not None:
        out = out * visible
    return out
