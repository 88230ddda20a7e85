"""Answers for the checkers of transformer_lib/exercises/ch06_feedforward.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from transformer_lib.cost import count_parameters
from transformer_lib.feedforward import FeedForward
from transformer_lib.layers import TransformerBlock


def _swiglu_reference(x, W1, W3, W2):
    """The library's bias-free SwiGLU FeedForward with these weights."""
    ffn = FeedForward(W1.shape[0], W1.shape[1], activation="swiglu", bias=False)
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1.T), ffn.linear3.weight.copy_(W3.T), ffn.linear2.weight.copy_(W2.T)
        return ffn(x)


def _share_reference(d_model, d_ff):
    layer = TransformerBlock(d_model, num_heads=1, d_ff=d_ff)
    return torch.tensor(count_parameters(layer.ffn) / count_parameters(layer), dtype=torch.float64)


def _width_reference(d_model):
    return torch.tensor(8 * d_model / 3, dtype=torch.float64)  # 3 d h = 2 d (4 d)  =>  h = 8 d / 3


def _gelu_tanh(x):  # the tanh approximation of GPT-2's code: close, but not the exact GELU
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _share_no_biases(d_model, d_ff):
    ffn, attn = 2 * d_model * d_ff, 4 * d_model * d_model
    return torch.tensor(ffn / (ffn + attn), dtype=torch.float64)


def _share_no_norms(d_model, d_ff):
    ffn = 2 * d_model * d_ff + d_ff + d_model
    attn = 4 * (d_model * d_model + d_model)
    return torch.tensor(ffn / (ffn + attn), dtype=torch.float64)


def _share_one_norm(d_model, d_ff):  # counts one LayerNorm, not two
    ffn = 2 * d_model * d_ff + d_ff + d_model
    attn = 4 * (d_model * d_model + d_model)
    return torch.tensor(ffn / (ffn + attn + 2 * d_model), dtype=torch.float64)


def _share_by_hand(d_model, d_ff):
    """A right answer as a plain float: FFN weights and biases over the whole layer's parameters."""
    ffn = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)  # W1, b1, W2, b2
    attention = 4 * (d_model * d_model + d_model)  # W^Q, W^K, W^V, W^O with biases
    norms = 2 * (2 * d_model)  # two LayerNorms, gamma and beta each
    return ffn / (ffn + attention + norms)


def _share_ratio(d_model, d_ff):  # FFN / attention, not FFN / layer
    ffn = 2 * d_model * d_ff + d_ff + d_model
    attn = 4 * (d_model * d_model + d_model)
    return torch.tensor(ffn / attn, dtype=torch.float64)


ANSWERS = {
    'ffn.gelu': {
        'solution': lambda: F.gelu,
        'alternatives': lambda: [
            lambda x: x * 0.5 * torch.erfc(-x / math.sqrt(2)),  # Phi(x) = erfc(-x / sqrt 2) / 2
            lambda x: np.vectorize(lambda v: v * 0.5 * (1 + math.erf(v / math.sqrt(2))))(x.double().numpy()),
        ],
        'wrong': lambda: [_gelu_tanh, F.silu, lambda x: x * torch.sigmoid(1.702 * x), F.relu,
                          lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2))),  # Phi(x) alone, without x
                          lambda x: x * 0.5 * (1 + torch.erf(x))],  # forgets the sqrt(2)
    },
    'ffn.swiglu': {
        'solution': lambda: _swiglu_reference,
        'alternatives': lambda: [
            lambda x, W1, W3, W2: torch.einsum(  # einsum, SiLU written as a * sigmoid(a)
                "blf,fd->bld", (lambda a: a * torch.sigmoid(a))(torch.einsum("bld,df->blf", x, W1))
                * torch.einsum("bld,df->blf", x, W3), W2),
            lambda x, W1, W3, W2: (lambda a, g: (a / (1 + np.exp(-a)) * g) @ W2.numpy())(  # NumPy
                x.numpy() @ W1.numpy(), x.numpy() @ W3.numpy()),
        ],
        'wrong': lambda: [lambda x, W1, W3, W2: (F.silu(x @ W3) * (x @ W1)) @ W2,  # branches swapped
                          lambda x, W1, W3, W2: (torch.sigmoid(x @ W1) * (x @ W3)) @ W2,  # GLU, not SwiGLU
                          lambda x, W1, W3, W2: F.silu(x @ W1) @ W2,  # no gate
                          lambda x, W1, W3, W2: F.silu((x @ W1) * (x @ W3)) @ W2,  # SiLU of the product
                          lambda x, W1, W3, W2: (F.gelu(x @ W1) * (x @ W3)) @ W2],  # GeGLU
    },
    'ffn.parameter_share': {
        'solution': lambda: _share_reference,
        'alternatives': lambda: [_share_by_hand,
                                 lambda d, f: np.float64(_share_by_hand(d, f))],
        'wrong': lambda: [_share_no_biases, _share_no_norms, _share_ratio,
                          lambda d, f: 100 * _share_reference(d, f),  # a percentage, not a fraction
                          _share_one_norm],
    },
    'ffn.swiglu_width': {
        'solution': lambda: _width_reference,
        'alternatives': lambda: [lambda d: int(8 * d / 3 + 0.5),  # rounded to a whole width
                                 lambda d: np.float32(2 * 4 * d) / 3],
        'wrong': lambda: [lambda d: 4 * d, lambda d: 2 * d, lambda d: 4 * d * 2 / 3 + 1,
                          lambda d: 2 * d / 3,  # forgets the 4x
                          lambda d: 6 * d],  # the ratio upside down: 4 d * 3 / 2
    },
}
