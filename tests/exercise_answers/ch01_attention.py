"""Answers for the checkers of transformer_lib/exercises/ch01_attention.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import math

import numpy as np
import torch

from transformer_lib.attention import scaled_dot_product_attention


def _scores_reference(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., L_q, L_k)


def _entropy_reference(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # xlogy(0, 0) = 0


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


def _entropy_by_loops(weights):
    """A right answer with Python loops over the rows, skipping the zeros."""
    rows = weights.reshape(-1, weights.shape[-1]).tolist()  # (N, L) as lists
    entropies = [-sum(a * math.log(a) for a in row if a > 0) for row in rows]
    return np.array(entropies).reshape(tuple(weights.shape[:-1]))


ANSWERS = {
    'attention.scores': {
        'solution': lambda: _scores_reference,
        'alternatives': lambda: [
            lambda q, k: torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5,  # einsum
            lambda q, k: np.matmul(q.numpy(), np.swapaxes(k.numpy(), -1, -2)) / np.sqrt(q.shape[-1]),  # NumPy
        ],
        'wrong': lambda: [
            lambda q, k: q @ k.transpose(-2, -1),  # forgot the scale
            lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1],  # divided by d_k, not sqrt(d_k)
            lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]),  # (L_k, L_q): transposed
            lambda q, k: q @ k.transpose(0, 1) / math.sqrt(q.shape[-1]),  # right for 2-D only
            lambda q, k: q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1]),  # multiplied by the scale
            lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2]),  # sqrt(L_k), not sqrt(d_k)
        ],
    },
    'attention.scaled_dot_product': {
        'solution': lambda: scaled_dot_product_attention,
        'alternatives': lambda: [_einsum_stable_attention, _numpy_attention],
        'wrong': lambda: [_wrong_axis_attention, _unscaled_attention, _naive_exp_attention,
                          lambda q, k, v: _unscaled_attention(q, k, v)[::-1],
                          _scaled_by_d_k_attention, _scores_times_values,
                          lambda q, k, v: scaled_dot_product_attention(q, k, v)[::-1]],  # (weights, output)
    },
    'attention.entropy': {
        'solution': lambda: _entropy_reference,
        'alternatives': lambda: [
            lambda w: -(w * torch.log(torch.where(w > 0, w, torch.ones_like(w)))).sum(-1),  # log 1 = 0 at a = 0
            _entropy_by_loops,
        ],
        'wrong': lambda: [
            lambda w: -(w * torch.log(w)).sum(-1),  # NaN where a weight is exactly 0
            lambda w: -torch.special.xlogy(w, w).sum(-1) / math.log(2),  # bits, not nats
            lambda w: torch.special.xlogy(w, w).sum(-1),  # sign
            lambda w: -torch.special.xlogy(w, w).mean(-1),  # mean instead of sum
            lambda w: -torch.special.xlogy(w, w).sum(-1, keepdim=True),  # keeps the summed axis
            lambda w: -(w * torch.log(w + 1e-3)).sum(-1),  # an epsilon large enough to move the result
        ],
    },
    'attention.unscaled_temperature': {
        'solution': lambda: lambda d_k: 1 / math.sqrt(d_k),
        'alternatives': lambda: [lambda d_k: np.float32(d_k) ** -0.5,  # a NumPy scalar
                                 lambda d_k: torch.tensor([float(d_k)]).rsqrt()],  # a one-element tensor
        'wrong': lambda: [lambda d_k: math.sqrt(d_k), lambda d_k: 1 / d_k, lambda d_k: 1.0,
                          lambda d_k: float(d_k),  # T = d_k
                          lambda d_k: 1 / math.sqrt(d_k + 1)],  # off by one
    },
}
