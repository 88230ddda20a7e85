"""Properties chapters 5 and 6 rely on, and their exercise checkers.

The library's own positional / feed-forward tests live elsewhere; these pin down the facts the
chapters print (shift matrices, offset-only RoPE scores, the FFN's permutation equivariance) and
prove that each checker accepts a correct answer and rejects the registered wrong ones.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from exercise_answers import wrong_answers
from transformer_lib.exercises import get, list_exercises

SETTINGS = settings(max_examples=25, deadline=None)


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


@SETTINGS
@given(L=st.integers(1, 12), activation=st.sampled_from(["relu", "gelu", "swiglu"]), seed=st.integers(0, 2 ** 16))
def test_feed_forward_is_position_wise(L, activation, seed):
    torch.manual_seed(seed)
    ffn = tl.FeedForward(8, 24, activation=activation).eval()
    x = torch.randn(2, L, 8)
    perm = torch.randperm(L)
    with torch.no_grad():
        out = ffn(x)
        torch.testing.assert_close(ffn(x[:, perm]), out[:, perm], atol=1e-6, rtol=0)
        alone = torch.stack([ffn(x[:, i]) for i in range(L)], dim=1)
    torch.testing.assert_close(alone, out, atol=1e-6, rtol=0)


def test_encoder_layer_ffn_share_is_two_thirds():
    layer = tl.EncoderLayer(512, 8, 2048)
    share = tl.count_parameters(layer.ffn) / tl.count_parameters(layer)
    assert share == pytest.approx(2 / 3, abs=1e-3)


# -- exercise checkers -------------------------------------------------------------------------

def _alibi(num_heads, L):
    distance = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs().float()
    return -(tl.alibi_slopes(num_heads)[:, None, None] * distance)[None]


def _rope(x, positions):
    d = x.shape[-1]
    theta = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = positions.float()[:, None] * theta
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1).flatten(-2)


SOLUTIONS = {
    "positional.decode_position": lambda v, m: torch.cdist(v.float(), tl.sinusoidal_encoding(m, v.shape[-1])).argmin(-1),
    "positional.rope": _rope,
    "positional.rope_score": lambda q, k, o: q @ tl.apply_rotary(k[None], torch.tensor([o]))[0],
    "positional.alibi_bias": _alibi,
    "ffn.gelu": lambda z: z * 0.5 * (1 + torch.erf(z / math.sqrt(2))),
    "ffn.swiglu": lambda x, W1, W3, W2: (F.silu(x @ W1) * (x @ W3)) @ W2,
    "ffn.parameter_share": lambda d, f: (2 * d * f + f + d) / (2 * d * f + f + d + 4 * (d * d + d) + 4 * d),
    "ffn.swiglu_width": lambda d: round(8 * d / 3),
}


def test_every_chapter_exercise_has_a_solution_here():
    assert set(list_exercises("positional.")) | set(list_exercises("ffn.")) == set(SOLUTIONS)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_checker_accepts_a_correct_answer(name):
    result = get(name).run(SOLUTIONS[name])
    assert result.passed, result.message


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_checker_rejects_wrong_answers_and_stubs(name):
    exercise = get(name)
    wrong = wrong_answers(name)
    assert len(wrong) >= 2
    for answer in wrong:
        assert not exercise.run(answer).passed
    assert not exercise.run(...).passed
    assert not exercise.run(lambda *args: None).passed
