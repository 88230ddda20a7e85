"""Chapter 1 exercises: attention scores, scaled dot-product attention, softmax entropy and the
temperature hidden in the missing 1/sqrt(d_k).

Every checker runs the reader's function on inputs the reader has not seen (several shapes,
L_q != L_k so a transpose in the wrong place shows, a batch of heads so 2-D-only code shows) and
compares with :func:`transformer_lib.scaled_dot_product_attention` or a one-line reference.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention
from ._core import NotYet, compare_arrays, compare_function, exercise

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

def _scores_reference(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., L_q, L_k)


@exercise("attention.scores",
          hint="multiply q by k transposed on its last two axes (k.transpose(-2, -1)), then divide "
               "by the square root of d_k = q.shape[-1]",
          wrong_answers=lambda: [
              lambda q, k: q @ k.transpose(-2, -1),  # forgot the scale
              lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1],  # divided by d_k, not sqrt(d_k)
              lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]),  # (L_k, L_q): transposed
              lambda q, k: q @ k.transpose(0, 1) / math.sqrt(q.shape[-1]),  # right for 2-D only
              lambda q, k: q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1]),  # multiplied by the scale
              lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2]),  # sqrt(L_k), not sqrt(d_k)
          ],
          solution=lambda: _scores_reference,
          alternative_answers=lambda: [
              lambda q, k: torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5,  # einsum
              lambda q, k: np.matmul(q.numpy(), np.swapaxes(k.numpy(), -1, -2)) / np.sqrt(q.shape[-1]),  # NumPy
          ])
def _check_scores(answer):
    return compare_function(answer, _scores_reference, _qkv_inputs(with_values=False),
                            what="scores", describe=_describe)


# -- 2. scaled dot-product attention ---------------------------------------------------------------

def _naive_exp_attention(q, k, v):
    """A wrong answer: softmax written as exp / sum without subtracting the row maximum."""
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w


def _wrong_axis_attention(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2)  # columns, not rows
    return w @ v, w


def _unscaled_attention(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return w @ v, w


def _scaled_by_d_k_attention(q, k, v):  # divides by d_k, not its square root
    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)
    return w @ v, w


def _scores_times_values(q, k, v):  # the output mixes the values with the scores, not the weights
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s @ v, torch.softmax(s, dim=-1)


def _einsum_stable_attention(q, k, v):
    """A right answer written differently: einsum and a hand-made softmax that subtracts the row max."""
    s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])  # (..., L_q, L_k)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    w = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kv->...qv", w, v), w


def _numpy_attention(q, k, v):
    """A right answer in NumPy (float64), returned as a list [output, weights]."""
    q, k, v = (t.double().numpy() for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return [w @ v, w]


@exercise("attention.scaled_dot_product",
          hint="scores = q k^T / sqrt(d_k); weights = softmax over the *last* axis (one distribution "
               "per query); output = weights @ v. torch.softmax is safe with large scores; a "
               "hand-written exp() must subtract each row's maximum first",
          wrong_answers=lambda: [_wrong_axis_attention, _unscaled_attention, _naive_exp_attention,
                                 lambda q, k, v: _unscaled_attention(q, k, v)[::-1],
                                 _scaled_by_d_k_attention, _scores_times_values,
                                 lambda q, k, v: scaled_dot_product_attention(q, k, v)[::-1]],  # (weights, output)
          solution=lambda: scaled_dot_product_attention,
          alternative_answers=lambda: [_einsum_stable_attention, _numpy_attention])
def _check_sdpa(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
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

def _entropy_reference(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # xlogy(0, 0) = 0


def _entropy_inputs() -> list[tuple]:
    g = torch.Generator().manual_seed(3)
    rows = torch.softmax(torch.randn(4, 7, generator=g), dim=-1)
    one_hot = torch.eye(5)  # exact zeros: 0 * log 0 must count as 0
    uniform = torch.full((2, 8), 1 / 8)
    mixed = torch.softmax(3.0 * torch.randn(2, 3, 6, generator=g), dim=-1)
    mixed[0, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    return [(rows,), (one_hot,), (uniform,), (mixed,)]


def _entropy_by_loops(weights):
    """A right answer with Python loops over the rows, skipping the zeros."""
    rows = weights.reshape(-1, weights.shape[-1]).tolist()  # (N, L) as lists
    entropies = [-sum(a * math.log(a) for a in row if a > 0) for row in rows]
    return np.array(entropies).reshape(tuple(weights.shape[:-1]))


@exercise("attention.entropy",
          hint="H = -sum_j a_j log a_j over the last axis, natural log (nats), with 0 log 0 = 0 "
               "(torch.special.xlogy(a, a) computes a log a and gives 0 at a = 0)",
          wrong_answers=lambda: [
              lambda w: -(w * torch.log(w)).sum(-1),  # NaN where a weight is exactly 0
              lambda w: -torch.special.xlogy(w, w).sum(-1) / math.log(2),  # bits, not nats
              lambda w: torch.special.xlogy(w, w).sum(-1),  # sign
              lambda w: -torch.special.xlogy(w, w).mean(-1),  # mean instead of sum
              lambda w: -torch.special.xlogy(w, w).sum(-1, keepdim=True),  # keeps the summed axis
              lambda w: -(w * torch.log(w + 1e-3)).sum(-1),  # an epsilon large enough to move the result
          ],
          solution=lambda: _entropy_reference,
          alternative_answers=lambda: [
              lambda w: -(w * torch.log(torch.where(w > 0, w, torch.ones_like(w)))).sum(-1),  # log 1 = 0 at a = 0
              _entropy_by_loops,
          ])
def _check_entropy(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    names = ["random softmax rows", "one-hot rows (exact zeros)", "uniform rows", "a batch of rows"]
    for name, (weights,) in zip(names, _entropy_inputs()):
        compare_arrays(answer(weights.clone()), _entropy_reference(weights), what=f"entropy for {name}")
    return f"matches the reference on all {len(names)} test inputs."


# -- 4. the temperature of a missing scale -----------------------------------------------------------

@exercise("attention.unscaled_temperature",
          hint="softmax(s) = softmax((s / sqrt(d_k)) / T): solve for T",
          wrong_answers=lambda: [lambda d_k: math.sqrt(d_k), lambda d_k: 1 / d_k, lambda d_k: 1.0,
                                 lambda d_k: float(d_k),  # T = d_k
                                 lambda d_k: 1 / math.sqrt(d_k + 1)],  # off by one
          solution=lambda: lambda d_k: 1 / math.sqrt(d_k),
          alternative_answers=lambda: [lambda d_k: np.float32(d_k) ** -0.5,  # a NumPy scalar
                                       lambda d_k: torch.tensor([float(d_k)]).rsqrt()])  # a one-element tensor
def _check_temperature(answer):
    inputs = [(1,), (16,), (64,), (512,)]
    return compare_function(answer, lambda d_k: torch.tensor(1 / math.sqrt(d_k)).double(), inputs,
                            what="temperature", describe=lambda args: f"d_k = {args[0]}")
