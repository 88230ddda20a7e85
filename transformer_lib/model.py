"""Stacks and whole models: Encoder, Decoder, the encoder-decoder Transformer, and a
decoder-only language model.

``Transformer`` maps already-embedded states to states, like ``torch.nn.Transformer``.
``Seq2SeqTransformer`` adds token embeddings, sinusoidal positions and an output head (the
paper's full model); ``transformer_lib.sampling.generate(model.conditioned_on(src), bos, n)``
decodes it. ``DecoderOnlyLM`` is the GPT-style model, with a
choice of positional scheme and norm.

Every decoder has the same interface, which :mod:`transformer_lib.sampling` drives:
``forward(tokens (B, L), cache=None) -> logits (B, L, V)`` and ``new_cache()``. With a cache the
tokens continue after the cached ones (positions, masks and biases are offset by the cached
length), so feeding a prompt and then one token at a time gives the logits of one full pass.
``Seq2SeqTransformer.conditioned_on(src)`` is its decoder side with the source encoded once.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn

from ._checks import check_cache, check_context_length, check_same_batch, check_token_ids
from .config import ModelConfig, Seq2SeqConfig
from .layers import DecoderLayer, TransformerBlock
from .moe import moe_decoder
from .masks import causal_mask, padding_mask
from .norms import LayerNorm, make_norm
from .kv_cache import KVCache
from .positional import alibi_bias, position_modules

__all__ = ["Encoder", "Decoder", "Transformer", "Seq2SeqTransformer", "DecoderOnlyLM", "LLAMA_SWITCHES"]


def clones(module: nn.Module, n: int) -> nn.ModuleList:
    """n copies of ``module``, each after the first with its own random initial weights.

    The Annotated Transformer's helper of this name returns n deep copies: independent
    parameters that start out *equal*, so at initialisation every layer of the stack computes
    the same function, and a measurement of a fresh stack (its gradients, its attention) sees n
    copies of one layer rather than n layers. Its ``make_model`` and ``torch.nn.Transformer``
    therefore re-draw every weight after cloning, and GPT-style models build each layer on its own.

    Here the first copy keeps ``module``'s weights exactly (so ``clones(layer, n)[0]`` equals
    ``layer``); every later copy is a deep copy on which each submodule's own
    ``reset_parameters()`` is called: a fresh draw from the same default initialisation
    (``nn.Linear``'s Kaiming-uniform weights and uniform biases). The library's LayerNorm and
    RMSNorm have no ``reset_parameters`` and start at ones and zeros, so copying them is the same
    as building them anew (a norm that has one, such as BatchNorm, resets to the same). A submodule with frozen parameters keeps them: a frozen weight is a
    fixed choice, not a random draw (chapter 6's switched-off FFN keeps its zero W_2).

    The draws come from torch's global generator, so a seeded model is reproducible."""
    copies = [copy.deepcopy(module) for _ in range(n)]
    for layer in copies[1:]:
        for sub in layer.modules():
            own = list(sub.parameters(recurse=False))
            if hasattr(sub, "reset_parameters") and all(p.requires_grad for p in own):
                sub.reset_parameters()
    return nn.ModuleList(copies)


class Encoder(nn.Module):
    """A stack of :class:`TransformerBlock` used as encoder layers (``mask`` is usually a padding
    mask or None: every token sees every other), with an optional final norm (needed for Pre-LN)."""

    def __init__(self, layer: TransformerBlock, num_layers: int, final_norm: nn.Module | None = None):
        super().__init__()
        self.blocks = clones(layer, num_layers)
        self.norm = final_norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer`, with an optional final norm."""

    def __init__(self, layer: DecoderLayer, num_layers: int, final_norm: nn.Module | None = None):
        super().__init__()
        self.blocks = clones(layer, num_layers)
        self.norm = final_norm

    def forward(self, x, memory, self_mask=None, memory_mask=None, cache=None):
        check_cache(cache, len(self.blocks))
        for i, block in enumerate(self.blocks):
            x = block(x, memory, self_mask, memory_mask, cache=cache, layer=i)
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    """The encoder-decoder of Vaswani et al. (2017), on embedded inputs.

    ``model(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None)`` with src (B, L_s, D) and
    tgt (B, L_t, D) returns the decoder's output states (B, L_t, D). Masks are boolean (True = may
    attend): ``src_mask`` (.., L_s, L_s) for the encoder, ``tgt_mask`` (.., L_t, L_t) for the
    decoder's self-attention (pass a causal mask), ``memory_mask`` (.., L_t, L_s) for cross-attention.

    ``final_norm`` adds a LayerNorm after each stack; it defaults to ``norm_first`` (Pre-LN needs
    it; the paper's Post-LN does not). ``torch.nn.Transformer`` always has it. ``norm``, ``bias``,
    ``num_kv_heads`` and ``rotary`` are the decoder-only model's switches, for every block (the
    rotation in self-attention only).
    """

    def __init__(self, d_model: int = 512, num_heads: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, d_ff: int = 2048, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, final_norm: bool | None = None,
                 eps: float = 1e-5, norm: str = "layer", bias: bool = True, num_kv_heads: int | None = None,
                 rotary: nn.Module | None = None):
        super().__init__()
        final_norm = norm_first if final_norm is None else final_norm
        self.d_model = d_model
        switches = dict(norm=norm, eps=eps, bias=bias, num_kv_heads=num_kv_heads, rotary=rotary)
        enc = TransformerBlock(d_model, num_heads, d_ff, dropout, activation, norm_first, **switches)
        dec = DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first, **switches)
        self.encoder = Encoder(enc, num_encoder_layers, make_norm(norm, d_model, eps) if final_norm else None)
        self.decoder = Decoder(dec, num_decoder_layers, make_norm(norm, d_model, eps) if final_norm else None)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None):
        check_same_batch("src", src.shape[0], "tgt", tgt.shape[0])
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, memory, tgt_mask, memory_mask)

    @property
    def blocks(self) -> list[nn.Module]:
        """Every block, the encoder's first: ``[*encoder.blocks, *decoder.blocks]``."""
        return [*self.encoder.blocks, *self.decoder.blocks]

    @classmethod
    def from_torch(cls, model: nn.Transformer) -> "Transformer":
        """Copy a ``torch.nn.Transformer`` (its encoder and decoder each end with a LayerNorm)."""
        enc_layers = [TransformerBlock.from_torch(l) for l in model.encoder.layers]
        dec_layers = [DecoderLayer.from_torch(l) for l in model.decoder.layers]
        first = enc_layers[0]
        ours = cls(model.d_model, model.nhead, len(enc_layers), len(dec_layers),
                   first.ffn.d_ff, activation=first.ffn.activation, norm_first=first.norm_first,
                   final_norm=True)
        ours.encoder.blocks = nn.ModuleList(enc_layers)
        ours.decoder.blocks = nn.ModuleList(dec_layers)
        ours.encoder.norm = LayerNorm.from_torch(model.encoder.norm) if model.encoder.norm is not None else None
        ours.decoder.norm = LayerNorm.from_torch(model.decoder.norm) if model.decoder.norm is not None else None
        return ours


class Seq2SeqTransformer(nn.Module):
    """The paper's full model: embeddings (scaled by sqrt(d_model)) + sinusoidal positions,
    the :class:`Transformer`, and a linear head over the target vocabulary.

    ``forward(src, tgt_in, src_lengths=None)`` returns logits (B, L_t, V). ``tgt_in`` is the target
    shifted right (BOS first): teacher forcing, all positions trained in parallel.

    Built from a :class:`~transformer_lib.config.Seq2SeqConfig` or its fields as arguments, like
    :class:`DecoderOnlyLM`, with the same position, norm, activation, bias and grouped-query
    switches (``positional="rope"`` rotates within the encoder's and the decoder's self-attention).
    """

    def __init__(self, *args, **switches):
        super().__init__()
        config = Seq2SeqConfig.build(args, switches)  # Seq2SeqTransformer(config, **changes) or its fields
        self.config = c = config
        self.d_model = c.d_model
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab, c.d_model)
        self.pos, rotary = position_modules(c)  # one table for both sides, or RoPE in the self-attentions
        self.transformer = Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers,
                                       c.d_ff, c.dropout, c.activation, norm_first=c.norm_first, eps=c.norm_eps,
                                       norm=c.norm, bias=c.bias, num_kv_heads=c.num_kv_heads, rotary=rotary)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab, bias=c.bias)
        # Embeddings are multiplied by sqrt(d_model) in _embed; starting them at std 1/sqrt(d_model)
        # makes the product unit-scale, comparable with the positional encoding (whose entries
        # lie in [-1, 1]). With torch's default N(0, 1) the positions would be drowned 8:1 at d=64.
        for emb in (self.src_embed, self.tgt_embed):
            nn.init.normal_(emb.weight, std=c.d_model ** -0.5)

    def _embed(self, emb: nn.Embedding, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = emb(tokens) * math.sqrt(self.d_model)  # (B, L, D)
        return x if self.pos is None else self.pos(x, offset)

    def src_mask(self, src: torch.Tensor, src_lengths=None) -> torch.Tensor | None:
        if src_lengths is None:
            return None
        return padding_mask(src_lengths, src.shape[1], device=src.device)  # (B, 1, 1, L_s)

    def encode(self, src: torch.Tensor, src_lengths=None) -> torch.Tensor:
        return self.transformer.encoder(self._embed(self.src_embed, src), self.src_mask(src, src_lengths))

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask=None, cache=None) -> torch.Tensor:
        """Target logits (B, L_t, V) given the encoder's ``memory``; with a ``cache`` (from
        :meth:`new_cache`) ``tgt_in`` continues after the cached target tokens."""
        past, L_t = (0 if cache is None else cache.length), tgt_in.shape[1]
        causal = causal_mask(L_t, past + L_t, device=tgt_in.device)  # (L_t, past + L_t)
        states = self.transformer.decoder(self._embed(self.tgt_embed, tgt_in, past), memory, causal, memory_mask,
                                          cache=cache)
        return self.generator(states)  # (B, L_t, V)

    def new_cache(self, initial_capacity: int = 256) -> KVCache:
        """An empty cache for the decoder's self-attention (one entry per decoder layer)."""
        return KVCache(len(self.transformer.decoder.blocks), initial_capacity)

    def conditioned_on(self, src: torch.Tensor, src_lengths=None) -> "ConditionedDecoder":
        """The decoder side with ``src`` encoded once: a decoder with the common interface
        (``forward(tokens, cache=None)``, ``new_cache()``) that :mod:`~transformer_lib.sampling` drives."""
        return ConditionedDecoder(self, src, src_lengths)

    def forward(self, src, tgt_in, src_lengths=None):
        memory_mask = self.src_mask(src, src_lengths)
        return self.decode(tgt_in, self.encode(src, src_lengths), memory_mask)

    @property
    def blocks(self) -> list[nn.Module]:
        """Every block of the model, the encoder's first (the name all models use for their stack)."""
        return self.transformer.blocks


class ConditionedDecoder(nn.Module):
    """A :class:`Seq2SeqTransformer`'s decoder with a fixed, already encoded source: token ids
    (B, L) -> logits (B, L, V), the interface every decoder of the library has."""

    def __init__(self, model: Seq2SeqTransformer, src: torch.Tensor, src_lengths=None):
        super().__init__()
        check_token_ids(src, model.src_embed.num_embeddings, "src")
        self.model = model
        self.memory = model.encode(src, src_lengths)  # (B, L_s, D), computed once
        self.memory_mask = model.src_mask(src, src_lengths)

    def new_cache(self, initial_capacity: int = 256) -> KVCache:
        return self.model.new_cache(initial_capacity)

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        check_token_ids(tokens, self.model.tgt_embed.num_embeddings)
        check_same_batch("tokens", tokens.shape[0], "source", self.memory.shape[0])
        return self.model.decode(tokens, self.memory, self.memory_mask, cache=cache)  # (B, L, V)


class DecoderOnlyLM(nn.Module):
    """A GPT-style language model: token embedding, a stack of causal self-attention blocks
    (:class:`~transformer_lib.layers.TransformerBlock`), a final norm and a linear head, by default
    tied to the embedding.

    Built from a :class:`~transformer_lib.config.ModelConfig`, ``DecoderOnlyLM(config)``, or from
    that configuration's fields, ``DecoderOnlyLM(61, 32, 4, 2, positional="rope")`` (the same
    model); ``model.config`` is the configuration, saved beside the weights by
    :func:`transformer_lib.saving.save_pretrained`.

    ``positional`` is one of 'sinusoidal', 'learned', 'rope', 'alibi', 'none'; ``norm`` is
    'layer' or 'rms'; ``activation`` 'relu', 'gelu' or 'swiglu'. ``forward(tokens, cache=None)`` ->
    logits (B, L, V); with a cache from :meth:`new_cache` the tokens continue after the cached ones
    (chapter 17 adds the cache to this model).
    ``ffn=False`` switches every block's FFN off (attention-only blocks, chapter 6; see
    :class:`~transformer_lib.layers.TransformerBlock`).

    The switches that make chapter 16's GPT a Llama (SmolLM2, chapter 17; see
    :data:`LLAMA_SWITCHES`): ``num_kv_heads`` (grouped-query attention), ``bias=False`` (no bias in
    any linear layer), ``rope_base`` and ``rotary_style`` (RoPE's wavelengths and its pair layout,
    'interleaved' or 'halves'), ``norm_eps`` (the norms' epsilon), ``activation="swiglu"``,
    ``norm="rms"`` and ``tie_weights``. ``max_len`` is the context length: the learned table's size
    and the length a pretrained model was trained for (RoPE, ALiBi and sinusoidal models still run
    past it, which is how chapter 5 measures extrapolation). ``num_experts`` makes every block's FFN a
    :class:`~transformer_lib.moe.MixtureOfExperts` of that many SwiGLU experts of width ``d_ff``,
    ``top_k`` of them run per token (chapter 25). ``strict_length=True`` makes
    ``max_len`` a hard limit for every scheme: a call whose cached plus new tokens pass it is refused
    before any layer runs (a pretrained model's trained context, such as SmolLM2's 8192).

    ``init_std`` (default None: torch's own initialisation) re-draws every embedding and linear
    weight from N(0, init_std^2) and zeroes the biases (GPT-2 draws its weight matrices and token
    embeddings with 0.02, its positions with 0.01, and scales the residual projections by
    1/sqrt(N), N residual layers; only the common 0.02 is kept here). It matters with a tied
    head: torch's N(0, 1) embedding makes the initial logits ~sqrt(d_model) large, so the
    untrained model starts confidently wrong (chapter 16).
    """

    def __init__(self, *args, **switches):
        super().__init__()
        config = ModelConfig.build(args, switches)  # DecoderOnlyLM(config, **changes) or its fields
        self.config = c = config
        self.positional, self.num_heads, self.max_len = c.positional, c.num_heads, c.max_len
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.pos, rotary = position_modules(c)  # a table added to the embeddings, or one RoPE for every block
        self.blocks = nn.ModuleList(TransformerBlock.from_config(c, rotary) for _ in range(c.num_layers))
        if c.num_experts is not None:  # each FFN -> MixtureOfExperts(d_model, d_ff, E, k)
            moe_decoder(self, num_experts=c.num_experts, top_k=c.top_k, shared_experts=c.shared_experts,
                        capacity_factor=c.capacity_factor)
        self.norm = make_norm(c.norm, c.d_model, c.norm_eps) if c.norm_first else None
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.head.weight = self.embed.weight  # one Parameter: the head reads x @ E^T
        if c.init_std is not None:
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, std=c.init_std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)

    # A faster one-token step with a cache, offered each cached call: ``decode_step(model, tokens,
    # cache)`` returns the logits, or None to run the modules (quantization.fused sets one).
    decode_step = None

    def new_cache(self, initial_capacity: int = 256) -> KVCache:
        """An empty :class:`~transformer_lib.kv_cache.KVCache`, one entry per block."""
        return KVCache(len(self.blocks), initial_capacity)

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        check_context_length(tokens, cache, self.max_len if self.config.strict_length else None)
        if cache is not None and self.decode_step is not None:
            logits = self.decode_step(self, tokens, cache)
            if logits is not None:
                return logits
        check_token_ids(tokens, self.embed.num_embeddings)
        check_cache(cache, len(self.blocks))
        past, L = (0 if cache is None else cache.length), tokens.shape[1]
        # rows of different lengths (chapter 28): the cache gives each row its own offset and a mask
        offset, mask = (0, None) if cache is None else (cache.offset(), cache.mask(L))
        x = self.embed(tokens)  # (B, L, D)
        if self.pos is not None:
            x = self.pos(x, offset=offset)  # positions offset .. offset + L - 1
        bias = alibi_bias(self.num_heads, L, past + L, device=tokens.device) if self.positional == "alibi" else None
        for i, block in enumerate(self.blocks):  # causal: queries are the last L of past + L, or the cache's mask
            x = block(x, mask, bias, cache=cache, layer=i, causal=mask is None)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x)  # (B, L, V)


# What turns chapter 16's GPT (DecoderOnlyLM's defaults) into SmolLM2's architecture: the
# keyword arguments load_smollm2 passes beyond the sizes (chapter 17 prints them).
LLAMA_SWITCHES = dict(positional="rope", rotary_style="halves", norm="rms", activation="swiglu", bias=False,
                      tie_weights=True)
