"""Multi-head attention: split, attend in parallel, concatenate, project.

    head_i = Attention(X_q W_i^Q, X_kv W_i^K, X_kv W_i^V),   MHA = Concat(head_1..head_h) W^O

With ``d_k = d_model / h`` the h heads together cost about as much as one full-width head: the
projections are the same four d_model x d_model matrices, only reshaped into h slices. Self-
attention is the special case ``key = value = query``; cross-attention passes the encoder's
output as ``key``/``value``. It is the same module either way.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_cache_layer, check_floating, check_mask, check_int, check_probability
from .attention import _attention, _attention_fast

__all__ = ["MultiHeadAttention", "split_heads", "merge_heads", "is_hooked"]


def is_hooked(module: nn.Module | None) -> bool:
    """True when a forward hook (or pre-hook) is registered on ``module``: a hook point that
    someone records, so that the attention weights must be formed for it."""
    return module is not None and bool(module._forward_hooks or module._forward_pre_hooks)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, D) -> (B, H, L, D // H)."""
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)  # (B, H, L, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d_k) -> (B, L, H * d_k): the 'concatenate' step."""
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, D)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate Q, K, V and output projections.

    Four named ``nn.Linear`` layers (rather than one fused ``in_proj``) keep the paper's W^Q,
    W^K, W^V, W^O visible; :meth:`from_torch` copies the fused weights of
    ``torch.nn.MultiheadAttention`` into them.

    Call as ``mha(query, key=None, value=None, mask=None, need_weights=False)`` with batch-first
    tensors (B, L, d_model). ``mask`` is boolean, ``True = may attend``, broadcastable to
    (B, H, L_q, L_k). Returns ``(output (B, L_q, d_model), weights (B, H, L_q, L_k) or None)``.

    Optional ``rotary`` (a :class:`~transformer_lib.positional.RotaryEmbedding`) rotates queries
    and keys by position after the projections; ``bias`` in :meth:`forward` adds e.g. ALiBi.

    ``cache`` (a :class:`~transformer_lib.kv_cache.KVCache`, self-attention only) appends this
    call's keys and values under index ``layer`` and attends over all cached ones: the query's
    positions continue after the cached length, and ``mask``/``bias`` then cover
    (.., L_q, L_past + L_q). It is how a decoder generates one token per step (chapter 17).

    ``hook_z`` / ``hook_pattern`` (modules, usually the calling block's ``nn.Identity`` hook
    points, see :mod:`transformer_lib.probes`): each head's output z (B, L_q, H, d_k) passes
    through ``hook_z`` before the output projection, so a hook there can read or replace it;
    ``hook_pattern`` is called with the weights (B, H, L_q, L_k) whenever they are computed, and
    a hook on it makes this call take the readable path (the fused one never forms them).
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0,
                 rotary: nn.Module | None = None):
        super().__init__()
        check_int("d_model", d_model)
        check_int("num_heads", num_heads)
        check_probability("dropout", dropout)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}) so that each "
                f"head gets d_k = d_model / num_heads features")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = rotary

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None,
                value: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                need_weights: bool = False, bias: torch.Tensor | None = None, cache=None, layer: int = 0,
                hook_z: nn.Module | None = None, hook_pattern: nn.Module | None = None):
        if cache is not None and any(t is not None and t is not query for t in (key, value)):
            raise ValueError("cache is for self-attention only: pass the query alone (key=value=None)")
        key = query if key is None else key
        value = key if value is None else value
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_floating(name, t)
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must be (B, L, {self.d_model}), got shape {tuple(t.shape)}")
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                f"batch sizes differ: query {query.shape[0]}, key/memory {key.shape[0]}, value {value.shape[0]}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}")
        B, L_q, L_k = query.shape[0], query.shape[1], key.shape[1]
        past = 0
        if cache is not None:
            check_cache_layer(cache, layer)
            past = cache.lengths[layer]
        check_mask(mask, (B, self.num_heads, L_q, past + L_k))  # checked once here, before the cache changes

        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, L_q, d_k)
        k = split_heads(self.k_proj(key), self.num_heads)  # (B, H, L_k, d_k)
        v = split_heads(self.v_proj(value), self.num_heads)  # (B, H, L_k, d_k)
        if self.rotary is not None:  # positions past .. past + L - 1
            q, k = self.rotary(q, offset=past), self.rotary(k, offset=past)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H, past + L_k, d_k) each
        p = self.dropout if self.training else 0.0
        if need_weights or is_hooked(hook_pattern):
            out, weights = _attention(q, k, v, mask, None, bias, p)  # readable path, keeps the weights
            if hook_pattern is not None:
                hook_pattern(weights)  # recorded only: the output is computed from the unhooked weights
            weights = weights if need_weights else None
        else:
            out, weights = _attention_fast(q, k, v, mask, None, bias, p), None  # fused SDPA
        if hook_z is not None:
            z = hook_z(out.transpose(1, 2))  # (B, H, L_q, d_k) -> (B, L_q, H, d_k): each head's output
            return self.out_proj(z.reshape(B, L_q, self.d_model)), weights  # concatenate, project
        return self.out_proj(merge_heads(out)), weights  # (B, L_q, d_model), (B, H, L_q, L_k)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (same embed_dim for q, k, v)."""
        if not mha._qkv_same_embed_dim:
            raise ValueError("only nn.MultiheadAttention with kdim == vdim == embed_dim is supported")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("add_bias_kv / add_zero_attn are not supported")
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
