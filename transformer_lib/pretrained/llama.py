"""A Llama-style decoder assembled from the library's modules (chapter 17).

    x = embed(tokens)
    for each block:  x = x + GQA(RMSNorm(x))        (rotary positions on q and k, causal)
                     x = x + SwiGLU(RMSNorm(x))
    logits = RMSNorm(x) @ E^T                       (output matrix tied to the embedding)

Every part is a general module of the book: :class:`~transformer_lib.norms.RMSNorm` (chapter 7),
:class:`~transformer_lib.positional.RotaryEmbedding` (chapter 5),
:class:`~transformer_lib.grouped_query.GroupedQueryAttention` (chapter 3's heads, shared K/V),
:class:`~transformer_lib.feedforward.FeedForward` with ``activation="swiglu"`` (chapter 6) and
:class:`~transformer_lib.kv_cache.KVCache`. Pre-norm, no biases anywhere.

:func:`llama_state_from_gguf` renames GGUF tensors (``blk.3.attn_q.weight``) to this module's
names, undoing llama.cpp's permutation of W^Q/W^K rows so that ``rotary_style="halves"`` applies.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .._checks import check_cache, check_token_ids
from ..feedforward import FeedForward
from ..grouped_query import GroupedQueryAttention
from ..kv_cache import KVCache
from ..norms import RMSNorm
from ..positional import RotaryEmbedding
from .gguf import unpermute_rotary_rows

__all__ = ["LlamaConfig", "LlamaBlock", "LlamaDecoder", "llama_state_from_gguf"]


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_ff: int
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    context_length: int = 2048
    rotary_style: str = "halves"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def from_gguf(cls, meta: dict) -> "LlamaConfig":
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise ValueError(f"expected a GGUF with general.architecture 'llama', got {arch!r}")
        a = "llama."
        cfg = cls(vocab_size=int(meta.get(a + "vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))),
                  d_model=int(meta[a + "embedding_length"]), num_layers=int(meta[a + "block_count"]),
                  num_heads=int(meta[a + "attention.head_count"]),
                  num_kv_heads=int(meta.get(a + "attention.head_count_kv", meta[a + "attention.head_count"])),
                  d_ff=int(meta[a + "feed_forward_length"]), rope_base=float(meta.get(a + "rope.freq_base", 10000.0)),
                  norm_eps=float(meta[a + "attention.layer_norm_rms_epsilon"]),
                  context_length=int(meta.get(a + "context_length", 2048)))
        rope_dims = int(meta.get(a + "rope.dimension_count", cfg.head_dim))
        if rope_dims != cfg.head_dim:
            raise ValueError(f"partial rotary ({rope_dims} of {cfg.head_dim} dims) is not supported")
        return cfg


class LlamaBlock(nn.Module):
    """One pre-norm decoder block: GQA with rotary positions, then a SwiGLU FFN, each residual.

    Hook points as in :class:`~transformer_lib.layers.EncoderLayer` (``hook_attn_out``,
    ``hook_ffn_out`` (B, L, D), ``hook_z`` (B, L, H, head_dim), ``hook_pattern`` (B, H, L, L)):
    ``nn.Identity`` modules, no weights, so the GGUF's tensors load unchanged."""

    def __init__(self, cfg: LlamaConfig, rotary: RotaryEmbedding):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = GroupedQueryAttention(cfg.d_model, cfg.num_heads, cfg.num_kv_heads, bias=False, rotary=rotary)
        self.ffn_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        # linear1 = gate (SiLU), linear3 = up, linear2 = down
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, activation="swiglu", bias=False)
        self.hook_attn_out, self.hook_ffn_out = nn.Identity(), nn.Identity()  # (B, L, D) each
        self.hook_z, self.hook_pattern = nn.Identity(), nn.Identity()  # (B, L, H, d), (B, H, L, L)

    def forward(self, x: torch.Tensor, cache=None, layer: int = 0) -> torch.Tensor:
        attn = self.attn(self.attn_norm(x), causal=True, cache=cache, layer=layer,
                         hook_z=self.hook_z, hook_pattern=self.hook_pattern)[0]
        x = x + self.hook_attn_out(attn)  # (B, L, D)
        return x + self.hook_ffn_out(self.ffn(self.ffn_norm(x)))  # the residual stream after this block


class LlamaDecoder(nn.Module):
    """Token ids (B, L) -> next-token logits (B, L, vocab): ``forward(tokens, cache=None)``, the
    interface of every decoder in the library. With a cache from :meth:`new_cache` the tokens
    continue after the cached ones. Look at its attention with
    :func:`transformer_lib.probes.record_attention`."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        rotary = RotaryEmbedding(cfg.head_dim, base=cfg.rope_base, style=cfg.rotary_style)  # shared, no weights
        self.blocks = nn.ModuleList(LlamaBlock(cfg, rotary) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps)

    def new_cache(self, initial_capacity: int = 256) -> KVCache:
        """An empty :class:`~transformer_lib.kv_cache.KVCache` for this model's layers."""
        return KVCache(self.cfg.num_layers, initial_capacity)

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        check_token_ids(tokens, self.cfg.vocab_size)
        check_cache(cache, self.cfg.num_layers)
        past = cache.length if cache is not None else 0
        if past + tokens.shape[1] > self.cfg.context_length:
            raise ValueError(f"{past + tokens.shape[1]} positions exceed the context length {self.cfg.context_length}")
        x = self.embed(tokens)  # (B, L, D)
        for i, block in enumerate(self.blocks):
            x = block(x, cache=cache, layer=i)
        return self.norm(x) @ self.embed.weight.T  # (B, L, D) @ (D, V) -> (B, L, V)


def llama_state_from_gguf(tensors: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """GGUF tensor names -> :class:`LlamaDecoder` state dict (W^Q, W^K rows un-permuted)."""
    if "output.weight" in tensors:
        raise ValueError("this GGUF has a separate output matrix; LlamaDecoder ties it to the embedding")
    state = {"embed.weight": tensors["token_embd.weight"], "norm.weight": tensors["output_norm.weight"]}
    names = {"attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
             "attn_q.weight": "attn.q_proj.weight", "attn_k.weight": "attn.k_proj.weight",
             "attn_v.weight": "attn.v_proj.weight", "attn_output.weight": "attn.out_proj.weight",
             "ffn_gate.weight": "ffn.linear1.weight", "ffn_up.weight": "ffn.linear3.weight",
             "ffn_down.weight": "ffn.linear2.weight"}
    for i in range(cfg.num_layers):
        for src, dst in names.items():
            w = tensors[f"blk.{i}.{src}"]
            if src == "attn_q.weight" and cfg.rotary_style == "halves":
                w = unpermute_rotary_rows(w, cfg.num_heads)
            elif src == "attn_k.weight" and cfg.rotary_style == "halves":
                w = unpermute_rotary_rows(w, cfg.num_kv_heads)
            state[f"blocks.{i}.{dst}"] = w
    return state
