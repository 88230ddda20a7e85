"""Multi-head attention: split, attend in parallel, concatenate, project (chapter 3), with the
key/value heads optionally shared between query heads (grouped-query attention, chapter 17).

    head_i = Attention(X_q W_i^Q, X_kv W_{i // g}^K, X_kv W_{i // g}^V),   MHA = Concat(head_1..head_h) W^O

With ``head_dim = d_model / h`` the h heads together cost about as much as one full-width head:
the projections are the same four d_model x d_model matrices, only reshaped into h slices. Self-
attention is the special case ``key = value = query``; cross-attention passes the encoder's
output as ``key``/``value``. It is the same module either way.

``num_kv_heads`` (default ``num_heads``) key/value heads serve ``g = num_heads / num_kv_heads``
query heads each (Ainslie et al. 2023): W^K and W^V shrink to ``num_kv_heads * head_dim`` outputs
and the KV cache (:mod:`transformer_lib.kv_cache`) shrinks by g. ``num_kv_heads == num_heads`` is
ordinary multi-head attention; ``num_kv_heads == 1`` is multi-query attention (Shazeer 2019).
SmolLM2-135M uses 9 query heads and 3 key/value heads (chapter 17).

Two paths, held equal by tests (tests/test_multihead.py):

* readable (``need_weights=True``, or a hook on ``hook_pattern``): repeat each key/value head g
  times (:func:`repeat_kv`), then the book's attention core; returns the weights;
* fast: ``torch.nn.functional.scaled_dot_product_attention`` with ``enable_gqa`` (no copy of the
  shared heads), and ``is_causal`` or no mask tensor at all when that is exact.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import (check_cache_layer, check_causal_lengths, check_divisible, check_int, check_mask,
                      check_mha_inputs, check_probability, check_score_bias, check_torch_mha)
from .attention import _attention, _attention_fast
from .masks import causal_mask
from .norms import RMSNorm

__all__ = ["MultiHeadAttention", "split_heads", "merge_heads", "repeat_kv", "is_hooked"]


def is_hooked(module: nn.Module | None) -> bool:
    """True when a forward hook (or pre-hook) is registered on ``module``: a hook point that
    someone records, so that the attention weights must be formed for it."""
    return module is not None and bool(module._forward_hooks or module._forward_pre_hooks)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, H * d) -> (B, H, L, d)."""
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)  # (B, H, L, head_dim)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d) -> (B, L, H * d): the 'concatenate' step."""
    B, H, L, d = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d)  # (B, L, H * d)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, L, d) -> (B, H_kv * groups, L, d): head j is repeated for query heads j*g .. j*g+g-1."""
    if groups == 1:
        return x
    B, H_kv, L, d = x.shape
    return x[:, :, None].expand(B, H_kv, groups, L, d).reshape(B, H_kv * groups, L, d)  # (B, H, L, d)


class MultiHeadAttention(nn.Module):
    """Multi-head (and grouped-query) attention with separate Q, K, V and output projections.

    Four named ``nn.Linear`` layers (rather than one fused ``in_proj``) keep the paper's W^Q,
    W^K, W^V, W^O visible; :meth:`from_torch` copies the fused weights of
    ``torch.nn.MultiheadAttention`` into them. ``head_dim`` defaults to ``d_model / num_heads``.

    Call as ``mha(query, key=None, value=None, mask=None, need_weights=False)`` with batch-first
    tensors (B, L, d_model). ``mask`` is boolean, ``True = may attend``, broadcastable to
    (B, H, L_q, L_k); ``causal=True`` adds the causal mask (queries aligned to the end of the
    keys). Returns ``(output (B, L_q, d_model), weights (B, H, L_q, L_k) or None)``.

    Optional ``rotary`` (a :class:`~transformer_lib.positional.RotaryEmbedding`) rotates queries
    and keys by position after the projections; ``bias`` in :meth:`forward` adds e.g. ALiBi.
    ``qk_norm=True`` RMS-normalises each head's queries and keys over head_dim (learned gains,
    epsilon ``norm_eps``) before the rotation, as OLMo 2 and Qwen3 do.

    ``cache`` (a :class:`~transformer_lib.kv_cache.KVCache`, self-attention only) appends this
    call's keys and values under index ``layer`` and attends over all cached ones: the query's
    positions continue after the cached length, and ``mask``/``bias`` then cover
    (.., L_q, L_past + L_q). It is how a decoder generates one token per step (chapter 17).

    ``hook_z`` / ``hook_pattern`` (modules, usually the calling block's ``nn.Identity`` hook
    points, see :mod:`transformer_lib.probes`): each head's output z (B, L_q, H, head_dim) passes
    through ``hook_z`` before the output projection, so a hook there can read or replace it;
    ``hook_pattern`` is called with the weights (B, H, L_q, L_k) whenever they are computed, and
    a hook on it makes this call take the readable path (the fused one never forms them).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                 bias: bool = True, dropout: float = 0.0, rotary: nn.Module | None = None,
                 qk_norm: bool = False, norm_eps: float = 1e-6):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_int("d_model", d_model)
        check_int("num_heads", num_heads)
        check_int("num_kv_heads", num_kv_heads)
        check_probability("dropout", dropout)
        check_divisible("num_heads", num_heads, num_kv_heads, "num_kv_heads",
                        " so that each key/value head serves the same number of query heads")
        if head_dim is None:
            check_divisible("d_model", d_model, num_heads, "num_heads",
                            " so that each head gets head_dim = d_model / num_heads features, or pass head_dim")
            head_dim = d_model // num_heads
        check_int("head_dim", head_dim)
        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = d_model, num_heads, num_kv_heads, head_dim
        self.groups = num_heads // num_kv_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias)  # W^Q: one per query head
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)  # W^K: shared by g query heads
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)  # W^V: shared by g query heads
        self.out_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias)  # W^O
        self.rotary = rotary
        # QK-norm (OLMo 2, Qwen3): each head's queries and keys RMS-normed over head_dim before RoPE,
        # so that no logit q.k can grow without bound (a cause of loss spikes in large runs)
        self.q_norm = RMSNorm(head_dim, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, norm_eps) if qk_norm else None

    @classmethod
    def from_config(cls, config, rotary: nn.Module | None = None) -> "MultiHeadAttention":
        """The self-attention of a block of a :class:`~transformer_lib.config.ModelConfig`'s model:
        every attention switch of the configuration is read here, and only here."""
        return cls(config.d_model, config.num_heads, config.num_kv_heads, bias=config.bias, dropout=config.dropout,
                   rotary=rotary, qk_norm=config.qk_norm, norm_eps=config.norm_eps)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None,
                value: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                need_weights: bool = False, bias: torch.Tensor | None = None, causal: bool = False,
                cache=None, layer: int = 0,
                hook_z: nn.Module | None = None, hook_pattern: nn.Module | None = None):
        key, value = check_mha_inputs(query, key, value, self.d_model, cached=cache is not None)
        B, L_q = query.shape[0], query.shape[1]
        past = offset = 0
        if cache is not None:
            check_cache_layer(cache, layer)
            past = cache.lengths[layer]
            offset = cache.offset(layer)  # an int, or one per row where rows hold different lengths
        L_k = past + key.shape[1]
        check_mask(mask, (B, self.num_heads, L_q, L_k))  # checked once here, before the cache changes
        check_score_bias(bias, (B, self.num_heads, L_q, L_k))
        if causal:
            check_causal_lengths(L_q, L_k)

        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, L_q, d)
        k = split_heads(self.k_proj(key), self.num_kv_heads)  # (B, H_kv, L_k, d)
        v = split_heads(self.v_proj(value), self.num_kv_heads)  # (B, H_kv, L_k, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # over each head's d features
        if self.rotary is not None:  # positions offset .. offset + L - 1 (offset = past, or per row)
            q, k = self.rotary(q, offset=offset), self.rotary(k, offset=offset)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H_kv, past + L_k, d) each
        p = self.dropout if self.training else 0.0
        readable = need_weights or is_hooked(hook_pattern)
        if causal and (readable or mask is not None or bias is not None or p > 0.0 or 1 < L_q < L_k):
            causal_m = causal_mask(L_q, L_k, query.device)  # (L_q, L_k): query i sits at L_k - L_q + i
            mask = causal_m if mask is None else mask & causal_m
        elif causal:  # exact without a mask tensor: one query sees every key, or L_q == L_k
            out = F.scaled_dot_product_attention(q, k, v, is_causal=L_q > 1, enable_gqa=self.groups > 1)
            return self._merge(out, B, L_q, hook_z), None
        if readable:
            out, weights = _attention(q, repeat_kv(k, self.groups), repeat_kv(v, self.groups), mask, None, bias, p)
            if hook_pattern is not None:
                hook_pattern(weights)  # recorded only: the output is computed from the unhooked weights
            weights = weights if need_weights else None
        else:
            out, weights = _attention_fast(q, k, v, mask, None, bias, p, enable_gqa=self.groups > 1), None
        return self._merge(out, B, L_q, hook_z), weights  # (B, L_q, d_model), (B, H, L_q, L_k)

    def _merge(self, out: torch.Tensor, B: int, L_q: int, hook_z: nn.Module | None) -> torch.Tensor:
        """Heads (B, H, L_q, d) -> concatenated and projected (B, L_q, d_model), through ``hook_z``."""
        if hook_z is not None:
            z = hook_z(out.transpose(1, 2))  # (B, H, L_q, d) -> (B, L_q, H, d): each head's output
            return self.out_proj(z.reshape(B, L_q, self.num_heads * self.head_dim))  # concatenate, project
        return self.out_proj(merge_heads(out))  # (B, L_q, d_model)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (same embed_dim for q, k, v)."""
        check_torch_mha(mha)
        has_bias = mha.in_proj_bias is not None
        ours = cls(mha.embed_dim, mha.num_heads, bias=has_bias, dropout=mha.dropout)
        ours = ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
        D = mha.embed_dim
        with torch.no_grad():
            for n, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
                proj.weight.copy_(mha.in_proj_weight[n * D:(n + 1) * D])  # rows of the fused (3D, D)
                if has_bias:
                    proj.bias.copy_(mha.in_proj_bias[n * D:(n + 1) * D])
            ours.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                ours.out_proj.bias.copy_(mha.out_proj.bias)
        return ours
