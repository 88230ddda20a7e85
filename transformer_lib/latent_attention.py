"""Multi-head latent attention (DeepSeek-V2/V3, chapter 25): cache a small latent, not K and V.

Keys and values are rebuilt from a shared latent ``c_KV = RMSNorm(x W_DKV)`` of width
``kv_lora_rank`` (r), much smaller than ``num_heads * head_dim``. RoPE cannot pass through that
compression (a rotation between the up-projection and the query would depend on the position),
so each head's key gets a decoupled RoPE part: one small key ``k_R`` of width ``qk_rope_head_dim``
shared by all heads. The cache therefore holds only ``c_KV`` and ``k_R``: ``r + d_R`` numbers a
token a layer, against ``2 * H * d_h`` for multi-head attention.

For decoding, the key up-projection ``W_UK`` can be absorbed into the query
(``q_nope . (W_UK c) = (W_UK^T q_nope) . c``) and the value up-projection ``W_UV`` applied after
the weighted sum of latents: attention then runs on the latents directly (``absorbed=True``),
equal to the naive path that materialises every key and value. Either way the weighted sum is
the library's one attention core (``attention._attention``) over queries and keys that join the
two parts, ``[q_nope, q_R] . [k_nope, k_R]``: only what is attended in differs.

It is an attention of the model like :class:`~transformer_lib.multihead.MultiHeadAttention`:
``DecoderOnlyLM(..., attention="mla")`` builds every block with it (``ModelConfig``'s ``mla``
fields), it is called the same way and returns ``(output, weights or None)``, it caches in the
model's :class:`~transformer_lib.kv_cache.KVCache` (the latent as the "keys", (B, 1, T, r), and
k_R as the "values", (B, 1, T, d_R): one shared entry for all heads), rotates with the library's
one :class:`~transformer_lib.positional.RotaryEmbedding`, and passes each head's output and its
weights through the block's hook points (``hook_z``, ``hook_pattern``), so the probes, generation,
export and quantization see it like any other attention.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import (check_cache_layer, check_choice, check_features, check_int, check_latent_call,
                      check_latent_sizes)
from .attention import _attention
from .masks import causal_mask
from .norms import RMSNorm
from .positional import RotaryEmbedding


def cache_bytes_per_token(kind: str, *, num_heads: int = 1, head_dim: int = 1, num_kv_heads: int | None = None,
                          kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, num_layers: int = 1,
                          bytes_per_element: int = 2) -> int:
    """KV-cache bytes one token costs: 'mha' 2 H d_h, 'gqa' 2 H_kv d_h, 'mqa' 2 d_h, 'mla' r + d_R,
    times layers and bytes per element."""
    widths = {"mha": lambda: 2 * num_heads * head_dim,
              "gqa": lambda: 2 * (num_kv_heads or num_heads) * head_dim,
              "mqa": lambda: 2 * head_dim,
              "mla": lambda: kv_lora_rank + qk_rope_head_dim}
    check_choice("kind", kind, sorted(widths))
    return widths[kind]() * num_layers * bytes_per_element


class LatentAttention(nn.Module):
    """DeepSeek's MLA (causal self-attention). Names follow transformers' ``DeepseekV3Attention``.

    ``q_lora_rank`` None: queries from one ``q_proj``; else low-rank ``q_a_proj`` -> RMSNorm ->
    ``q_b_proj``. ``rotary`` (default: RoPE over ``qk_rope_head_dim`` with ``rope_base``, the
    'halves' layout of DeepSeek's checkpoints) rotates the rotary parts. ``absorbed`` is the default
    of :meth:`forward`'s own ``absorbed``.

    ``forward(query, cache=None, layer=0, absorbed=None, hook_z=None, hook_pattern=None,
    need_weights=False)`` -> ``(output (B, L, d_model), weights (B, H, L, T) or None)``: causal
    self-attention, called like :class:`~transformer_lib.multihead.MultiHeadAttention` (a key,
    value, mask or score bias is refused by name: the latent is the only key there is).
    """

    def __init__(self, d_model: int, num_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, q_lora_rank: int | None = None,
                 rope_base: float = 10000.0, eps: float = 1e-6, bias: bool = False,
                 rotary: RotaryEmbedding | None = None, absorbed: bool = False):
        super().__init__()
        for name, v in [("d_model", d_model), ("num_heads", num_heads), ("kv_lora_rank", kv_lora_rank),
                        ("qk_nope_head_dim", qk_nope_head_dim), ("qk_rope_head_dim", qk_rope_head_dim),
                        ("v_head_dim", v_head_dim)]:
            check_int(name, v)
        check_latent_sizes(num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
        if q_lora_rank is not None:
            check_int("q_lora_rank", q_lora_rank)
        self.d_model, self.num_heads, self.kv_lora_rank = d_model, num_heads, kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.q_lora_rank, self.rope_base, self.absorbed = q_lora_rank, rope_base, absorbed
        self.rotary = RotaryEmbedding(qk_rope_head_dim, base=rope_base, style="halves") if rotary is None else rotary
        H = num_heads
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, H * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, eps)
            self.q_b_proj = nn.Linear(q_lora_rank, H * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=bias)  # W_DKV, W_KR
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(kv_lora_rank, H * (qk_nope_head_dim + v_head_dim), bias=False)  # W_UK; W_UV
        self.o_proj = nn.Linear(H * v_head_dim, d_model, bias=bias)
        self.scale = self.qk_head_dim ** -0.5

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q_proj(x) if self.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        B, L, _ = x.shape
        return q.view(B, L, self.num_heads, self.qk_head_dim).transpose(1, 2)   # (B, H, L, d_nope + d_R)

    @classmethod
    def from_config(cls, config) -> "LatentAttention":
        """The attention of a block of a :class:`~transformer_lib.config.ModelConfig` with
        ``attention="mla"``: every latent-attention switch of the configuration is read here."""
        head_dim = config.d_model // config.num_heads
        rotary = RotaryEmbedding(config.qk_rope_head_dim, base=config.rope_base, style=config.rotary_style)
        return cls(config.d_model, config.num_heads, config.kv_lora_rank, config.qk_nope_head_dim or head_dim,
                   config.qk_rope_head_dim, config.v_head_dim or head_dim, config.q_lora_rank,
                   rope_base=config.rope_base, eps=config.norm_eps, bias=config.bias, rotary=rotary)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, need_weights: bool = False, bias: torch.Tensor | None = None,
                causal: bool = True, cache=None, layer: int = 0, hook_z: nn.Module | None = None,
                hook_pattern: nn.Module | None = None, absorbed: bool | None = None):
        check_features("query", query, self.d_model, dims=3)
        check_latent_call(query, key, value, mask, bias, causal)
        x = query
        B, L, _ = x.shape
        H, dn, dr, dv, r = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, self.kv_lora_rank
        absorbed = self.absorbed if absorbed is None else absorbed
        start = 0
        if cache is not None:
            check_cache_layer(cache, layer)
            start = cache.lengths[layer]
        q = self._queries(x)
        q_nope, q_rope = q.split([dn, dr], -1)                                 # (B, H, L, dn), (B, H, L, dr)
        c, k_r = self.kv_a_proj_with_mqa(x).split([r, dr], -1)                 # (B, L, r), (B, L, dr)
        c = self.kv_a_layernorm(c).unsqueeze(1)                                 # (B, 1, L, r): one for all heads
        q_rope = self.rotary(q_rope, offset=start)                              # positions start .. start + L - 1
        k_r = self.rotary(k_r.unsqueeze(1), offset=start)                       # (B, 1, L, dr), one for all heads
        if cache is not None:
            c, k_r = cache.update(layer, c, k_r)                                # (B, 1, T, r), (B, 1, T, dr)
        T = c.shape[2]
        if absorbed:  # attend in the latent space: W_UK folded into the queries, W_UV applied after
            w = _weight(self.kv_b_proj).view(H, dn + dv, r)
            w_uk, w_uv = w[:, :dn], w[:, dn:]                                   # (H, dn, r), (H, dv, r)
            q = torch.cat([torch.einsum("bhld,hdr->bhlr", q_nope, w_uk), q_rope], -1)  # (B, H, L, r + dr)
            k = torch.cat([c, k_r], -1)                                         # (B, 1, T, r + dr), shared
            v = c                                                               # (B, 1, T, r), shared
        else:
            kv = self.kv_b_proj(c[:, 0]).view(B, T, H, dn + dv).transpose(1, 2)  # (B, H, T, dn + dv)
            k_nope, v = kv.split([dn, dv], -1)                                  # (B, H, T, dn), (B, H, T, dv)
            q = torch.cat([q_nope, q_rope], -1)                                 # (B, H, L, dn + dr)
            k = torch.cat([k_nope, k_r.expand(B, H, T, dr)], -1)                # (B, H, T, dn + dr)
        # the library's one attention core; scores q . k = q_nope . k_nope + q_rope . k_rope, scaled
        # by the full head's 1 / sqrt(dn + dr) whatever the width attended in
        out, weights = _attention(q, k, v, causal_mask(L, T, x.device), self.scale, None, 0.0)  # (B, H, L, r or dv)
        if hook_pattern is not None:
            hook_pattern(weights)                                               # (B, H, L, T)
        if absorbed:
            out = torch.einsum("bhlr,hvr->bhlv", out, w_uv)                    # (B, H, L, r) -> (B, H, L, dv)
        z = out.transpose(1, 2)                                                 # (B, L, H, dv): each head's output
        if hook_z is not None:
            z = hook_z(z)
        return self.o_proj(z.reshape(B, L, H * dv)), (weights if need_weights else None)


def _weight(linear: nn.Module) -> torch.Tensor:
    """A linear layer's (out, in) weight, decoded first when it is quantized (absorbed decoding
    multiplies by the matrix itself, not through the layer)."""
    return linear.weight if hasattr(linear, "weight") else linear.dequantized_weight()
