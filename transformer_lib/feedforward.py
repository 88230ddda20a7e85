"""The position-wise feed-forward network: d_model -> expansion * d_model -> d_model.

    FFN(x) = W_2 act(W_1 x + b_1) + b_2           (ReLU in the paper, GELU in BERT/GPT)
    SwiGLU(x) = W_2 (SiLU(W_1 x) * (W_3 x))        (Llama, PaLM)

The same two matrices are applied to every position independently: no information moves between
tokens here (that is attention's job), so permuting the tokens permutes the outputs.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_choice, check_features, check_int, check_probability
import torch.nn.functional as F

__all__ = ["FeedForward", "ACTIVATIONS"]

ACTIVATIONS = ("relu", "gelu", "swiglu")


class FeedForward(nn.Module):
    """Position-wise FFN. ``d_ff`` defaults to ``expansion * d_model`` (4x in the paper).

    For SwiGLU a third matrix (the gate ``linear3``) is added; pass a smaller ``d_ff`` (about
    8/3 d_model) to keep the parameter count of a 4x ReLU FFN.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, activation: str = "relu",
                 dropout: float = 0.0, bias: bool = True, expansion: float = 4):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        check_int("d_model", d_model)
        check_probability("dropout", dropout)
        d_ff = int(round(expansion * d_model)) if d_ff is None else d_ff
        check_int("d_ff", d_ff)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1: expand
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2: project back
        self.linear3 = nn.Linear(d_model, d_ff, bias=bias) if activation == "swiglu" else None  # gate
        self.dropout = nn.Dropout(dropout)

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """The activations in the wide layer, (..., d_ff): what the chapter plots."""
        h = self.linear1(x)
        if self.activation == "relu":
            return F.relu(h)
        if self.activation == "gelu":
            return F.gelu(h)
        return F.silu(h) * self.linear3(x)

    @torch.no_grad()
    def switch_off(self) -> None:
        """Output zero forever: W_2 (and b_2) set to zero and every parameter frozen (chapter 6)."""
        nn.init.zeros_(self.linear2.weight)
        if self.linear2.bias is not None:
            nn.init.zeros_(self.linear2.bias)
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        return self.linear2(self.dropout(self.activations(x)))
