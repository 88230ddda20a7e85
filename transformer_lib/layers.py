"""The library's two blocks, in the paper's order.

* :class:`TransformerBlock`: self-attention + feed-forward. One class, two roles: with no mask
  (or a padding mask) it is an encoder layer (the encoder-decoder's encoder, MiniLM); with a
  causal mask it is a GPT block (every decoder-only model of the book, SmolLM2 included).
* :class:`DecoderLayer`: the encoder-decoder's decoder layer, a TransformerBlock plus
  cross-attention to the encoder's output between its two sub-layers.

Each sub-layer (self-attention, cross-attention, feed-forward) is wrapped in a residual
connection and a LayerNorm. Two placements of the norm are supported:

* Post-LN (the paper, ``norm_first=False``):  x = LN(x + Sublayer(x))
* Pre-LN  (GPT-2 and most modern models, ``norm_first=True``):  x = x + Sublayer(LN(x))

Pre-LN keeps an identity path from the input to the output of the whole stack, which is why it
trains stably without learning-rate warmup (Xiong et al. 2020); the layer-norm chapter measures it.

Layers keep no attention weights of their own: run a model inside
:func:`transformer_lib.probes.record_attention` (``weights=True``) to look at them.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_same_batch, check_torch_activation
from .feedforward import FeedForward
from .latent_attention import LatentAttention
from .multihead import MultiHeadAttention
from .norms import LayerNorm, make_norm

__all__ = ["TransformerBlock", "DecoderLayer", "HOOK_POINTS"]

# The hook points every block of the library has (TransformerBlock, DecoderLayer): nn.Identity modules.
HOOK_POINTS = ("hook_attn_out", "hook_ffn_out", "hook_z", "hook_pattern", "hook_resid_post")


def _add_hook_points(block: nn.Module) -> None:
    """Give ``block`` the hook points of :data:`HOOK_POINTS` (no weights, no random numbers drawn)."""
    for name in HOOK_POINTS:
        setattr(block, name, nn.Identity())


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        if dst.bias is not None:
            dst.bias.copy_(src.bias)


def _from_torch(cls, layer: nn.Module, attention_names: tuple[str, ...], norm_names: tuple[str, ...]):
    """Copy a ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` into ``cls``.

    ``attention_names`` pairs our attention modules with torch's in order (``self_attn``, then
    torch's ``multihead_attn`` as our ``cross_attn``); ``norm_names`` are the norms to copy.
    """
    sa = layer.self_attn
    ours = cls(sa.embed_dim, sa.num_heads, layer.linear1.out_features, dropout=layer.dropout.p,
               activation=check_torch_activation("layer.activation", layer.activation), norm_first=layer.norm_first,
               bias=sa.in_proj_bias is not None)
    for ours_name, torch_name in zip(("self_attn", "cross_attn"), attention_names):
        setattr(ours, ours_name, MultiHeadAttention.from_torch(getattr(layer, torch_name)))
    _copy_linear(ours.ffn.linear1, layer.linear1)
    _copy_linear(ours.ffn.linear2, layer.linear2)
    for name in norm_names:
        setattr(ours, name, LayerNorm.from_torch(getattr(layer, name)))
    return ours.to(layer.linear1.weight.device)


class TransformerBlock(nn.Module):
    """Self-attention + feed-forward, each with residual and norm: the one block of the library
    that is both an encoder layer and a GPT block.

    ``block(x, mask=None)`` with x (B, L, d_model) and a boolean mask (True = may attend)
    broadcastable to (B, H, L, L). What the block is depends only on the mask it is given, never
    on its weights: with no mask (or a padding mask) every token sees every other, and it is an
    encoder layer (the layers of :class:`~transformer_lib.model.Encoder`, and MiniLM's); with a
    causal mask (``causal=True``, or :func:`~transformer_lib.masks.causal_mask`) each token sees
    only itself and the past, and it is a GPT block (the ``blocks`` of
    :class:`~transformer_lib.model.DecoderOnlyLM`).

    ``ffn=False`` builds the FFN as usual (same initial weights for everything else) and then
    switches it off for good: its output matrix is zero and frozen, so the block is attention +
    residual + norm only (chapter 6's attention-only control).

    ``num_kv_heads`` < ``num_heads`` shares key/value heads (grouped-query attention).
    ``attention`` (a built :class:`MultiHeadAttention`, as :meth:`from_config` passes) replaces the
    attention the other arguments would build.

    Hook points (``nn.Identity``, no weights; see :mod:`transformer_lib.probes`): ``hook_attn_out``
    and ``hook_ffn_out`` (B, L, D) are what each sub-layer adds to the residual stream, ``hook_z``
    (B, L, H, head_dim) each head's output before W^O, ``hook_pattern`` (B, H, L, L) the weights,
    ``hook_resid_post`` (B, L, D) the residual stream after the block.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, norm: str = "layer",
                 eps: float = 1e-5, rotary: nn.Module | None = None, bias: bool = True, ffn: bool = True,
                 num_kv_heads: int | None = None, attention: MultiHeadAttention | None = None):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention if attention is not None else MultiHeadAttention(
            d_model, num_heads, num_kv_heads, bias=bias, dropout=dropout, rotary=rotary)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        if not ffn:
            self.ffn.switch_off()
        _add_hook_points(self)

    def _ff(self, x):
        return self.hook_ffn_out(self.dropout2(self.ffn(x)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, cache=None, layer: int = 0, causal: bool = False) -> torch.Tensor:
        """``cache``/``layer``/``causal``: see :class:`MultiHeadAttention` (a decoder-only model)."""
        return self.around(x, lambda h: self.self_attn(h, mask=mask, bias=bias, causal=causal, cache=cache,
                                                       layer=layer, hook_z=self.hook_z,
                                                       hook_pattern=self.hook_pattern)[0])

    def around(self, x: torch.Tensor, attend) -> torch.Tensor:
        """The block's wiring (norms, residuals, dropout, FFN, hook points) around ``attend``, a
        function from the attention's input to its output: ``forward`` passes the block's own
        attention; a caller with its own attention over a paged cache
        (:mod:`transformer_lib.serving.varlen`) passes that, and the rest of the block is this one."""
        def sa(h):
            return self.hook_attn_out(self.dropout1(attend(h)))
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + self._ff(x))
        return self.hook_resid_post(x)  # (B, L, D): the residual stream after this block

    @classmethod
    def from_config(cls, config, rotary: nn.Module | None = None) -> "TransformerBlock":
        """A block of a :class:`~transformer_lib.config.ModelConfig`'s decoder-only model; its
        attention is built by :meth:`MultiHeadAttention.from_config`, or
        :meth:`~transformer_lib.latent_attention.LatentAttention.from_config` for ``attention="mla"``
        (first, as the keyword path does: the same random draws in the same order)."""
        attention = (LatentAttention.from_config(config) if config.attention == "mla"
                     else MultiHeadAttention.from_config(config, rotary))
        return cls(config.d_model, config.num_heads, config.ffn_width, config.dropout, config.activation,
                   config.norm_first, norm=config.norm, eps=config.norm_eps, bias=config.bias, ffn=config.ffn,
                   attention=attention)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "TransformerBlock":
        """Copy a ``torch.nn.TransformerEncoderLayer`` (any batch_first / norm_first, relu or gelu)."""
        return _from_torch(cls, layer, ("self_attn",), ("norm1", "norm2"))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward: a
    :class:`TransformerBlock` plus cross-attention (the encoder-decoder's decoder layer).

    ``layer(x, memory, self_mask=None, memory_mask=None)``: x (B, L_t, d_model) target states,
    memory (B, L_s, d_model) encoder output; ``self_mask`` broadcastable to (B, H, L_t, L_t)
    (usually causal & target padding), ``memory_mask`` to (B, H, L_t, L_s) (source padding).
    Hook points as in :class:`TransformerBlock` (``hook_z``/``hook_pattern`` are the self-attention's).
    ``num_kv_heads`` (grouped-query attention, both attentions) and ``rotary`` (RoPE, the
    self-attention only) are the decoder-only block's switches.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, norm: str = "layer",
                 eps: float = 1e-5, bias: bool = True, rotary: nn.Module | None = None,
                 num_kv_heads: int | None = None):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, num_kv_heads, bias=bias, dropout=dropout, rotary=rotary)
        # cross-attention: queries from the target, keys from the source, two position systems, so
        # no rotation (T5 and the RoPE encoder-decoders rotate only within one sequence)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, num_kv_heads, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.norm3 = make_norm(norm, d_model, eps)
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))
        _add_hook_points(self)  # of the self-attention (hook_z, hook_pattern) and the FFN

    def _sa(self, x, mask, cache, layer):
        out = self.self_attn(x, mask=mask, cache=cache, layer=layer, hook_z=self.hook_z,
                             hook_pattern=self.hook_pattern)[0]
        return self.hook_attn_out(self.dropout1(out))

    def _ca(self, x, memory, mask):
        return self.dropout2(self.cross_attn(x, memory, memory, mask=mask)[0])

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache=None, layer: int = 0) -> torch.Tensor:
        """``cache``/``layer`` cache the self-attention's keys and values only; cross-attention
        reads the (fixed) memory again at every step."""
        check_same_batch("target", x.shape[0], "memory", memory.shape[0])
        if self.norm_first:
            x = x + self._sa(self.norm1(x), self_mask, cache, layer)
            x = x + self._ca(self.norm2(x), memory, memory_mask)
            x = x + self.hook_ffn_out(self.dropout3(self.ffn(self.norm3(x))))
        else:
            x = self.norm1(x + self._sa(x, self_mask, cache, layer))
            x = self.norm2(x + self._ca(x, memory, memory_mask))
            x = self.norm3(x + self.hook_ffn_out(self.dropout3(self.ffn(x))))
        return self.hook_resid_post(x)  # (B, L_t, D)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """Copy a ``torch.nn.TransformerDecoderLayer``."""
        return _from_torch(cls, layer, ("self_attn", "multihead_attn"), ("norm1", "norm2", "norm3"))
