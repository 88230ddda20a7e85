"""Llama-style checkpoints in the reader's own model (chapter 17): the GGUF config and name map.

A Llama decoder is chapter 16's :class:`~transformer_lib.model.DecoderOnlyLM` with a few switches
(:data:`~transformer_lib.model.LLAMA_SWITCHES`)::

    x = embed(tokens)
    for each block:  x = x + Attention(RMSNorm(x))   (grouped-query, rotary q and k, causal, no bias)
                     x = x + SwiGLU(RMSNorm(x))
    logits = RMSNorm(x) @ E^T                        (output matrix tied to the embedding)

:class:`LlamaConfig` reads the sizes from a GGUF file's metadata and :func:`llama_decoder` builds
the model; :func:`llama_state_from_gguf` renames GGUF tensors (``blk.3.attn_q.weight``) to the
model's names (``blocks.3.self_attn.q_proj.weight``), undoing llama.cpp's permutation of W^Q/W^K
rows so that ``rotary_style="halves"`` applies.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks.pretrained import check_full_rotary, check_llama_metadata, check_tied_head
from ..config import ModelConfig
from ..model import LLAMA_SWITCHES, DecoderOnlyLM
from .gguf import unpermute_rotary_rows

__all__ = ["LlamaConfig", "llama_decoder", "llama_state_from_gguf", "GGUF_NAMES"]


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

    def model_kwargs(self) -> dict:
        """The keyword arguments of :class:`~transformer_lib.model.DecoderOnlyLM` that build this
        model: the sizes, and :data:`~transformer_lib.model.LLAMA_SWITCHES` (chapter 17 lists the
        ones that differ from chapter 16's GPT)."""
        return dict(vocab_size=self.vocab_size, d_model=self.d_model, num_heads=self.num_heads,
                    num_layers=self.num_layers, d_ff=self.d_ff, max_len=self.context_length,
                    strict_length=True,
                    num_kv_heads=self.num_kv_heads, rope_base=self.rope_base, norm_eps=self.norm_eps,
                    **dict(LLAMA_SWITCHES, rotary_style=self.rotary_style))

    def model_config(self) -> ModelConfig:
        """The same model as the library's :class:`~transformer_lib.config.ModelConfig` (what
        :func:`~transformer_lib.saving.save_pretrained` writes beside the weights)."""
        return ModelConfig(**self.model_kwargs())

    @classmethod
    def from_gguf(cls, meta: dict) -> "LlamaConfig":
        check_llama_metadata(meta)
        a = "llama."
        cfg = cls(vocab_size=int(meta.get(a + "vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))),
                  d_model=int(meta[a + "embedding_length"]), num_layers=int(meta[a + "block_count"]),
                  num_heads=int(meta[a + "attention.head_count"]),
                  num_kv_heads=int(meta.get(a + "attention.head_count_kv", meta[a + "attention.head_count"])),
                  d_ff=int(meta[a + "feed_forward_length"]), rope_base=float(meta.get(a + "rope.freq_base", 10000.0)),
                  norm_eps=float(meta[a + "attention.layer_norm_rms_epsilon"]),
                  context_length=int(meta.get(a + "context_length", 2048)))
        rope_dims = int(meta.get(a + "rope.dimension_count", cfg.head_dim))
        check_full_rotary(rope_dims, cfg.head_dim)
        return cfg


def llama_decoder(cfg: LlamaConfig) -> DecoderOnlyLM:
    """The :class:`~transformer_lib.model.DecoderOnlyLM` of ``cfg``: chapter 16's GPT with
    :data:`~transformer_lib.model.LLAMA_SWITCHES` (random weights; build it under
    ``torch.device("meta")`` and load a state dict to skip their initialization)."""
    return DecoderOnlyLM(cfg.model_config())


# GGUF tensor name in block i -> the name in DecoderOnlyLM's block i
GGUF_NAMES = {"attn_norm.weight": "norm1.weight", "ffn_norm.weight": "norm2.weight",
              "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
              "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.out_proj.weight",
              "ffn_gate.weight": "ffn.linear1.weight", "ffn_up.weight": "ffn.linear3.weight",
              "ffn_down.weight": "ffn.linear2.weight"}


def llama_state_from_gguf(tensors: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """GGUF tensor names -> :func:`llama_decoder`'s state dict (W^Q, W^K rows un-permuted; the
    tied head reads the embedding)."""
    check_tied_head(tensors)
    embed = tensors["token_embd.weight"]
    state = {"embed.weight": embed, "head.weight": embed, "norm.weight": tensors["output_norm.weight"]}
    for i in range(cfg.num_layers):
        for src, dst in GGUF_NAMES.items():
            w = tensors[f"blk.{i}.{src}"]
            if src == "attn_q.weight" and cfg.rotary_style == "halves":
                w = unpermute_rotary_rows(w, cfg.num_heads)
            elif src == "attn_k.weight" and cfg.rotary_style == "halves":
                w = unpermute_rotary_rows(w, cfg.num_kv_heads)
            state[f"blocks.{i}.{dst}"] = w
    return state
