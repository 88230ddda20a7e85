"""Exact attention in linear memory: the online softmax and FlashAttention's tiling, written out.

Readable attention (:func:`transformer_lib.attention.scaled_dot_product_attention`) builds the
whole (L_q, L_k) score matrix, so its memory grows like n^2. Nothing in the result needs it: each
output row is a weighted average of value rows, and a softmax can be computed one block of scores
at a time if we keep, per query row, a running maximum ``m`` and a running sum ``l``:

    m_new = max(m, max_j s_j)                              (the block's scores s_j)
    l_new = exp(m - m_new) * l + sum_j exp(s_j - m_new)
    o_new = exp(m - m_new) * o + sum_j exp(s_j - m_new) v_j

When the maximum grows, everything accumulated so far was computed against a smaller maximum,
so it is rescaled by ``exp(m - m_new) <= 1``. At the end ``o / l`` is the attention output and
``m + log(l)`` the row's log-sum-exp (lse). Two partial results over disjoint key sets merge
exactly with their lse (:func:`merge_partial_attention`), which is what lets a sequence be split
across devices (split-K, ring attention).

:func:`tiled_attention` is a readable *forward* pass in pure PyTorch: a Python loop over query
blocks and key blocks, each tile a (block_q, block_k) score matrix that lives only for one step.
Its peak memory is linear in n, but its wall time is set by the Python loop and the many small
kernels: a fused kernel (torch's SDPA, FlashAttention) does the same loop in registers and
on-chip memory. Chapter 11 ("Exact attention in linear memory") teaches every function here; the tests hold
:func:`tiled_attention` equal to the readable path.

Conventions as everywhere in the library: q (..., L_q, d_k), k (..., L_k, d_k), v (..., L_k, d_v);
masks boolean with ``True = may attend``, broadcastable to (..., L_q, L_k); a query row with no
visible key gives a zero output (and an lse of ``-inf``), never NaN. A NaN in the input gives NaN
in the rows it reaches, exactly as in the readable attention: "no visible key" is decided by the
running max staying ``-inf``, not by ``l > 0`` (which is also False for NaN). ``causal=True`` is the
library's :func:`transformer_lib.masks.causal_mask`: query ``i`` sees keys
``j <= i + (L_k - L_q)`` (the diagonal aligned to the end, as with a KV cache).
"""
from __future__ import annotations

import math

import torch

from ._checks import (check_bool, check_causal_lengths, check_int, check_mask, check_nonempty_qkv,
                      check_online_softmax_state, check_partial_attention, check_qkv, check_same_dtype, check_softmax_scores)

__all__ = ["online_softmax_step", "online_softmax", "tiled_attention", "merge_partial_attention",
           "tile_schedule", "count_tiles"]


def _check_block(name: str, value) -> int:
    check_int(name, value)
    return value


def _check_lengths(L_q, L_k, causal) -> None:
    """Sequence lengths >= 1; with ``causal`` at least as many keys as queries (as
    :func:`transformer_lib.masks.causal_mask`: otherwise the first queries would see no key)."""
    check_int("L_q", L_q)
    check_int("L_k", L_k)
    check_bool("causal", causal)
    if causal:
        check_causal_lengths(L_q, L_k)


def _safe_shift(m: torch.Tensor) -> torch.Tensor:
    """The running max, with ``-inf`` (nothing visible yet) replaced by 0 so that exp never sees inf - inf."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


# --------------------------------------------------------------------------------------------
# The online softmax (chapter 11, "The online softmax, two blocks by hand")
# --------------------------------------------------------------------------------------------

def online_softmax_step(running_max: torch.Tensor, running_sum: torch.Tensor,
                        scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One update of the online softmax: fold a new block of ``scores`` into ``(m, l)``.

    Args:
        running_max: (...,) the largest score seen so far per row (``-inf`` before the first).
        running_sum: (...,) ``sum exp(s - running_max)`` over the scores seen so far.
        scores: (..., block) the next block of scores of the same rows; ``-inf`` = masked.

    Returns ``(m_new, l_new)`` with ``l_new = exp(m - m_new) * l + sum exp(scores - m_new)``.
    Every exponent is ``<= 0``, so nothing overflows, whatever the scores' size.
    """
    check_online_softmax_state(running_max, running_sum, scores)
    m_new = torch.maximum(running_max, scores.amax(dim=-1))  # (...,)
    shift = _safe_shift(m_new)
    rescale = torch.exp(running_max - shift)  # exp(m - m_new) <= 1; 0 while nothing was visible
    l_new = rescale * running_sum + torch.exp(scores - shift.unsqueeze(-1)).sum(dim=-1)
    return m_new, l_new


def online_softmax(scores: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Softmax over the last dim, with max and normalizer found in one pass over blocks of ``block``.

    The pass over blocks gives ``m`` and ``l`` (:func:`online_softmax_step`); the weights are then
    ``exp(s - m) / l``. Rows whose scores are all ``-inf`` (fully masked) give zeros. Equal to
    ``torch.softmax`` up to rounding; the point is that ``m`` and ``l`` never needed the whole row
    at once, which is what :func:`tiled_attention` exploits.
    """
    _check_block("block", block)
    check_softmax_scores(scores)
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block):
        m, l = online_softmax_step(m, l, scores[..., start:start + block])
    weights = torch.exp(scores - _safe_shift(m).unsqueeze(-1))  # (..., n); 0 where masked
    nothing = torch.isneginf(m)  # a fully masked row (a NaN row keeps its NaN)
    return weights / torch.where(nothing, torch.ones_like(l), l).unsqueeze(-1)


# --------------------------------------------------------------------------------------------
# Which tiles are computed (chapter 11, "Causal block skipping")
# --------------------------------------------------------------------------------------------

def tile_schedule(L_q: int, L_k: int, block_q: int = 64, block_k: int = 64,
                  causal: bool = False) -> list[tuple[int, int, int, int]]:
    """The tiles ``(q_start, q_end, k_start, k_end)`` that :func:`tiled_attention` computes, in order.

    With ``causal=True`` a key block is skipped when every one of its keys lies after the last key
    that the query block's last row may see (``k_start > q_end - 1 + L_k - L_q``): the causal mask
    hides the whole tile, so it would contribute exactly nothing.
    """
    _check_lengths(L_q, L_k, causal)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    return [(q_start, min(q_start + block_q, L_q), k_start, k_end)
            for q_start in range(0, L_q, block_q)
            for k_start, k_end in _key_blocks(q_start, min(q_start + block_q, L_q), L_q, L_k, block_k, causal)]


def _key_blocks(q_start: int, q_end: int, L_q: int, L_k: int, block_k: int, causal: bool):
    """The key blocks ``(k_start, k_end)`` that query rows ``q_start:q_end`` need."""
    last_visible_key = q_end - 1 + (L_k - L_q)  # the causal limit of the block's last row
    for k_start in range(0, L_k, block_k):
        if causal and k_start > last_visible_key:
            return  # this key block and all later ones are hidden from every row of the block
        yield k_start, min(k_start + block_k, L_k)


def count_tiles(L_q: int, L_k: int, block_q: int = 64, block_k: int = 64,
                causal: bool = False) -> tuple[int, int]:
    """``(computed, total)``: tiles that :func:`tiled_attention` computes, and all tiles of the grid."""
    computed = len(tile_schedule(L_q, L_k, block_q, block_k, causal))  # checks every argument
    return computed, math.ceil(L_q / block_q) * math.ceil(L_k / block_k)


# --------------------------------------------------------------------------------------------
# Tiled attention (chapter 11, "Tiled attention in twenty lines")
# --------------------------------------------------------------------------------------------

def _mask_tile(mask: torch.Tensor | None, q_slice: slice, k_slice: slice) -> torch.Tensor | None:
    """The (..., bq, bk) part of a broadcastable mask; a size-1 axis is kept as is (it broadcasts)."""
    if mask is None:
        return None
    rows = q_slice if mask.shape[-2] != 1 else slice(None)
    cols = k_slice if mask.shape[-1] != 1 else slice(None)
    return mask[..., rows, cols]


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                    causal: bool = False, block_q: int = 64, block_k: int = 64, return_lse: bool = False):
    """Exact softmax attention, computed tile by tile with an online softmax.

    Args:
        q: (..., L_q, d_k) queries, usually (B, H, L_q, d_k); k: (..., L_k, d_k); v: (..., L_k, d_v).
        mask: optional boolean, ``True = may attend``, broadcastable to (..., L_q, L_k).
        causal: also apply :func:`transformer_lib.masks.causal_mask` (and skip hidden tiles).
        block_q, block_k: tile size; any integer >= 1 (they need not divide the lengths).
        return_lse: also return the log-sum-exp of each query row's scaled scores.

    Returns:
        the output (..., L_q, d_v) in q's dtype, and with ``return_lse`` the lse (..., L_q) in
        float32 or float64 (``-inf`` for a row with nothing to attend to).

    Memory: besides q, k, v and the output, one (..., block_q, block_k) tile of scores and the
    (..., block_q, d_v) accumulator; never the (L_q, L_k) matrix. Half-precision inputs are
    accumulated in float32, as fused kernels do. Differentiable: the backward pass is tiled too
    and recomputes each tile from the saved lse (see ``_TiledAttention``).
    """
    for name, value in (("causal", causal), ("return_lse", return_lse)):
        check_bool(name, value)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    scores_shape = check_qkv(q, k, v)  # scores (..., L_q, L_k), batch dims broadcast; floating q, k, v
    check_same_dtype(q, k, v)
    check_nonempty_qkv(q, k, v)
    if causal:
        check_causal_lengths(q.shape[-2], k.shape[-2])
    check_mask(mask, scores_shape)
    if mask is not None:
        mask = mask.to(q.device).reshape((1,) * max(0, 2 - mask.dim()) + tuple(mask.shape))  # at least (1, L_k)
    out, lse = _TiledAttention.apply(q, k, v, mask, causal, block_q, block_k)
    return (out, lse) if return_lse else out


def _prepare(q, k, v):
    """Inputs in the working dtype, broadcast to common batch dims; q pre-multiplied by 1/sqrt(d_k)."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1])
    q = (q.to(work) * scale).expand(*batch, *q.shape[-2:])  # (..., L_q, d_k), scaled once, not once per tile
    k = k.to(work).expand(*batch, *k.shape[-2:])  # (..., L_k, d_k)
    v = v.to(work).expand(*batch, *v.shape[-2:])  # (..., L_k, d_v)
    return q, k, v, scale


def _tile_visible(mask, causal, q_start, q_end, k_start, k_end, L_q, L_k, device):
    """Boolean (..., bq, bk) of the tile's visible pairs, or None when all of them are visible."""
    visible = _mask_tile(mask, slice(q_start, q_end), slice(k_start, k_end))
    if causal and k_end - 1 > q_start + (L_k - L_q):  # the tile crosses the diagonal: mask part of it
        rows = torch.arange(q_start, q_end, device=device)[:, None] + (L_k - L_q)  # last visible key per row
        below = torch.arange(k_start, k_end, device=device)[None, :] <= rows  # (bq, bk)
        visible = below if visible is None else visible & below
    return visible


def _forward(q, k, v, mask, causal, block_q, block_k):
    """The tiled forward pass (no autograd): returns ``out`` (..., L_q, d_v) and ``lse`` (..., L_q)."""
    q, k, v, _ = _prepare(q, k, v)
    *batch, L_q, _ = q.shape
    L_k, d_v = v.shape[-2:]
    out = torch.empty(*batch, L_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(*batch, L_q, dtype=q.dtype, device=q.device)
    for q_start in range(0, L_q, block_q):
        q_end = min(q_start + block_q, L_q)
        q_blk = q[..., q_start:q_end, :]  # (..., bq, d_k)
        m = torch.full((*batch, q_end - q_start, 1), float("-inf"), dtype=q.dtype, device=q.device)  # running max
        l = torch.zeros_like(m)  # (..., bq, 1) running sum of exp(s - m)
        acc = torch.zeros(*batch, q_end - q_start, d_v, dtype=q.dtype, device=q.device)  # unnormalized output
        has_key = None if mask is None else torch.zeros_like(m, dtype=torch.bool)  # (..., bq, 1) some key visible
        for k_start, k_end in _key_blocks(q_start, q_end, L_q, L_k, block_k, causal):  # see tile_schedule
            s = q_blk @ k[..., k_start:k_end, :].transpose(-2, -1)  # (..., bq, d_k) @ (..., d_k, bk) -> (..., bq, bk)
            visible = _tile_visible(mask, causal, q_start, q_end, k_start, k_end, L_q, L_k, q.device)
            if visible is not None:
                s.masked_fill_(~visible, float("-inf"))  # in place: s is this tile's own buffer
            if has_key is not None:
                has_key |= visible.any(dim=-1, keepdim=True) if visible is not None else True
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            shift = _safe_shift(m_new)
            p = s.sub_(shift).exp_()  # (..., bq, bk) = exp(s - m_new), exactly 0 where masked; reuses s
            rescale = torch.exp(m - shift)  # (..., bq, 1): the old max was smaller -> shrink the past
            l.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))  # l = rescale * l + row sums
            acc.mul_(rescale).add_(p @ v[..., k_start:k_end, :])  # (..., bq, bk) @ (..., bk, d_v) -> (..., bq, d_v)
            m = m_new
        seen = ~torch.isneginf(m)  # (..., bq, 1) False for a row whose visible scores were all -inf
        l_safe = torch.where(seen, l, torch.ones_like(l))
        # no visible key: zeros. Keys visible but every score -inf (an inf in q or k): NaN, as the
        # readable softmax gives. A NaN score makes m NaN, so "seen" and the output NaN.
        if has_key is None:  # no mask: with causal and L_k >= L_q every row sees at least one key
            empty = torch.full((), float("nan"), dtype=q.dtype, device=q.device)
        else:
            empty = torch.where(has_key, float("nan"), 0.0)  # (..., bq, 1)
        out[..., q_start:q_end, :] = torch.where(seen, acc / l_safe, empty)
        lse[..., q_start:q_end] = torch.where(seen, _safe_shift(m) + torch.log(l_safe), float("-inf")).squeeze(-1)
    return out, lse


class _TiledAttention(torch.autograd.Function):
    """Forward tile by tile; backward tile by tile too, recomputing each tile's weights from the lse.

    The backward of FlashAttention (Dao et al., 2022, Algorithm 4): with ``P = exp(S - lse)`` and
    ``D = rowsum(dO * O)`` (``= sum_j P_ij dP_ij``), each tile gives ``dV += P^T dO``,
    ``dS = P * (dO V^T - D + d_lse)``, ``dQ += dS K``, ``dK += dS^T Q`` (times the scale). No
    (L_q, L_k) matrix is stored for the backward either: only ``out`` and ``lse``.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, block_q, block_k):
        out, lse = _forward(q, k, v, mask, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (mask, causal, block_q, block_k)
        return out.to(v.dtype), lse  # back to half precision if that is what came in

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q_in, k_in, v_in, out, lse = ctx.saved_tensors
        mask, causal, block_q, block_k = ctx.settings
        q, k, v, scale = _prepare(q_in, k_in, v_in)
        *batch, L_q, _ = q.shape
        L_k = k.shape[-2]
        d_out = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype).expand_as(out)
        d_lse = torch.zeros_like(lse) if d_lse is None else d_lse.to(lse.dtype).expand_as(lse)
        delta = (d_out * out).sum(dim=-1) - d_lse  # (..., L_q): D minus the lse's own gradient
        shift = _safe_shift(lse)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for q_start, q_end, k_start, k_end in tile_schedule(L_q, L_k, block_q, block_k, causal):
            rows, cols = slice(q_start, q_end), slice(k_start, k_end)
            s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1)  # (..., bq, bk), recomputed
            visible = _tile_visible(mask, causal, q_start, q_end, k_start, k_end, L_q, L_k, q.device)
            if visible is not None:
                s.masked_fill_(~visible, float("-inf"))
            p = torch.exp(s - shift[..., rows, None])  # (..., bq, bk): the final weights of this tile
            dv[..., cols, :] += p.transpose(-2, -1) @ d_out[..., rows, :]  # (..., bk, bq) @ (..., bq, d_v)
            dp = d_out[..., rows, :] @ v[..., cols, :].transpose(-2, -1)  # (..., bq, d_v) @ (..., d_v, bk)
            ds = p * (dp - delta[..., rows, None])  # (..., bq, bk) gradient of the scaled scores
            dq[..., rows, :] += ds @ k[..., cols, :]  # (..., bq, bk) @ (..., bk, d_k)
            dk[..., cols, :] += ds.transpose(-2, -1) @ q[..., rows, :]  # (..., bk, bq) @ (..., bq, d_k); q is scaled
        dq = (dq * scale).sum_to_size(q_in.shape).to(q_in.dtype)
        return (dq, dk.sum_to_size(k_in.shape).to(k_in.dtype), dv.sum_to_size(v_in.shape).to(v_in.dtype),
                None, None, None, None)


# --------------------------------------------------------------------------------------------
# Merging partial results (chapter 11, "Merging partial attentions")
# --------------------------------------------------------------------------------------------

def merge_partial_attention(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                            lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine attention over two disjoint key sets A and B into attention over A and B.

    Each part is normalized over its own keys: ``out_a = sum_A exp(s - lse_a) v``. Over A and B
    together the normalizer is ``lse = log(exp(lse_a) + exp(lse_b))``, so

        out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b.

    Exact (up to rounding), in any order and any number of times: the basis of split-K decoding
    and of ring attention across devices. Shapes: outputs (..., L_q, d_v), lse (..., L_q). A part
    that saw no key has ``lse = -inf`` and weight 0.
    """
    check_partial_attention(out_a, lse_a, out_b, lse_b)
    lse = torch.logaddexp(lse_a, lse_b)  # (..., L_q); -inf only when both parts saw nothing
    shift = _safe_shift(lse)
    w_a = torch.exp(lse_a - shift).unsqueeze(-1)  # (..., L_q, 1)
    w_b = torch.exp(lse_b - shift).unsqueeze(-1)
    out = w_a.to(out_a.dtype) * out_a + w_b.to(out_b.dtype) * out_b
    return out, lse
