"""Chapter 6 (feed-forward network) exercises: GELU, SwiGLU, the FFN's parameter share, SwiGLU's width."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..cost import count_parameters
from ..feedforward import FeedForward
from ..layers import EncoderLayer
from ._core import NotYet, compare_function, exercise, seed_cpu, to_number


def _ffn_case(d_model, d_ff, activation, seed, bias=True):
    """A library FFN with random weights, its weights in the chapter's x @ W convention, an input."""
    g = torch.Generator().manual_seed(seed)
    seed_cpu(seed)  # the init draws from the global CPU generator (restored after every check)
    ffn = FeedForward(d_model, d_ff, activation=activation, bias=bias).eval()
    x = torch.randn(2, 5, d_model, generator=g)  # (B, L, d_model)
    return ffn, x


def _compare_number(value, expected, what, atol):
    """NotYet saying 'too high' / 'too low' (never the value, never the gap)."""
    value = to_number(value, what)
    if not abs(value - expected) <= atol:  # also catches NaN
        raise NotYet(f"{what} is too {'high' if value > expected else 'low'}")


# -- 1. GELU ------------------------------------------------------------------------------------

def _gelu_tanh(x):  # the tanh approximation of GPT-2's code: close, but not the exact GELU
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@exercise("ffn.gelu",
          hint="GELU(x) = x * Phi(x), where Phi is the standard normal CDF: Phi(x) = (1 + erf(x / sqrt(2))) / 2",
          wrong_answers=lambda: [_gelu_tanh, F.silu, lambda x: x * torch.sigmoid(1.702 * x), F.relu,
                                 lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2))),  # Phi(x) alone, without x
                                 lambda x: x * 0.5 * (1 + torch.erf(x))],  # forgets the sqrt(2)
          solution=lambda: F.gelu,
          alternative_answers=lambda: [
              lambda x: x * 0.5 * torch.erfc(-x / math.sqrt(2)),  # Phi(x) = erfc(-x / sqrt 2) / 2
              lambda x: np.vectorize(lambda v: v * 0.5 * (1 + math.erf(v / math.sqrt(2))))(x.double().numpy()),
          ])
def _check_gelu(answer):
    g = torch.Generator().manual_seed(4)
    inputs = [(torch.linspace(-6, 6, 241),), (3 * torch.randn(4, 7, generator=g),)]
    return compare_function(answer, F.gelu, inputs, what="GELU", atol=1e-5,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)}")


# -- 2. SwiGLU ------------------------------------------------------------------------------------

def _swiglu_inputs():
    cases = []
    for n, (d, d_ff) in enumerate([(4, 8), (8, 21), (16, 40)]):
        ffn, x = _ffn_case(d, d_ff, "swiglu", seed=10 + n, bias=False)
        cases.append((x, ffn.linear1.weight.T.detach(), ffn.linear3.weight.T.detach(),
                      ffn.linear2.weight.T.detach()))
    return cases


def _swiglu_reference(x, W1, W3, W2):
    """The library's bias-free SwiGLU FeedForward with these weights."""
    ffn = FeedForward(W1.shape[0], W1.shape[1], activation="swiglu", bias=False)
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1.T), ffn.linear3.weight.copy_(W3.T), ffn.linear2.weight.copy_(W2.T)
        return ffn(x)


@exercise("ffn.swiglu",
          hint="SwiGLU(x) = (SiLU(x W1) * (x W3)) W2: the SiLU goes on the W1 branch, W3 is the linear gate",
          wrong_answers=lambda: [lambda x, W1, W3, W2: (F.silu(x @ W3) * (x @ W1)) @ W2,  # branches swapped
                                 lambda x, W1, W3, W2: (torch.sigmoid(x @ W1) * (x @ W3)) @ W2,  # GLU, not SwiGLU
                                 lambda x, W1, W3, W2: F.silu(x @ W1) @ W2,  # no gate
                                 lambda x, W1, W3, W2: F.silu((x @ W1) * (x @ W3)) @ W2,  # SiLU of the product
                                 lambda x, W1, W3, W2: (F.gelu(x @ W1) * (x @ W3)) @ W2],  # GeGLU
          solution=lambda: _swiglu_reference,
          alternative_answers=lambda: [
              lambda x, W1, W3, W2: torch.einsum(  # einsum, SiLU written as a * sigmoid(a)
                  "blf,fd->bld", (lambda a: a * torch.sigmoid(a))(torch.einsum("bld,df->blf", x, W1))
                  * torch.einsum("bld,df->blf", x, W3), W2),
              lambda x, W1, W3, W2: (lambda a, g: (a / (1 + np.exp(-a)) * g) @ W2.numpy())(  # NumPy
                  x.numpy() @ W1.numpy(), x.numpy() @ W3.numpy()),
          ])
def _check_swiglu(answer):
    return compare_function(answer, _swiglu_reference, _swiglu_inputs(), what="SwiGLU output", atol=1e-5,
                            describe=lambda a: f"d_model={a[1].shape[0]}, d_ff={a[1].shape[1]}")


# -- 3. the FFN's share of an encoder layer's parameters --------------------------------------

def _share_reference(d_model, d_ff):
    layer = EncoderLayer(d_model, num_heads=1, d_ff=d_ff)
    return torch.tensor(count_parameters(layer.ffn) / count_parameters(layer), dtype=torch.float64)


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


@exercise("ffn.parameter_share",
          hint="count every weight and bias: four d x d projections with biases, two FFN matrices with "
               "biases, and two LayerNorms (gamma and beta each); return FFN / whole layer",
          wrong_answers=lambda: [_share_no_biases, _share_no_norms, _share_ratio,
                                 lambda d, f: 100 * _share_reference(d, f),  # a percentage, not a fraction
                                 _share_one_norm],
          solution=lambda: _share_reference,
          alternative_answers=lambda: [_share_by_hand,
                                       lambda d, f: np.float64(_share_by_hand(d, f))])
def _check_share(answer):
    for d, d_ff in [(4, 16), (8, 32), (16, 24), (32, 128)]:
        expected = float(_share_reference(d, d_ff))
        _compare_number(answer(d, d_ff), expected, f"the FFN share for d_model={d}, d_ff={d_ff}", atol=1e-6)
    return "the share is right for all 4 layer sizes."


# -- 4. how wide should a SwiGLU FFN be? --------------------------------------------------------

def _width_reference(d_model):
    return torch.tensor(8 * d_model / 3, dtype=torch.float64)  # 3 d h = 2 d (4 d)  =>  h = 8 d / 3


@exercise("ffn.swiglu_width",
          hint="a bias-free SwiGLU FFN has three d_model x d_ff matrices; a 4x ReLU FFN has two "
               "d_model x 4 d_model matrices. Set the counts equal and solve for d_ff",
          wrong_answers=lambda: [lambda d: 4 * d, lambda d: 2 * d, lambda d: 4 * d * 2 / 3 + 1,
                                 lambda d: 2 * d / 3,  # forgets the 4x
                                 lambda d: 6 * d],  # the ratio upside down: 4 d * 3 / 2
          solution=lambda: _width_reference,
          alternative_answers=lambda: [lambda d: int(8 * d / 3 + 0.5),  # rounded to a whole width
                                       lambda d: np.float32(2 * 4 * d) / 3])
def _check_width(answer):
    for d in (6, 96, 768, 4096):
        _compare_number(answer(d), float(_width_reference(d)), f"d_ff for d_model={d}", atol=0.5)
    return "same parameter count as the 4x FFN for all 4 widths."
