"""Positional encodings (sinusoidal, learned, RoPE, ALiBi): the facts chapter 5 prints (shift
matrices, offset-only RoPE scores), the library modules' definitions and their bad input
(non-positive bases, fractional positions). Chapter 6's FFN facts are in test_feedforward.py and
test_layers.py, the chapters' checkers in test_exercises_ch05_ch06.py.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl

SETTINGS = settings(max_examples=25, deadline=None)
ATOL = 1e-5


def pe64(length, d_model):
    angles = torch.arange(length, dtype=torch.float64)[:, None] * 10000 ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (L, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(length, d_model)


def shift_matrix(k, d_model):
    omega = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.block_diag(*[torch.tensor([[math.cos(k * w), math.sin(k * w)],
                                            [-math.sin(k * w), math.cos(k * w)]], dtype=torch.float64)
                              for w in omega.tolist()])


@SETTINGS
@given(k=st.integers(0, 200), half_d=st.integers(1, 32))
def test_sinusoidal_shift_is_a_fixed_rotation(k, half_d):
    d = 2 * half_d
    table = pe64(300, d)
    moved = table[:100] @ shift_matrix(k, d).T
    torch.testing.assert_close(moved, table[k:k + 100], atol=1e-10, rtol=0)
    # and the library's float32 table agrees with the float64 formula
    torch.testing.assert_close(tl.sinusoidal_encoding(300, d).double(), table, atol=1e-4, rtol=0)


@SETTINGS
@given(half_d=st.integers(1, 32), m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(0, 500),
       seed=st.integers(0, 2 ** 16))
def test_rope_score_depends_only_on_offset(half_d, m, n, shift, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2 * half_d, generator=g), torch.randn(2 * half_d, generator=g)

    def score(a, b):
        return float(tl.apply_rotary(q[None], torch.tensor([a]))[0] @ tl.apply_rotary(k[None], torch.tensor([b]))[0])

    # the same float32 error analysis as tests/test_blocks.py: each rotation by p moves the score by
    # about 3 * eps * p * |q||k|, the dot product adds about d * eps * |q||k|
    eps = torch.finfo(torch.float32).eps
    bound = eps * float(q.norm() * k.norm()) * (12 * (max(m, n) + shift) + 2 * 2 * half_d + 8)
    assert abs(score(m, n) - score(m + shift, n + shift)) <= bound


@SETTINGS
@given(num_heads=st.integers(1, 16), L=st.integers(1, 20))
def test_alibi_bias_is_a_linear_distance_penalty(num_heads, L):
    bias = tl.alibi_bias(num_heads, L)  # (1, H, L, L)
    distance = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs().float()
    slopes = tl.alibi_slopes(num_heads)
    assert bias.shape == (1, num_heads, L, L)
    assert torch.all(slopes > 0)
    torch.testing.assert_close(bias[0], -slopes[:, None, None] * distance)


def test_learned_positions_refuse_longer_inputs():
    learned = tl.LearnedPositionalEmbedding(max_len=8, d_model=4)
    assert learned(torch.zeros(1, 8, 4)).shape == (1, 8, 4)
    with pytest.raises(ValueError, match="max_len=8"):
        learned(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match="longer than the learned position table"):
        learned(torch.zeros(1, 4, 4), offset=5)


# -- the library's positional modules -------------------------------------------------------------

def test_sinusoidal_matches_formula():
    pe = tl.sinusoidal_encoding(50, 16)
    pos, i = 7, 3
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    x = torch.zeros(1, 50, 16)
    assert torch.allclose(tl.SinusoidalPositionalEncoding(16, max_len=10)(x)[0], pe, atol=1e-6)  # grows


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(0, 200), seed=st.integers(0, 1000))
def test_rope_scores_depend_only_on_offset(m, n, shift, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    rope = lambda x, p: tl.apply_rotary(x[None], torch.tensor([p]))[0]
    s1 = rope(q, m) @ rope(k, n)
    s2 = rope(q, m + shift) @ rope(k, n + shift)
    # float32 error analysis: an angle p * theta_i is off by about 3 * eps * p (theta_i from pow,
    # the product), which moves a score by |q||k| times that, for each of the four rotations;
    # the 16-term dot products add about d * eps relative. Bound = that sum, with room for pow's ulps.
    eps = torch.finfo(torch.float32).eps
    bound = eps * float(q.norm() * k.norm()) * (12 * (max(m, n) + shift) + 2 * 16 + 8)
    assert abs(s1.item() - s2.item()) <= bound
    assert torch.allclose(rope(q, 0), q) and torch.allclose(rope(q, m).norm(), q.norm(), atol=1e-4)


def test_rotary_module_offset_and_odd_dim():
    x = torch.randn(1, 2, 5, 8)
    r = tl.RotaryEmbedding(8)
    assert torch.allclose(r(x, offset=3)[..., 0, :], r(torch.cat([x[..., :1, :]] * 4, dim=-2))[..., 3, :], atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        tl.RotaryEmbedding(7)


def test_alibi():
    slopes = tl.alibi_slopes(8)
    assert torch.allclose(slopes, torch.tensor([2.0 ** -(k + 1) for k in range(8)]))
    assert len(tl.alibi_slopes(6)) == 6
    b = tl.alibi_bias(8, 5)
    assert b.shape == (1, 8, 5, 5)
    assert torch.allclose(b[0, 0, 4, 1], torch.tensor(-3 * 0.5))


def test_learned_positions_have_a_hard_limit():
    emb = tl.LearnedPositionalEmbedding(8, 4)
    assert emb(torch.zeros(1, 8, 4)).shape == (1, 8, 4)
    with pytest.raises(ValueError, match="max_len=8"):
        emb(torch.zeros(1, 9, 4))
    lm = tl.DecoderOnlyLM(20, 16, 2, 1, max_len=8, positional="learned")
    with pytest.raises(ValueError, match="longer than the learned position table"):
        lm(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("call, message", [
    (lambda: tl.sinusoidal_encoding(4, 7), "even"),
    (lambda: tl.sinusoidal_encoding(4, 8, base=0.0), "base"),
    (lambda: tl.sinusoidal_encoding(4, 8, base=-10.0), "base"),
    (lambda: tl.sinusoidal_encoding(4, 8, base=float("nan")), "base"),
    (lambda: tl.RotaryEmbedding(8, base=0.0), "base"),
    (lambda: tl.RotaryEmbedding(8, base=-1.0), "base"),
    (lambda: tl.apply_rotary(torch.randn(3, 8), torch.arange(3), base=0.0), "base"),
    (lambda: tl.apply_rotary(torch.randn(3, 8), torch.tensor([0.0, 1.5, 2.0])), "integers"),  # not rounded
    (lambda: tl.apply_rotary(torch.randn(3, 8), torch.arange(4)), "positions"),  # issue 40: was torch's RuntimeError
    (lambda: tl.apply_rotary(torch.randn(2, 3, 8), torch.arange(2)), "positions"),
    (lambda: tl.apply_rotary(torch.randn(3, 8), torch.arange(3)[None]), "positions"),
    (lambda: tl.RotaryEmbedding(8)(torch.randn(1, 3, 8), offset=1.5), "offset"),
    (lambda: tl.LearnedPositionalEmbedding(8, 4)(torch.zeros(1, 2, 4), offset=-1), "offset"),
    (lambda: tl.SinusoidalPositionalEncoding(8)(torch.zeros(1, 2, 8), offset=0.5), "offset"),
    (lambda: tl.alibi_slopes(0), "num_heads"),
    (lambda: tl.alibi_bias(4, 5, 3), "L_k"),
])
def test_positional_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=30, deadline=None)
@given(base=st.floats(1.5, 1e6), L=st.integers(1, 40), half=st.integers(1, 16))
def test_every_valid_base_gives_finite_tables(base, L, half):
    d = 2 * half
    assert torch.isfinite(tl.sinusoidal_encoding(L, d, base=base)).all()
    rotated = tl.apply_rotary(torch.randn(L, d), torch.arange(L), base=base)
    assert torch.isfinite(rotated).all()

