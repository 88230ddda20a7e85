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
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_choice, check_features, check_int, check_latent_sizes
from .attention import _attention
from .norms import RMSNorm


def rope_cos_sin(positions: torch.Tensor, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (L, dim) for the half-split ("rotate_half") RoPE layout used by Llama/DeepSeek."""
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)   # (dim/2,)
    freqs = positions.float()[:, None] * inv[None]                              # (L, dim/2)
    emb = torch.cat([freqs, freqs], -1)                                         # (L, dim)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class LatentCache:
    """Per layer: the latent ``c_KV`` (B, T, r) and the shared RoPE key ``k_R`` (B, T, d_R)."""

    def __init__(self, num_layers: int = 1):
        check_int("num_layers", num_layers)
        self.latent: list[torch.Tensor | None] = [None] * num_layers
        self.rope_key: list[torch.Tensor | None] = [None] * num_layers

    def length(self, layer: int = 0) -> int:
        return 0 if self.latent[layer] is None else self.latent[layer].shape[1]

    def update(self, layer: int, c: torch.Tensor, k_r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.latent[layer] is not None:
            c = torch.cat([self.latent[layer], c], 1)                   # (B, T + L, r)
            k_r = torch.cat([self.rope_key[layer], k_r], 1)             # (B, T + L, d_R)
        self.latent[layer], self.rope_key[layer] = c, k_r
        return c, k_r

    def nbytes(self) -> int:
        return sum(t.nelement() * t.element_size() for t in self.latent + self.rope_key if t is not None)


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
    ``q_b_proj``. ``forward(x, cache=None, layer=0, absorbed=False)``.
    """

    def __init__(self, d_model: int, num_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, q_lora_rank: int | None = None,
                 rope_base: float = 10000.0, eps: float = 1e-6, bias: bool = False):
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
        self.q_lora_rank, self.rope_base = q_lora_rank, rope_base
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

    def forward(self, x: torch.Tensor, cache: LatentCache | None = None, layer: int = 0,
                absorbed: bool = False) -> torch.Tensor:
        check_features("x", x, self.d_model, dims=3)
        B, L, _ = x.shape
        H, dn, dr, dv, r = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, self.kv_lora_rank
        start = 0 if cache is None else cache.length(layer)
        q = self._queries(x)
        q_nope, q_rope = q.split([dn, dr], -1)                                 # (B, H, L, dn), (B, H, L, dr)
        c, k_r = self.kv_a_proj_with_mqa(x).split([r, dr], -1)                 # (B, L, r), (B, L, dr)
        c = self.kv_a_layernorm(c)
        cos, sin = rope_cos_sin(torch.arange(start, start + L, device=x.device), dr, self.rope_base)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)                             # (L, dr)
        q_rope = _rotate(q_rope, cos, sin)
        k_r = _rotate(k_r, cos, sin)                                            # (B, L, dr), one for all heads
        if cache is not None:
            c, k_r = cache.update(layer, c, k_r)                                # (B, T, r), (B, T, dr)
        T = c.shape[1]
        w = self.kv_b_proj.weight.view(H, dn + dv, r)
        w_uk, w_uv = w[:, :dn], w[:, dn:]                                       # (H, dn, r), (H, dv, r)
        k_r = k_r.unsqueeze(1)                                                  # (B, 1, T, dr): one for all heads
        if absorbed:  # attend in the latent space: W_UK folded into the queries, W_UV applied after
            q = torch.cat([torch.einsum("bhld,hdr->bhlr", q_nope, w_uk), q_rope], -1)  # (B, H, L, r + dr)
            k = torch.cat([c.unsqueeze(1), k_r], -1)                            # (B, 1, T, r + dr), shared
            v = c.unsqueeze(1)                                                  # (B, 1, T, r), shared
        else:
            kv = self.kv_b_proj(c).view(B, T, H, dn + dv).transpose(1, 2)       # (B, H, T, dn + dv)
            k_nope, v = kv.split([dn, dv], -1)                                  # (B, H, T, dn), (B, H, T, dv)
            q = torch.cat([q_nope, q_rope], -1)                                 # (B, H, L, dn + dr)
            k = torch.cat([k_nope, k_r.expand(B, H, T, dr)], -1)                # (B, H, T, dn + dr)
        causal = torch.ones(L, T, dtype=torch.bool, device=x.device).tril(T - L)  # (L, T): the cache's T - L come first
        # the library's one attention core; scores q . k = q_nope . k_nope + q_rope . k_rope, scaled
        # by the full head's 1 / sqrt(dn + dr) whatever the width attended in
        out, _ = _attention(q, k, v, causal, self.scale, None, 0.0)             # (B, H, L, r or dv)
        if absorbed:
            out = torch.einsum("bhlr,hvr->bhlv", out, w_uv)                    # (B, H, L, r) -> (B, H, L, dv)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, H * dv))
