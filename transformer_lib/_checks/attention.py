"""Attention's inputs: queries, keys, values, masks and maps, dense and sparse."""
from __future__ import annotations

import torch

from .scalars import check_bool, check_features, check_int, check_number, check_same_batch


def check_floating(name: str, tensor: torch.Tensor) -> None:
    """``tensor`` must be a floating-point tensor (token ids go through an embedding first)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        what = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must be a floating-point tensor, got {what}")


def all_finite(tensor: torch.Tensor) -> bool:
    """True when a floating tensor holds no NaN or inf. A NaN or inf anywhere makes the sum NaN or
    inf, so a finite sum proves every entry finite with one reduction (about 20 times cheaper than
    ``isfinite(t).all()`` over a 28-million-entry embedding); only a sum that overflowed from finite
    entries needs the entry-by-entry test."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """A floating tensor must hold no NaN or inf (where a NaN would be turned into a number)."""
    if not all_finite(tensor):
        raise ValueError(f"{name} must be finite, got NaN or inf")


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Queries (..., L_q, d_k), keys (..., L_k, d_k), values (..., L_k, d_v); return the scores' shape.

    The leading (batch, head) dimensions must broadcast; the result is (..., L_q, L_k).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_floating(name, t)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError("q, k and v must have shape (..., L, d)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length L_k, got {k.shape[-2]} and {v.shape[-2]}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"batch/head dims of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "do not broadcast") from err
    return tuple(batch) + (q.shape[-2], k.shape[-2])


def check_mask(mask: torch.Tensor | None, scores_shape: tuple[int, ...]) -> None:
    """``mask`` must be None, or boolean (True = may attend) and broadcastable to ``scores_shape``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be boolean with True = may attend, got dtype {mask.dtype}; "
            "convert an additive float mask with transformer_lib.masks.from_torch_mha_mask")
    ok = mask.dim() <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape)))
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., L_q, L_k)")


def check_score_bias(bias: torch.Tensor | None, scores_shape: tuple[int, ...]) -> None:
    """``bias`` must be None, or a floating tensor broadcastable to ``scores_shape`` (an additive
    bias on the attention scores, such as ALiBi's (1, H, L_q, L_k))."""
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        raise ValueError(f"bias must be a floating-point torch.Tensor, got "
                         f"{getattr(bias, 'dtype', type(bias).__name__)}")
    ok = bias.dim() <= len(scores_shape) and all(
        b in (1, s) for b, s in zip(reversed(bias.shape), reversed(scores_shape)))
    if not ok:
        raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to the scores' shape "
                         f"{tuple(scores_shape)} (B, H, L_q, L_k)")


def check_causal_lengths(L_q: int, L_k: int) -> None:
    """Causal attention needs at least as many keys as queries: the keys include the queries' own
    (a query block appended to a cached prefix has more), and with fewer the first queries would
    see no key at all."""
    if L_k < L_q:
        raise ValueError(f"causal attention needs L_k >= L_q (the keys include the queries' own), "
                         f"got L_q={L_q}, L_k={L_k}")


def check_same_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q, k and v must share one dtype (a fused kernel reads them as one type)."""
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def check_nonempty_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """At least one query, one key and one feature (an empty sequence has no softmax)."""
    if min(q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]) < 1:
        raise ValueError(f"q, k, v need L >= 1 and d >= 1, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


def check_mha_inputs(query, key, value, d_model: int, cached: bool):
    """A multi-head attention call: floating query, key and value (B, L, d_model) with one batch
    size, key and value of one length; with a KV cache (``cached``) self-attention only (key and
    value None or the query itself). Returns (key, value) with None filled in (key = query,
    value = key)."""
    if cached and any(t is not None and t is not query for t in (key, value)):
        raise ValueError("cache is for self-attention only: pass the query alone (key=value=None)")
    key = query if key is None else key
    value = key if value is None else value
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_floating(name, t)
        check_features(name, t, d_model, dims=3)
    check_same_batch("query", query.shape[0], "key", key.shape[0])
    check_same_batch("key", key.shape[0], "value", value.shape[0])
    if key.shape[1] != value.shape[1]:
        raise ValueError(f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}")
    return key, value


def check_online_softmax_state(running_max, running_sum, scores) -> None:
    """One step of the online softmax: floating ``running_max`` and ``running_sum`` (...,) and a
    block of ``scores`` (..., block) of the same rows."""
    for name, t in (("running_max", running_max), ("running_sum", running_sum), ("scores", scores)):
        check_floating(name, t)
    if scores.dim() < 1 or running_max.shape != scores.shape[:-1] or running_sum.shape != running_max.shape:
        raise ValueError(f"running_max and running_sum must be (...,) and scores (..., block), got "
                         f"{tuple(running_max.shape)}, {tuple(running_sum.shape)}, {tuple(scores.shape)}")


def check_softmax_scores(scores) -> None:
    """Floating scores with at least one dimension, the last (the one a softmax runs over) of size >= 1."""
    check_floating("scores", scores)
    if scores.dim() < 1 or scores.shape[-1] < 1:
        raise ValueError(f"scores must have at least one dimension of size >= 1, got shape {tuple(scores.shape)}")


def check_partial_attention(out_a, lse_a, out_b, lse_b) -> None:
    """Two partial attention results to merge: floating outputs (..., L_q, d_v) and their
    log-sum-exps (..., L_q), each pair of equal shapes."""
    for name, t in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        check_floating(name, t)
    if out_a.shape != out_b.shape or lse_a.shape != lse_b.shape or out_a.shape[:-1] != lse_a.shape:
        raise ValueError(f"expected two outputs (..., L_q, d_v) and two lse (..., L_q) of equal shapes, got "
                         f"{tuple(out_a.shape)}, {tuple(lse_a.shape)}, {tuple(out_b.shape)}, {tuple(lse_b.shape)}")


def check_square_maps(weights: torch.Tensor) -> int:
    """Self-attention maps (..., L, L); return L."""
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be (..., L, L) self-attention maps, got shape {tuple(weights.shape)}")
    return weights.shape[-1]


def check_self_attention_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """Self-attention shapes of the sparse kernels: q, k, v all (B, H, L, d) with the same B, H and
    L and one dtype (no broadcasting, unlike :func:`check_qkv`: a band is defined over one sequence
    of queries and keys); returns (B, H, L, d_k)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, L, d_k), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError("sparse self-attention needs q, k, v with the same (B, H, L); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    check_same_dtype(q, k, v)
    check_nonempty_qkv(q, k, v)
    return tuple(q.shape)


def check_key_mask(key_mask: torch.Tensor | None, B: int, L: int, device) -> torch.Tensor | None:
    """Accept (B, L) or the (B, 1, 1, L) of :func:`~transformer_lib.masks.padding_mask`; return (B, L)."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(f"key_mask must be a boolean torch.Tensor with True = real token, got {type(key_mask).__name__}")
    if key_mask.dtype != torch.bool:
        raise ValueError(f"key_mask must be boolean with True = real token, got dtype {key_mask.dtype}")
    if key_mask.dim() == 4 and key_mask.shape[1:3] == (1, 1):
        key_mask = key_mask[:, 0, 0, :]  # (B, 1, 1, L) -> (B, L)
    if key_mask.dim() != 2 or key_mask.shape[1] != L or key_mask.shape[0] not in (1, B):
        raise ValueError(f"key_mask must have shape (B, L) = ({B}, {L}) or (B, 1, 1, L), "
                         f"got {tuple(key_mask.shape)}")
    return key_mask.to(device).expand(B, L)


def check_mask_stack(masks) -> None:
    """A non-empty list of square boolean (L, L) masks of one shape, first layer first."""
    if isinstance(masks, torch.Tensor) or not isinstance(masks, (list, tuple)):
        raise TypeError(f"masks must be a list of (L, L) boolean masks, first layer first, got {type(masks).__name__}")
    if not masks:
        raise ValueError("receptive_field needs at least one mask")
    for m in masks:
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.dim() != 2 or m.shape[0] != m.shape[1]:
            got = f"{m.dtype} {tuple(m.shape)}" if isinstance(m, torch.Tensor) else type(m).__name__
            raise ValueError(f"each mask must be a square boolean (L, L) tensor, got {got}")
        if m.shape != masks[0].shape:
            raise ValueError(f"masks must share one shape, got {tuple(masks[0].shape)} and {tuple(m.shape)}")


def check_dilations(dilations) -> None:
    """A non-empty list or tuple of dilation rates (each checked where its mask is made)."""
    if isinstance(dilations, (str, bytes)) or not isinstance(dilations, (list, tuple)):
        raise TypeError(f"dilations must be a list of integers >= 1, got {type(dilations).__name__}")
    if not dilations:
        raise ValueError("gridding_holes needs at least one dilation")


def check_block_layout(layout, L: int, block_size: int) -> None:
    """A boolean (nb, nb) block layout, nb = ceil(L / block_size)."""
    nb = -(-L // block_size)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool or tuple(layout.shape) != (nb, nb):
        got = (layout.dtype, tuple(layout.shape)) if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise ValueError(f"layout must be a boolean ({nb}, {nb}) tensor for L={L} and block_size={block_size}, got {got}")


def check_window_key_mask(key_mask, L: int) -> None:
    """None, or a boolean (B, L) padding mask (True = real token)."""
    if key_mask is not None and (not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool
                                 or key_mask.dim() != 2 or key_mask.shape[1] != L):
        raise ValueError(f"key_mask must be a boolean (B, {L}) tensor with True = real token")


def check_sparse_call(q, k, v, key_mask, causal, scale, **sizes: int):
    """The checks every sparse attention call shares: q, k, v; ``causal`` a bool; ``scale`` None or
    a finite number > 0; each named size an integer >= 1; the key mask. Returns (B, H, L, key_mask
    as (B, L) or None)."""
    B, H, L, _ = check_self_attention_qkv(q, k, v)
    check_bool("causal", causal)
    if scale is not None:
        check_number("scale", scale, 0.0, low_open=True)
    for name, value in sizes.items():
        check_int(name, value)
    return B, H, L, check_key_mask(key_mask, B, L, q.device)


def check_positions_list(name: str, positions, L: int) -> list[int]:
    """Token positions (any iterable of integers) in ``[0, L)``, returned sorted without repeats;
    a fractional position is refused rather than truncated."""
    import numbers

    if isinstance(positions, (str, bytes)) or not hasattr(positions, "__iter__"):
        raise TypeError(f"{name} must be an iterable of integer positions, got {type(positions).__name__}")
    items = positions.tolist() if isinstance(positions, torch.Tensor) else list(positions)
    for p in items:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise ValueError(f"{name} must hold integer positions, got {p!r}")
        if not 0 <= p < L:
            raise ValueError(f"{name} must lie in [0, {L}), got {sorted(int(x) for x in items)}")
    return sorted(set(int(p) for p in items))
