"""Chapter 6 (feed-forward network) exercises: GELU, SwiGLU, the FFN's parameter share, SwiGLU's width."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..cost import count_parameters
from ..feedforward import FeedForward
from ..layers import TransformerBlock
from ._core import compare_function, compare_value, exercise, seed_cpu


def _ffn_case(d_model, d_ff, activation, seed, bias=True):
    """A library FFN with random weights, its weights in the chapter's x @ W convention, an input."""
    g = torch.Generator().manual_seed(seed)
    seed_cpu(seed)  # the init draws from the global CPU generator (restored after every check)
    ffn = FeedForward(d_model, d_ff, activation=activation, bias=bias).eval()
    x = torch.randn(2, 5, d_model, generator=g)  # (B, L, d_model)
    return ffn, x


# -- 1. GELU ------------------------------------------------------------------------------------


@exercise("ffn.gelu",
          hint="GELU(x) = x * Phi(x), where Phi is the standard normal CDF: Phi(x) = (1 + erf(x / sqrt(2))) / 2")
def _check_gelu(answer):
    g = torch.Generator().manual_seed(4)
    inputs = [(torch.linspace(-6, 6, 241),), (3 * torch.randn(4, 7, generator=g),)]
    return compare_function(answer, F.gelu, inputs, what="GELU", atol=1e-5,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)}")


# -- 2. SwiGLU ------------------------------------------------------------------------------------

def _swiglu_cases() -> list[tuple]:
    """Library SwiGLU FFNs with random weights and an input each; the reader gets the weights in
    the chapter's x @ W convention, (x, W1, W3, W2), and must reproduce the module's output."""
    cases = []
    for n, (d, d_ff) in enumerate([(4, 8), (8, 21), (16, 40)]):
        ffn, x = _ffn_case(d, d_ff, "swiglu", seed=10 + n, bias=False)
        weights = (ffn.linear1.weight.T.detach(), ffn.linear3.weight.T.detach(), ffn.linear2.weight.T.detach())
        cases.append((ffn, (x, *weights)))
    return cases


@exercise("ffn.swiglu",
          hint="SwiGLU(x) = (SiLU(x W1) * (x W3)) W2: the SiLU goes on the W1 branch, W3 is the linear gate")
def _check_swiglu(answer):
    cases = _swiglu_cases()
    with torch.no_grad():
        expected = [ffn(args[0]) for ffn, args in cases]
    return compare_function(answer, expected, [args for _, args in cases], what="SwiGLU output", atol=1e-5,
                            describe=lambda a: f"d_model={a[1].shape[0]}, d_ff={a[1].shape[1]}")


# -- 3. the FFN's share of an encoder layer's parameters --------------------------------------

@exercise("ffn.parameter_share",
          hint="count every weight and bias: four d x d projections with biases, two FFN matrices with "
               "biases, and two LayerNorms (gamma and beta each); return FFN / whole layer")
def _check_share(answer):
    for d, d_ff in [(4, 16), (8, 32), (16, 24), (32, 128)]:
        layer = TransformerBlock(d, num_heads=1, d_ff=d_ff)  # the init's draws are undone after the check
        expected = count_parameters(layer.ffn) / count_parameters(layer)
        compare_value(answer(d, d_ff), expected, f"the FFN share for d_model={d}, d_ff={d_ff}", rtol=0, atol=1e-6)
    return "the share is right for all 4 layer sizes."


# -- 4. how wide should a SwiGLU FFN be? --------------------------------------------------------

@exercise("ffn.swiglu_width",
          hint="a bias-free SwiGLU FFN has three d_model x d_ff matrices; a 4x ReLU FFN has two "
               "d_model x 4 d_model matrices. Set the counts equal and solve for d_ff")
def _check_width(answer):
    for d in (6, 96, 768, 4096):
        # bias-free FFNs have a parameter count proportional to their width: per unit of width the
        # ReLU FFN has 2 d parameters and the SwiGLU one 3 d, so equal counts need
        # d_ff * swiglu_per_unit = 4 d * relu_per_unit (the library's modules say how many each has)
        relu_per_unit = count_parameters(FeedForward(d, 1, activation="relu", bias=False))
        swiglu_per_unit = count_parameters(FeedForward(d, 1, activation="swiglu", bias=False))
        compare_value(answer(d), 4 * d * relu_per_unit / swiglu_per_unit, f"d_ff for d_model={d}", rtol=0, atol=0.5)
    return "same parameter count as the 4x FFN for all 4 widths."
