"""Chapter 5 (positional encoding) exercises: decoding a position, RoPE, RoPE scores from offsets, ALiBi."""
from __future__ import annotations

import torch

from ..positional import alibi_bias, alibi_slopes, apply_rotary, sinusoidal_encoding
from ._core import NotYet, compare_function, exercise


# -- 1. every position has its own fingerprint -------------------------------------------------

def _decode_reference(vectors, max_len):
    table = sinusoidal_encoding(max_len, vectors.shape[-1])  # (max_len, d)
    dist = torch.cdist(vectors.float(), table)  # (N, max_len)
    return dist.argmin(dim=-1)


def _decode_first_pair_only(vectors, max_len):  # the fastest pair alone repeats every 2*pi positions
    table = sinusoidal_encoding(max_len, vectors.shape[-1])[:, :2]
    return torch.cdist(vectors.float()[:, :2], table).argmin(dim=-1)


def _decode_off_by_one(vectors, max_len):
    return _decode_reference(vectors, max_len) + 1


@exercise("positional.decode_position",
          hint="compare each vector with every row of tl.sinusoidal_encoding(max_len, d) and return "
               "the index of the closest row (torch.cdist, then argmin)",
          wrong_answers=lambda: [_decode_first_pair_only, _decode_off_by_one,
                                 lambda v, m: torch.zeros(v.shape[0], dtype=torch.long)])
def _check_decode(answer):
    g = torch.Generator().manual_seed(3)
    for max_len, d in [(20, 8), (100, 16), (500, 64)]:
        positions = torch.randint(0, max_len, (12,), generator=g)
        noisy = sinusoidal_encoding(max_len, d)[positions] + 0.02 * torch.randn(12, d, generator=g)
        got = answer(noisy, max_len)
        if not isinstance(got, torch.Tensor):
            raise NotYet(f"return a tensor of positions, got {type(got).__name__}")
        if tuple(got.shape) != (12,):
            raise NotYet(f"12 vectors in should give 12 positions out, got shape {tuple(got.shape)}")
        wrong = int((got.long() != positions).sum())
        if wrong:
            raise NotYet(f"{wrong} of 12 positions decoded wrongly for max_len={max_len}, d_model={d}")
    return "every noisy vector was traced back to its position."


# -- 2. RoPE ----------------------------------------------------------------------------------

def _rope_halves(x, positions):  # the "rotate half" layout of some codebases: a different pairing
    d = x.shape[-1]
    inv_freq = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = positions.float()[:, None] * inv_freq  # (L, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], dim=-1)


def _rope_wrong_direction(x, positions):
    return apply_rotary(x, -positions)


@exercise("positional.rope",
          hint="pair (x[2i], x[2i+1]) rotates by angle pos * 10000^(-2i/d): "
               "(a, b) -> (a cos - b sin, a sin + b cos)",
          wrong_answers=lambda: [_rope_halves, _rope_wrong_direction, lambda x, p: x.clone()])
def _check_rope(answer):
    g = torch.Generator().manual_seed(5)
    inputs = [(torch.randn(3, 2, generator=g), torch.arange(3)),
              (torch.randn(2, 5, 8, generator=g), torch.arange(5)),
              (torch.randn(2, 4, 6, 16, generator=g), torch.arange(10, 16))]
    return compare_function(answer, apply_rotary, inputs, what="rotated tensor", atol=1e-4,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)}")


# -- 3. ALiBi ---------------------------------------------------------------------------------

def _alibi_reference(num_heads, L):
    return alibi_bias(num_heads, L)  # (1, H, L, L)


def _alibi_positive(num_heads, L):
    return -alibi_bias(num_heads, L)


def _alibi_one_slope(num_heads, L):
    d = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs().float()
    return (-0.5 * d).expand(1, num_heads, L, L)


def _alibi_signed(num_heads, L):
    d = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).float()  # i - j, not |i - j|
    return -(alibi_slopes(num_heads)[:, None, None] * d).unsqueeze(0)


@exercise("positional.alibi_bias",
          hint="bias[0, h, i, j] = -slope_h * |i - j|, with slope_h from tl.alibi_slopes(num_heads)",
          wrong_answers=lambda: [_alibi_positive, _alibi_one_slope, _alibi_signed])
def _check_alibi(answer):
    inputs = [(1, 3), (4, 6), (8, 10), (12, 5)]
    return compare_function(answer, _alibi_reference, inputs, what="bias", atol=1e-5,
                            describe=lambda a: f"num_heads={a[0]}, L={a[1]}")


# -- 4. a RoPE score from the offset alone -----------------------------------------------------

def _score_reference(q, k, offset):
    m = 7  # any query position gives the same score: that is the point of the exercise
    q_rot = apply_rotary(q[None], torch.tensor([m]))[0]  # (d,)
    k_rot = apply_rotary(k[None], torch.tensor([m + offset]))[0]  # (d,)
    return (q_rot * k_rot).sum()


def _score_rotate_query(q, k, offset):  # rotating q by +offset gives the score at -offset
    return (apply_rotary(q[None], torch.tensor([offset]))[0] * k).sum()


@exercise("positional.rope_score",
          hint="<R(m) q, R(m + offset) k> = <q, R(offset) k>: rotate only the key, by the offset",
          wrong_answers=lambda: [_score_rotate_query, lambda q, k, o: (q * k).sum(),
                                 lambda q, k, o: _score_reference(q, k, -o)])
def _check_rope_score(answer):
    g = torch.Generator().manual_seed(11)
    inputs = [(torch.randn(d, generator=g), torch.randn(d, generator=g), o)
              for d, o in [(2, 1), (8, 3), (16, -5), (32, 40)]]
    return compare_function(answer, _score_reference, inputs, what="score", atol=1e-4,
                            describe=lambda a: f"d={a[0].shape[0]}, offset={a[2]}")
