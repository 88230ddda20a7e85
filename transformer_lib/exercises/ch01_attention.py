"""Chapter 1 exercises: attention scores, scaled dot-product attention, softmax entropy and the
temperature hidden in the missing 1/sqrt(d_k).

Every checker runs the reader's function on inputs the reader has not seen (several shapes,
L_q != L_k so a transpose in the wrong place shows, a batch of heads so 2-D-only code shows) and
compares with :func:`transformer_lib.scaled_dot_product_attention`. The library has no public
function for the raw scores or for the entropy of a row, so those two compare with stored numbers
(:func:`~transformer_lib.exercises.expected_values`); the temperature is checked by the property
that defines it, softmax(s) = softmax(s / sqrt(d_k) / T).
"""
from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._core import NotYet, compare_arrays, compare_function, exercise, expected_values, to_number

__all__ = []


def _qkv_inputs(with_values: bool = True, large: bool = False) -> list[tuple]:
    """Test inputs: 2-D, a batch of heads (B, H, L, d_k), d_k = 1, and L_q != L_k everywhere."""
    g = torch.Generator().manual_seed(1)
    shapes = [((3,), 5, 4, 6), ((2, 3), 4, 7, 8), ((1,), 6, 2, 1), ((), 3, 5, 16)]
    inputs = []
    for batch, L_q, L_k, d_k in shapes:
        q = torch.randn(*batch, L_q, d_k, generator=g)
        k = torch.randn(*batch, L_k, d_k, generator=g)
        v = torch.randn(*batch, L_k, 5, generator=g)
        inputs.append((q, k, v) if with_values else (q, k))
    if large:  # scores in the hundreds: exp() overflows unless the softmax subtracts the row max
        q = 12.0 * torch.randn(2, 4, 64, generator=g)
        k = 12.0 * torch.randn(2, 6, 64, generator=g)
        v = torch.randn(2, 6, 3, generator=g)
        inputs.append((q, k, v) if with_values else (q, k))
    return inputs


def _describe(args) -> str:
    q, k = args[0], args[1]
    return f"q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)}"


# -- 1. the scores -------------------------------------------------------------------------------

@exercise("attention.scores",
          hint="multiply q by k transposed on its last two axes (k.transpose(-2, -1)), then divide "
               "by the square root of d_k = q.shape[-1]")
def _check_scores(answer):
    return compare_function(answer, expected_values("attention.scores"), _qkv_inputs(with_values=False),
                            what="scores", describe=_describe)


# -- 2. scaled dot-product attention ---------------------------------------------------------------


@exercise("attention.scaled_dot_product",
          hint="scores = q k^T / sqrt(d_k); weights = softmax over the *last* axis (one distribution "
               "per query); output = weights @ v. torch.softmax is safe with large scores; a "
               "hand-written exp() must subtract each row's maximum first")
def _check_sdpa(answer):
    inputs = _qkv_inputs(with_values=True, large=True)
    for n, (q, k, v) in enumerate(inputs, 1):
        label = _describe((q, k)) + (" (large scores)" if n == len(inputs) else "")
        got = answer(q, k, v)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return a pair (output, weights)")
        expected_out, expected_w = scaled_dot_product_attention(q, k, v)
        compare_arrays(got[1], expected_w, what=f"weights for {label}")
        compare_arrays(got[0], expected_out, what=f"output for {label}")
    return f"output and weights match transformer_lib.scaled_dot_product_attention on all {len(inputs)} inputs."


# -- 3. the entropy of a softmax row ----------------------------------------------------------------

def _entropy_inputs() -> list[tuple]:
    g = torch.Generator().manual_seed(3)
    rows = torch.softmax(torch.randn(4, 7, generator=g), dim=-1)
    one_hot = torch.eye(5)  # exact zeros: 0 * log 0 must count as 0
    uniform = torch.full((2, 8), 1 / 8)
    mixed = torch.softmax(3.0 * torch.randn(2, 3, 6, generator=g), dim=-1)
    mixed[0, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    return [(rows,), (one_hot,), (uniform,), (mixed,)]


@exercise("attention.entropy",
          hint="H = -sum_j a_j log a_j over the last axis, natural log (nats), with 0 log 0 = 0 "
               "(torch.special.xlogy(a, a) computes a log a and gives 0 at a = 0)")
def _check_entropy(answer):
    names = ["random softmax rows", "one-hot rows (exact zeros)", "uniform rows", "a batch of rows"]
    for name, (weights,), expected in zip(names, _entropy_inputs(), expected_values("attention.entropy")):
        compare_arrays(answer(weights.clone()), expected, what=f"entropy for {name}")
    return f"matches the reference on all {len(names)} test inputs."


# -- 4. the temperature of a missing scale -----------------------------------------------------------

@exercise("attention.unscaled_temperature",
          hint="softmax(s) = softmax((s / sqrt(d_k)) / T): solve for T")
def _check_temperature(answer):
    g = torch.Generator().manual_seed(4)
    dims = (1, 16, 64, 512)
    for d_k in dims:
        T = to_number(answer(d_k), f"the temperature for d_k = {d_k}")
        s = 4.0 * torch.randn(3, 9, generator=g, dtype=torch.float64)  # scores q k^T of unscaled attention
        compare_arrays(torch.softmax(s / math.sqrt(d_k) / T, dim=-1), torch.softmax(s, dim=-1),
                       what=f"softmax(s / sqrt(d_k) / T) against softmax(s) for d_k = {d_k}")
    return f"matches the library on all {len(dims)} test inputs."
