"""Chapters 5 and 6's checkers (transformer_lib/exercises/ch05_positional.py, ch06_feedforward.py)
accept a solution written here and reject every registered wrong answer and a stub."""
import math

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from exercise_answers import wrong_answers
from transformer_lib.exercises import get, list_exercises


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
