"""Grouped-query attention (GQA, Ainslie et al. 2023): fewer key/value heads than query heads.

Multi-head attention (chapter 3) gives every query head its own key and value head. During
generation the keys and values of all earlier tokens are kept in the KV cache
(:mod:`transformer_lib.kv_cache`), and that cache, not the arithmetic, is what limits long
contexts and batch sizes. GQA lets ``g = num_heads / num_kv_heads`` query heads share one
key/value head::

    head h uses  K_{h // g}, V_{h // g}          (h = 0 .. num_heads - 1)

so W^K and W^V shrink to ``num_kv_heads * head_dim`` outputs and the cache shrinks by ``g``.
``num_kv_heads == num_heads`` is ordinary multi-head attention (a test holds the two equal);
``num_kv_heads == 1`` is multi-query attention (Shazeer 2019). SmolLM2-135M uses 9 query heads
and 3 key/value heads (g = 3): its cache is a third of the MHA one (chapter 17, "Grouped-query
attention and RoPE in a real model").

Two paths, held equal by tests:

* readable (``need_weights=True``): repeat each key/value head g times (:func:`repeat_kv`), then
  the book's :func:`~transformer_lib.attention.scaled_dot_product_attention`; returns the weights.
* fast: ``torch.nn.functional.scaled_dot_product_attention`` with ``enable_gqa=True`` (no copy of
  the shared heads), with ``is_causal`` or no mask at all when that is exact.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_cache_layer, check_floating, check_mask
from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .multihead import is_hooked, merge_heads

__all__ = ["GroupedQueryAttention", "repeat_kv", "causal_mask_with_offset"]


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, L, d) -> (B, H_kv * groups, L, d): head j is repeated for query heads j*g .. j*g+g-1."""
    if groups == 1:
        return x
    B, H_kv, L, d = x.shape
    return x[:, :, None].expand(B, H_kv, groups, L, d).reshape(B, H_kv * groups, L, d)  # (B, H, L, d)


# L queries appended to a cache of L_k - L keys: query i sits at position L_k - L + i and sees the
# keys at positions <= its own. That is masks.causal_mask(L, L_k) (its diagonal aligned to the
# end); the old name stays importable as the same function.
causal_mask_with_offset = causal_mask


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads.

    Call as ``gqa(x, mask=None, causal=False, cache=None, layer=0, need_weights=False)`` with x
    (B, L, d_model). ``mask``: boolean, True = may attend, broadcastable to (B, H, L, L_total).
    ``causal=True`` adds the causal mask (offset by the cached length). ``cache``: a
    :class:`~transformer_lib.kv_cache.KVCache`; this layer's keys/values are appended to it
    under index ``layer``, and positions (for ``rotary``) continue after the cached ones.
    Returns ``(output (B, L, d_model), weights (B, H, L, L_total) or None)``.
    ``hook_z`` / ``hook_pattern``: the block's hook points, as in
    :class:`~transformer_lib.multihead.MultiHeadAttention` (z is (B, L, H, head_dim), H query heads).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                 bias: bool = False, rotary: nn.Module | None = None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}) "
                             "so that each key/value head serves the same number of query heads")
        if head_dim is None:
            if d_model % num_heads:
                raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads}), "
                                 "or pass head_dim")
            head_dim = d_model // num_heads
        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = d_model, num_heads, num_kv_heads, head_dim
        self.groups = num_heads // num_kv_heads
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias)  # W^Q: one per query head
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)  # W^K: shared by g heads
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)  # W^V: shared by g heads
        self.out_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias)  # W^O
        self.rotary = rotary

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False,
                cache=None, layer: int = 0, need_weights: bool = False,
                hook_z: nn.Module | None = None, hook_pattern: nn.Module | None = None):
        check_floating("x", x)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, {self.d_model}), got shape {tuple(x.shape)}")
        B, L, _ = x.shape
        offset = 0
        if cache is not None:
            check_cache_layer(cache, layer)
            offset = cache.lengths[layer]
        check_mask(mask, (B, self.num_heads, L, offset + L))  # before the cache changes
        q = self.q_proj(x).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, d)
        k = self.k_proj(x).view(B, L, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, L, d)
        v = self.v_proj(x).view(B, L, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, L, d)
        if self.rotary is not None:  # positions offset .. offset + L - 1
            q, k = self.rotary(q, offset=offset), self.rotary(k, offset=offset)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H_kv, offset + L, d) each
        L_k = k.shape[2]

        pattern = is_hooked(hook_pattern)
        if need_weights or pattern or mask is not None:
            if causal:
                causal_m = causal_mask(L, L_k, x.device)  # (L, L_k)
                mask = causal_m if mask is None else mask & causal_m
            k_all, v_all = repeat_kv(k, self.groups), repeat_kv(v, self.groups)  # (B, H, L_k, d)
            out, weights = scaled_dot_product_attention(q, k_all, v_all, mask, need_weights=need_weights or pattern)
            if pattern:
                hook_pattern(weights)  # recorded only
                weights = weights if need_weights else None
        else:  # fast path: no mask tensor when causality is free or built in
            if not causal or L == 1:
                out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # (B, H, L, d)
            elif L == L_k:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(L, L_k, x.device),
                                                     enable_gqa=True)
            weights = None
        if hook_z is not None:
            z = hook_z(out.transpose(1, 2))  # (B, H, L, d) -> (B, L, H, d): each head's output
            return self.out_proj(z.reshape(B, L, self.num_heads * self.head_dim)), weights
        return self.out_proj(merge_heads(out)), weights  # (B, L, d_model), (B, H, L, L_k) or None

    @classmethod
    def from_multihead(cls, mha: nn.Module) -> "GroupedQueryAttention":
        """A GQA with ``num_kv_heads == num_heads`` holding a :class:`MultiHeadAttention`'s weights."""
        has_bias = mha.q_proj.bias is not None
        ours = cls(mha.d_model, mha.num_heads, mha.num_heads, bias=has_bias, rotary=mha.rotary)
        ours.load_state_dict({k: v for k, v in mha.state_dict().items()})
        return ours.to(device=mha.q_proj.weight.device, dtype=mha.q_proj.weight.dtype)
