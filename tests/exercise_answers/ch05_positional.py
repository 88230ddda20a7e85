"""Answers for the checkers of transformer_lib/exercises/ch05_positional.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import math

import numpy as np
import torch

from transformer_lib.positional import alibi_bias, alibi_slopes, apply_rotary, sinusoidal_encoding


def _alibi_reference(num_heads, L):
    return alibi_bias(num_heads, L)  # (1, H, L, L)


def _score_reference(q, k, offset):
    m = 7  # any query position gives the same score: that is the point of the exercise
    q_rot = apply_rotary(q[None], torch.tensor([m]))[0]  # (d,)
    k_rot = apply_rotary(k[None], torch.tensor([m + offset]))[0]  # (d,)
    return (q_rot * k_rot).sum()


def _decode_reference(vectors, max_len):
    table = sinusoidal_encoding(max_len, vectors.shape[-1])  # (max_len, d)
    dist = torch.cdist(vectors.float(), table)  # (N, max_len)
    return dist.argmin(dim=-1)


def _decode_first_pair_only(vectors, max_len):  # the fastest pair alone repeats every 2*pi positions
    table = sinusoidal_encoding(max_len, vectors.shape[-1])[:, :2]
    return torch.cdist(vectors.float()[:, :2], table).argmin(dim=-1)


def _decode_off_by_one(vectors, max_len):
    return _decode_reference(vectors, max_len) + 1


def _decode_farthest(vectors, max_len):  # argmax of the distance: the farthest row
    table = sinusoidal_encoding(max_len, vectors.shape[-1])
    return torch.cdist(vectors.float(), table).argmax(dim=-1)


def _decode_wrong_axis(vectors, max_len):  # argmin over the vectors instead of over the table
    table = sinusoidal_encoding(max_len, vectors.shape[-1])
    return torch.cdist(vectors.float(), table).argmin(dim=0)


def _decode_by_dot_product(vectors, max_len):
    """A right answer: every row of the table has the same norm, so the largest dot product is the nearest row."""
    table = sinusoidal_encoding(max_len, vectors.shape[-1])  # (max_len, d)
    return (vectors @ table.T).argmax(dim=-1)  # (N,)


def _decode_numpy_loop(vectors, max_len):
    """A right answer with NumPy and a loop over the vectors, returned as a list of ints."""
    table = sinusoidal_encoding(max_len, vectors.shape[-1]).numpy()  # (max_len, d)
    return [int(np.argmin(((table - v) ** 2).sum(axis=1))) for v in vectors.numpy()]


def _rope_halves(x, positions):  # the "rotate half" layout of some codebases: a different pairing
    d = x.shape[-1]
    inv_freq = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = positions.float()[:, None] * inv_freq  # (L, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], dim=-1)


def _rope_wrong_direction(x, positions):
    return apply_rotary(x, -positions)


def _rope_frequency_without_2(x, positions):  # theta_i = 10000^(-i/d): the pairs turn too slowly
    d = x.shape[-1]
    inv_freq = 10000 ** (-torch.arange(d // 2, dtype=torch.float32) / d)  # (d/2,)
    ang = positions.float()[:, None] * inv_freq  # (L, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)
    return out.flatten(-2)


def _rope_complex(x, positions):
    """A right answer: each pair (a, b) is the complex number a + ib, rotated by multiplying with e^(i angle)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    rot = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64),
                      positions.double()[:, None] * theta)  # (L, d/2) complex
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())  # (..., L, d/2)
    return torch.view_as_real(z * rot).flatten(-2)  # (..., L, d)


def _rope_loops(x, positions):
    """A right answer with a loop over the pairs, each turned by a 2 x 2 rotation matrix."""
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        angle = positions.double() * 10000.0 ** (-2 * i / d)  # (L,)
        c, s = angle.cos().float(), angle.sin().float()
        a, b = x[..., 2 * i], x[..., 2 * i + 1]  # (..., L)
        out[..., 2 * i], out[..., 2 * i + 1] = a * c - b * s, a * s + b * c
    return out


def _alibi_positive(num_heads, L):
    return -alibi_bias(num_heads, L)


def _alibi_one_slope(num_heads, L):
    d = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs().float()
    return (-0.5 * d).expand(1, num_heads, L, L)


def _alibi_signed(num_heads, L):
    d = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).float()  # i - j, not |i - j|
    return -(alibi_slopes(num_heads)[:, None, None] * d).unsqueeze(0)


def _alibi_loops(num_heads, L):
    """A right answer with Python loops over heads, queries and keys, returned as nested lists."""
    slopes = alibi_slopes(num_heads).tolist()
    return [[[[-slopes[h] * abs(i - j) for j in range(L)] for i in range(L)] for h in range(num_heads)]]


def _score_rotate_query(q, k, offset):  # rotating q by +offset gives the score at -offset
    return (apply_rotary(q[None], torch.tensor([offset]))[0] * k).sum()


ANSWERS = {
    'positional.decode_position': {
        'solution': lambda: _decode_reference,
        'alternatives': lambda: [_decode_by_dot_product, _decode_numpy_loop],
        'wrong': lambda: [_decode_first_pair_only, _decode_off_by_one,
                          lambda v, m: torch.zeros(v.shape[0], dtype=torch.long),
                          _decode_farthest, _decode_wrong_axis],
    },
    'positional.rope': {
        'solution': lambda: apply_rotary,
        'alternatives': lambda: [_rope_complex, _rope_loops],
        'wrong': lambda: [_rope_halves, _rope_wrong_direction, lambda x, p: x.clone(),
                          _rope_frequency_without_2, lambda x, p: apply_rotary(x, p + 1)],  # positions off by one
    },
    'positional.alibi_bias': {
        'solution': lambda: _alibi_reference,
        'alternatives': lambda: [
            _alibi_loops,
            lambda H, L: -(alibi_slopes(H).numpy()[None, :, None, None]
                           * np.abs(np.arange(L)[:, None] - np.arange(L)[None, :])),  # NumPy
        ],
        'wrong': lambda: [_alibi_positive, _alibi_one_slope, _alibi_signed,
                          lambda H, L: alibi_bias(H, L).flip(1),  # slopes in reverse order
                          lambda H, L: alibi_bias(H, L)[0]],  # (H, L, L): no leading batch axis
    },
    'positional.rope_score': {
        'solution': lambda: _score_reference,
        'alternatives': lambda: [
            lambda q, k, o: float(apply_rotary(q[None], torch.tensor([-o]))[0] @ k),  # <R(-o) q, k>, a float
            lambda q, k, o: torch.dot(q, apply_rotary(k[None], torch.tensor([o]))[0]),  # <q, R(o) k>
        ],
        'wrong': lambda: [_score_rotate_query, lambda q, k, o: (q * k).sum(),
                          lambda q, k, o: _score_reference(q, k, -o),
                          lambda q, k, o: _score_reference(q, k, o + 1),  # offset off by one
                          lambda q, k, o: _score_reference(q, k, o) / math.sqrt(q.shape[-1])],  # scaled
    },
}
