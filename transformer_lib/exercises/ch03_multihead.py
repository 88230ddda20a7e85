"""Chapter 3 exercises: multi-head attention (split, merge, count, forward)."""
import math

import torch

from ..cost import count_parameters
from ..multihead import MultiHeadAttention, merge_heads, split_heads
from ._core import compare_function, compare_value, exercise, module_with, to_int


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- split_heads -------------------------------------------------------------------------------

def _split_inputs():
    g = _generator(3)
    return [(torch.randn(2, 5, 12, generator=g), 3), (torch.randn(1, 4, 8, generator=g), 1),
            (torch.randn(3, 7, 16, generator=g), 4), (torch.randn(2, 3, 6, generator=g), 6)]


@exercise("multihead.split_heads",
          hint="view the last axis as (num_heads, d_k), then move the head axis in front of the "
               "token axis; a bare view to (B, H, L, d_k) mixes features of different tokens")
def _check_split(answer):
    describe = lambda args: f"x of shape {tuple(args[0].shape)} with {args[1]} heads"
    return compare_function(answer, split_heads, _split_inputs(), what="split heads", describe=describe)


# -- merge_heads -------------------------------------------------------------------------------

def _merge_inputs():
    g = _generator(4)
    return [(torch.randn(2, 3, 5, 4, generator=g),), (torch.randn(1, 1, 4, 8, generator=g),),
            (torch.randn(3, 4, 7, 2, generator=g),)]


@exercise("multihead.merge_heads",
          hint="undo split_heads in reverse order: bring the token axis back before the head axis, "
               "then flatten (heads, d_k) into one feature axis")
def _check_merge(answer):
    return compare_function(answer, merge_heads, _merge_inputs(), what="merged heads",
                            describe=lambda a: f"input of shape {tuple(a[0].shape)}")


# -- parameter count ---------------------------------------------------------------------------

@exercise("multihead.parameter_count",
          hint="count the weights and biases of W^Q, W^K, W^V and W^O; ask yourself what the "
               "number of heads changes about those four matrices",
          call="parameter_count(d_model, num_heads, bias)")
def _check_count(answer):
    cases = [(512, 8, True), (512, 1, True), (512, 64, True), (64, 4, False), (96, 3, True), (8, 2, False)]
    for d, h, bias in cases:
        what = f"for d_model={d}, num_heads={h}, bias={bias} your count"
        expected = count_parameters(MultiHeadAttention(d, h, bias=bias))  # the init's draws are undone after the check
        compare_value(to_int(answer(d, h, bias), what), expected, what, rtol=0)
    return f"right for all {len(cases)} settings."


# -- multi-head forward from the projection matrices --------------------------------------------

def _forward_inputs():
    g = _generator(5)
    cases = []
    for B, L, D, h in ((2, 5, 8, 2), (1, 6, 12, 3), (2, 4, 16, 4), (1, 3, 6, 1)):
        ws = [torch.randn(D, D, generator=g) / math.sqrt(D) for _ in range(4)]
        x = torch.randn(B, L, D, generator=g)
        if h == 1:  # scores in the hundreds: a softmax written as exp / sum overflows
            x = 25.0 * x
        cases.append((x, *ws, h))
    return cases


@exercise("multihead.forward",
          hint="project with x @ W, split into heads, attend in every head with the scale "
               "1/sqrt(d_k) of the head's own width, merge, then apply W^O")
def _check_forward(answer):
    cases = _forward_inputs()
    expected = []
    for x, w_q, w_k, w_v, w_o, num_heads in cases:  # the library's module with these weights (y = x @ weight.T)
        mha = module_with(MultiHeadAttention, x.shape[-1], num_heads, bias=False,
                          weights={"q_proj.weight": w_q.T, "k_proj.weight": w_k.T, "v_proj.weight": w_v.T,
                                   "out_proj.weight": w_o.T})
        with torch.no_grad():
            expected.append(mha(x)[0])
    return compare_function(answer, expected, cases, what="multi-head output", atol=1e-4,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)} with {a[-1]} heads")
