"""One encoder layer and one decoder layer, in the paper's order.

Each sub-layer (self-attention, cross-attention, feed-forward) is wrapped in a residual
connection and a LayerNorm. Two placements of the norm are supported:

* Post-LN (the paper, ``norm_first=False``):  x = LN(x + Sublayer(x))
* Pre-LN  (GPT-2 and most modern models, ``norm_first=True``):  x = x + Sublayer(LN(x))

Pre-LN keeps an identity path from the input to the output of the whole stack, which is why it
trains stably without learning-rate warmup (Xiong et al. 2020); the layer-norm chapter measures it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .feedforward import FeedForward
from .multihead import MultiHeadAttention
from .norms import LayerNorm, make_norm

__all__ = ["EncoderLayer", "DecoderLayer"]


def _torch_activation_name(layer: nn.Module) -> str:
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or isinstance(act, nn.GELU):
        return "gelu"
    raise ValueError(f"only relu and gelu activations can be copied, got {act!r}")


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        if dst.bias is not None:
            dst.bias.copy_(src.bias)


def _copy_norm(src: nn.LayerNorm) -> LayerNorm:
    return LayerNorm.from_torch(src)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each with residual and norm.

    ``layer(x, mask=None)`` with x (B, L, d_model) and a boolean mask (True = may attend)
    broadcastable to (B, H, L, L). Also the block of a decoder-only model when given a causal mask.
    Set ``keep_weights = True`` to store the last attention weights in ``self.attn_weights``.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, norm: str = "layer",
                 eps: float = 1e-5, rotary: nn.Module | None = None, bias: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout, rotary=rotary)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.keep_weights = False
        self.attn_weights: torch.Tensor | None = None

    def _sa(self, x, mask, bias):
        out, w = self.self_attn(x, mask=mask, need_weights=self.keep_weights, bias=bias)
        if self.keep_weights:
            self.attn_weights = w.detach()
        return self.dropout1(out)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask, bias)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self._sa(x, mask, bias))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "EncoderLayer":
        """Copy a ``torch.nn.TransformerEncoderLayer`` (any batch_first / norm_first, relu or gelu)."""
        sa = layer.self_attn
        ours = cls(sa.embed_dim, sa.num_heads, layer.linear1.out_features, dropout=layer.dropout.p,
                   activation=_torch_activation_name(layer), norm_first=layer.norm_first,
                   bias=sa.in_proj_bias is not None)
        ours.self_attn = MultiHeadAttention.from_torch(sa)
        _copy_linear(ours.ffn.linear1, layer.linear1)
        _copy_linear(ours.ffn.linear2, layer.linear2)
        ours.norm1, ours.norm2 = _copy_norm(layer.norm1), _copy_norm(layer.norm2)
        return ours.to(layer.linear1.weight.device)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    ``layer(x, memory, self_mask=None, memory_mask=None)``: x (B, L_t, d_model) target states,
    memory (B, L_s, d_model) encoder output; ``self_mask`` broadcastable to (B, H, L_t, L_t)
    (usually causal & target padding), ``memory_mask`` to (B, H, L_t, L_s) (source padding).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, norm: str = "layer",
                 eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.norm3 = make_norm(norm, d_model, eps)
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))
        self.keep_weights = False
        self.self_weights: torch.Tensor | None = None
        self.cross_weights: torch.Tensor | None = None

    def _sa(self, x, mask):
        out, w = self.self_attn(x, mask=mask, need_weights=self.keep_weights)
        if self.keep_weights:
            self.self_weights = w.detach()
        return self.dropout1(out)

    def _ca(self, x, memory, mask):
        out, w = self.cross_attn(x, memory, memory, mask=mask, need_weights=self.keep_weights)
        if self.keep_weights:
            self.cross_weights = w.detach()
        return self.dropout2(out)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[0] != memory.shape[0]:
            raise ValueError(f"batch sizes differ: target {x.shape[0]} vs memory {memory.shape[0]}")
        if self.norm_first:
            x = x + self._sa(self.norm1(x), self_mask)
            x = x + self._ca(self.norm2(x), memory, memory_mask)
            x = x + self.dropout3(self.ffn(self.norm3(x)))
        else:
            x = self.norm1(x + self._sa(x, self_mask))
            x = self.norm2(x + self._ca(x, memory, memory_mask))
            x = self.norm3(x + self.dropout3(self.ffn(x)))
        return x

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """Copy a ``torch.nn.TransformerDecoderLayer``."""
        sa = layer.self_attn
        ours = cls(sa.embed_dim, sa.num_heads, layer.linear1.out_features, dropout=layer.dropout.p,
                   activation=_torch_activation_name(layer), norm_first=layer.norm_first,
                   bias=sa.in_proj_bias is not None)
        ours.self_attn = MultiHeadAttention.from_torch(sa)
        ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        _copy_linear(ours.ffn.linear1, layer.linear1)
        _copy_linear(ours.ffn.linear2, layer.linear2)
        ours.norm1, ours.norm2, ours.norm3 = (_copy_norm(n) for n in (layer.norm1, layer.norm2, layer.norm3))
        return ours.to(layer.linear1.weight.device)
