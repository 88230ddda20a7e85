"""A Llama-style decoder assembled from the library's modules (chapter 17).

    x = embed(ids)
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
    """One pre-norm decoder block: GQA with rotary positions, then a SwiGLU FFN, each residual."""

    def __init__(self, cfg: LlamaConfig, rotary: RotaryEmbedding):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = GroupedQueryAttention(cfg.d_model, cfg.num_heads, cfg.num_kv_heads, bias=False, rotary=rotary)
        self.ffn_norm = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        # linear1 = gate (SiLU), linear3 = up, linear2 = down
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, activation="swiglu", bias=False)

    def forward(self, x: torch.Tensor, cache=None, layer: int = 0, need_weights: bool = False):
        h, weights = self.attn(self.attn_norm(x), causal=True, cache=cache, layer=layer, need_weights=need_weights)
        x = x + h  # (B, L, D)
        return x + self.ffn(self.ffn_norm(x)), weights


class LlamaDecoder(nn.Module):
    """Token ids (B, L) -> next-token logits (B, L, vocab). ``cache`` continues from cached tokens;
    ``last_only=True`` returns only the last position's logits (B, 1, vocab), all generation needs."""

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

    def forward(self, ids: torch.Tensor, cache=None, last_only: bool = False, need_weights: bool = False):
        if ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"ids must be integer (B, L), got {ids.dtype} of shape {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.cfg.vocab_size})")
        past = cache.length if cache is not None else 0
        if past + ids.shape[1] > self.cfg.context_length:
            raise ValueError(f"{past + ids.shape[1]} positions exceed the context length {self.cfg.context_length}")
        x = self.embed(ids)  # (B, L, D)
        all_weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, cache=cache, layer=i, need_weights=need_weights)
            all_weights.append(w)
        if last_only:
            x = x[:, -1:]  # (B, 1, D)
        logits = self.norm(x) @ self.embed.weight.T  # (B, L, D) @ (D, V) -> (B, L, V)
        return (logits, torch.stack(all_weights, 1)) if need_weights else logits  # weights (B, layers, H, L, L)


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
