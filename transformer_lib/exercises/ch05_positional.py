"""Chapter 5 (positional encoding) exercises: decoding a position, RoPE, RoPE scores from offsets, ALiBi."""
from __future__ import annotations

import torch

from ..positional import alibi_bias, apply_rotary, sinusoidal_encoding
from ._core import NotYet, compare_function, exercise, to_numpy


# -- 1. every position has its own fingerprint -------------------------------------------------


@exercise("positional.decode_position",
          hint="compare each vector with every row of tl.sinusoidal_encoding(max_len, d) and return "
               "the index of the closest row (torch.cdist, then argmin)")
def _check_decode(answer):
    g = torch.Generator().manual_seed(3)
    for max_len, d in [(20, 8), (100, 16), (500, 64)]:
        positions = torch.randint(0, max_len, (12,), generator=g)
        noisy = sinusoidal_encoding(max_len, d)[positions] + 0.02 * torch.randn(12, d, generator=g)
        got = to_numpy(answer(noisy, max_len), "your positions")
        if tuple(got.shape) != (12,):
            raise NotYet(f"12 vectors in should give 12 positions out, got shape {tuple(got.shape)}")
        wrong = int((got != positions.numpy()).sum())
        if wrong:
            raise NotYet(f"{wrong} of 12 positions decoded wrongly for max_len={max_len}, d_model={d}")
    return "every noisy vector was traced back to its position."


# -- 2. RoPE ----------------------------------------------------------------------------------


@exercise("positional.rope",
          hint="pair (x[2i], x[2i+1]) rotates by angle pos * 10000^(-2i/d): "
               "(a, b) -> (a cos - b sin, a sin + b cos)")
def _check_rope(answer):
    g = torch.Generator().manual_seed(5)
    inputs = [(torch.randn(3, 2, generator=g), torch.arange(3)),
              (torch.randn(2, 5, 8, generator=g), torch.arange(5)),
              (torch.randn(2, 4, 6, 16, generator=g), torch.arange(10, 16))]
    return compare_function(answer, apply_rotary, inputs, what="rotated tensor", atol=1e-4,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)}")


# -- 3. ALiBi ---------------------------------------------------------------------------------

@exercise("positional.alibi_bias",
          hint="bias[0, h, i, j] = -slope_h * |i - j|, with slope_h from tl.alibi_slopes(num_heads)")
def _check_alibi(answer):
    inputs = [(1, 3), (4, 6), (8, 10), (12, 5)]
    return compare_function(answer, alibi_bias, inputs, what="bias", atol=1e-5,
                            describe=lambda a: f"num_heads={a[0]}, L={a[1]}")


# -- 4. a RoPE score from the offset alone -----------------------------------------------------

@exercise("positional.rope_score",
          hint="<R(m) q, R(m + offset) k> = <q, R(offset) k>: rotate only the key, by the offset")
def _check_rope_score(answer):
    g = torch.Generator().manual_seed(11)
    inputs = [(torch.randn(d, generator=g), torch.randn(d, generator=g), o)
              for d, o in [(2, 1), (8, 3), (16, -5), (32, 40)]]
    m = torch.tensor([7])  # the property: the score of q rotated to position 7 and k to position 7 + offset

    def absolute_score(q, k, offset):
        return (apply_rotary(q[None], m)[0] * apply_rotary(k[None], m + offset)[0]).sum()  # (d,) * (d,) -> ()
    return compare_function(answer, absolute_score, inputs, what="score", atol=1e-4,
                            describe=lambda a: f"d={a[0].shape[0]}, offset={a[2]}")
