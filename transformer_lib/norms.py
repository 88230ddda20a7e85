"""Layer normalization from scratch, RMSNorm, and a BatchNorm over tokens for comparison.

LayerNorm normalizes *each token* over its d features:

    LN(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta

with the biased variance (divide by d, not d - 1), as in the paper and in ``torch.nn.LayerNorm``.
It never looks at other tokens or other sequences, so a token's output does not depend on the
batch it sits in, and training and inference behave the same.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_choice, check_features, check_int, check_number, check_probability, check_torch_layer_norm

__all__ = ["LayerNorm", "RMSNorm", "TokenBatchNorm", "make_norm"]


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension, written out."""

    def __init__(self, d_model: int, eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__()
        check_int("d_model", d_model)
        check_number("eps", eps, 0, low_open=True)
        self.d_model, self.eps = d_model, eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(d_model))  # gamma
            self.bias = nn.Parameter(torch.zeros(d_model))  # beta
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1) one mean per token
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1) biased, like the paper
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            x_hat = x_hat * self.weight + self.bias
        return x_hat

    @classmethod
    def from_torch(cls, ln: nn.LayerNorm) -> "LayerNorm":
        """Copy gamma/beta/eps of a ``torch.nn.LayerNorm`` over a single last dimension."""
        check_torch_layer_norm(ln)
        ours = cls(ln.normalized_shape[0], eps=ln.eps, elementwise_affine=ln.elementwise_affine)
        if ln.elementwise_affine:
            ours = ours.to(device=ln.weight.device, dtype=ln.weight.dtype)
            with torch.no_grad():
                ours.weight.copy_(ln.weight)
                if ln.bias is not None:
                    ours.bias.copy_(ln.bias)
                else:
                    ours.bias.zero_()
        return ours


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019): no mean subtraction, no beta.

        RMSNorm(x) = gamma * x / sqrt(mean(x^2) + eps)

    Cheaper than LayerNorm and used by Llama-style models.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_int("d_model", d_model)
        check_number("eps", eps, 0, low_open=True)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1): 1 / rms
        return self.weight * (x * inv_rms)  # the same rounding as Llama / torch.nn.RMSNorm (chapter 17 parity)


class TokenBatchNorm(nn.Module):
    """BatchNorm applied to token vectors: statistics per *feature* over all tokens in the batch.

    Input (B, L, D). In training mode each feature is normalized with the mean/variance of the
    B * L tokens present (padding tokens included: that is the point of the comparison), and running averages are
    updated; in eval mode the running averages are used. This is the comparison point for
    LayerNorm in the layer-norm chapter: here a token's output depends on its neighbours.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        check_int("d_model", d_model)
        check_number("eps", eps, 0, low_open=True)
        check_probability("momentum", momentum)
        self.bn = nn.BatchNorm1d(d_model, eps=eps, momentum=momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, dims=3)
        B, L, D = x.shape
        return self.bn(x.reshape(B * L, D)).view(B, L, D)  # tokens as the batch axis


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """'layer' -> LayerNorm, 'rms' -> RMSNorm."""
    check_choice("norm", kind, ("layer", "rms"))
    return LayerNorm(d_model, eps=eps) if kind == "layer" else RMSNorm(d_model, eps=eps)
