"""A decoder-only model's configuration: every switch of :class:`~transformer_lib.model.DecoderOnlyLM`
in one dataclass, one comment per field (as nanoGPT's ``GPTConfig`` and TransformerLens'
``HookedTransformerConfig`` do).

The configuration is what a model *is* apart from its weights: saved beside them as JSON
(:func:`transformer_lib.saving.save_pretrained`), it is enough to build the model again and load the
weights back. It is also what the tools read to decide whether they apply: the fused quantized
decoding step (:mod:`transformer_lib.quantization.fused`) runs only for the field values it
implements and leaves every other configuration to the model's own modules.

A new switch is one new field here, with a default that leaves the model as it was, read by the
component that owns it (``MultiHeadAttention.from_config`` for an attention switch, ...). A tool that
does not know the field sees it at its default and goes on; set to anything else, the tool either
supports it or refuses it by name.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._checks import check_choice, check_decoder_options, check_int, check_number

__all__ = ["ModelConfig", "Seq2SeqConfig"]


class _Config:
    """What both configurations do with their fields (each is a frozen dataclass)."""

    @classmethod
    def build(cls, args: tuple, switches: dict):
        """A model constructor's arguments as a configuration: ``(config,)`` plus changes as
        keywords, or the configuration's own fields (``(61, 32, 4, 2), {"positional": "rope"}``)."""
        if args and isinstance(args[0], cls):
            if len(args) > 1:
                raise TypeError(f"a model built from a {cls.__name__} takes changes to it as keywords only")
            return dataclasses.replace(args[0], **switches)
        return cls(*args, **switches)

    def to_dict(self) -> dict:
        """Every field, JSON-ready (``from_dict`` reads it back equal)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        """A configuration from :meth:`to_dict`'s output; an unknown field is a ValueError naming it
        (a file written by a newer version, or a typo)."""
        if not isinstance(values, dict):
            raise TypeError(f"values must be a dict of {cls.__name__} fields, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"values: unknown {cls.__name__} fields {unknown} (known: {sorted(known)})")
        return cls(**values)

    def changed(self) -> dict:
        """The fields that differ from their defaults (what a reader needs to rebuild the model)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.default is dataclasses.MISSING or getattr(self, f.name) != f.default}


@dataclass(frozen=True)
class ModelConfig(_Config):
    """The switches of :class:`~transformer_lib.model.DecoderOnlyLM`; the defaults are chapter 16's
    GPT. The first six fields may be given by position (``ModelConfig(61, 32, 4, 2)``)."""
    vocab_size: int                     # token ids run 0 .. vocab_size - 1
    d_model: int = 64                   # width of the residual stream
    num_heads: int = 4                  # query heads per attention layer; head_dim = d_model / num_heads
    num_layers: int = 2                 # blocks
    d_ff: int | None = None             # hidden width of each FFN (each expert's); None: 4 * d_model
    max_len: int = 256                  # the context length: the learned table's size, a pretrained model's trained length
    dropout: float = 0.0                # dropout after attention weights, each sub-layer and the embedding
    positional: str = "learned"         # 'sinusoidal', 'learned', 'rope', 'alibi' or 'none'
    norm: str = "layer"                 # 'layer' (LayerNorm) or 'rms' (RMSNorm)
    activation: str = "gelu"            # FFN: 'relu', 'gelu' or 'swiglu'
    norm_first: bool = True             # Pre-LN (True, GPT-2 on) or Post-LN (the 2017 paper)
    tie_weights: bool = True            # the output head reads the embedding matrix (x @ E^T)
    ffn: bool = True                    # False: attention-only blocks (the FFN switched off, chapter 6)
    init_std: float | None = None       # None: torch's initialisation; else N(0, init_std^2) weights, zero biases
    num_kv_heads: int | None = None     # key/value heads (grouped-query attention); None: num_heads
    bias: bool = True                   # biases in every linear layer (Llama: none)
    rope_base: float = 10000.0          # RoPE's base: wavelengths 2 pi base^(2i/d)
    rotary_style: str = "interleaved"   # RoPE's pair layout: 'interleaved' (the paper) or 'halves' (Llama)
    norm_eps: float = 1e-5              # the norms' epsilon
    strict_length: bool = False         # refuse a call whose cached + new tokens pass max_len (a pretrained model's
                                        # trained context, SmolLM2's 8192); off, RoPE/ALiBi/sinusoidal models run past it
    num_experts: int | None = None      # every FFN a mixture of this many SwiGLU experts (chapter 25)
    top_k: int = 2                      # experts run per token
    shared_experts: int = 0             # dense SwiGLU experts every token passes too (DeepSeek)
    capacity_factor: float | None = None  # cap each expert's assignments per call (Switch); None: no cap
    qk_norm: bool = False               # RMSNorm on each head's queries and keys before RoPE (OLMo 2, Qwen3)
    attention: str = "mha"              # 'mha': MultiHeadAttention (multi-head, grouped-query); 'mla': latent (DeepSeek)
    kv_lora_rank: int = 32              # mla: width r of the cached latent c_KV
    q_lora_rank: int | None = None      # mla: rank of low-rank queries (None: one q_proj)
    qk_rope_head_dim: int = 8           # mla: width of the rotary key k_R all heads share (and of each query's rotary part)
    qk_nope_head_dim: int | None = None  # mla: each head's non-rotary query/key width (None: d_model / num_heads)
    v_head_dim: int | None = None       # mla: each head's value width (None: d_model / num_heads)

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len"):
            check_int(name, getattr(self, name))
        for name in ("d_ff", "num_kv_heads"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.init_std is not None:
            check_number("init_std", self.init_std, 0, low_open=True)
        check_number("norm_eps", self.norm_eps, 0, low_open=True)
        check_decoder_options(self.positional, self.ffn, self.num_experts)
        check_choice("attention", self.attention, ("mha", "mla"))
        for name in ("kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.attention == "mla":
            for name, needed in (("positional", "rope"), ("num_kv_heads", None), ("qk_norm", False)):
                if getattr(self, name) != needed:
                    raise ValueError(f"{name}: latent attention (attention='mla') needs {name}={needed!r}: its keys "
                                     f"are one shared latent plus a decoupled rotary key; got {getattr(self, name)!r}")
        if self.num_experts is None and (self.shared_experts or self.capacity_factor is not None):
            raise ValueError("shared_experts, capacity_factor: need num_experts (they configure a mixture of experts)")

    @property
    def ffn_width(self) -> int:
        """``d_ff``, or its default 4 * d_model."""
        return 4 * self.d_model if self.d_ff is None else self.d_ff


@dataclass(frozen=True)
class Seq2SeqConfig(_Config):
    """The switches of :class:`~transformer_lib.model.Seq2SeqTransformer`; the defaults are the
    paper's model at chapter 12's small size. The first eight fields may be given by position."""
    src_vocab: int                      # source token ids run 0 .. src_vocab - 1
    tgt_vocab: int                      # target token ids run 0 .. tgt_vocab - 1
    d_model: int = 64                   # width of the residual stream
    num_heads: int = 4                  # query heads per attention layer
    num_encoder_layers: int = 2         # encoder blocks
    num_decoder_layers: int = 2         # decoder blocks
    d_ff: int = 256                     # hidden width of each FFN
    dropout: float = 0.0                # dropout after attention weights, each sub-layer and the positions
    max_len: int = 512                  # the position table's length (sinusoidal, learned)
    norm_first: bool = False            # Pre-LN (True) or the paper's Post-LN (False)
    positional: str = "sinusoidal"      # 'sinusoidal' (the paper), 'learned', 'rope' (self-attention only) or 'none'
    norm: str = "layer"                 # 'layer' or 'rms'
    activation: str = "relu"            # FFN: 'relu', 'gelu' or 'swiglu'
    bias: bool = True                   # biases in every linear layer
    num_kv_heads: int | None = None     # key/value heads (grouped-query attention); None: num_heads
    rope_base: float = 10000.0          # RoPE's base
    rotary_style: str = "interleaved"   # RoPE's pair layout
    norm_eps: float = 1e-5              # the norms' epsilon

    def __post_init__(self):
        for name in ("src_vocab", "tgt_vocab", "d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
                     "d_ff", "max_len"):
            check_int(name, getattr(self, name))
        if self.num_kv_heads is not None:
            check_int("num_kv_heads", self.num_kv_heads)
        check_choice("positional", self.positional, ("sinusoidal", "learned", "rope", "none"))
        check_number("norm_eps", self.norm_eps, 0, low_open=True)

