"""Every checker of chapters 3 and 4 accepts the solution and rejects each registered wrong answer."""
import math

import pytest
import torch

from transformer_lib.exercises import check, list_exercises
from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.multihead import merge_heads, split_heads
from transformer_lib.tasks import shift_right


def _split(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)  # (B, H, L, d_k)


def _merge(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, D)


def _forward(x, w_q, w_k, w_v, w_o, num_heads):
    q, k, v = (_split(x @ w, num_heads) for w in (w_q, w_k, w_v))  # (B, H, L, d_k)
    d_k = q.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)  # (B, H, L, L)
    return _merge(weights @ v) @ w_o  # (B, L, D)


SOLUTIONS = {
    "multihead.split_heads": _split,
    "multihead.merge_heads": _merge,
    "multihead.parameter_count": lambda d, h, bias=True: 4 * (d * d + (d if bias else 0)),
    "multihead.forward": _forward,
    "masking.causal_mask": lambda L: torch.arange(L)[None, :] <= torch.arange(L)[:, None],
    "masking.padding_mask": lambda lengths, L: (torch.arange(L)[None, :] < lengths[:, None])[:, None, None, :],
    "masking.decoder_mask": lambda lengths, L: causal_mask(L) & padding_mask(lengths, L),
    "masking.shift_right": lambda y, bos: torch.cat([torch.full_like(y[:, :1], bos), y[:, :-1]], dim=1),
}


def test_every_exercise_of_these_chapters_has_a_solution_here():
    assert set(list_exercises("multihead.")) | set(list_exercises("masking.")) == set(SOLUTIONS)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name):
    result = check(name, SOLUTIONS[name], quiet=True)
    assert result.passed, result.message


def test_library_solutions_pass_too():
    """The library's own functions are valid answers (the chapters end by comparing with them)."""
    assert check("multihead.split_heads", split_heads, quiet=True).passed
    assert check("multihead.merge_heads", merge_heads, quiet=True).passed
    assert check("masking.shift_right", shift_right, quiet=True).passed
    assert check("masking.padding_mask", lambda lengths, L: padding_mask(lengths, L), quiet=True).passed


def test_messages_never_reveal_the_expected_count():
    result = check("multihead.parameter_count", lambda d, h, bias=True: 0, quiet=True)
    assert "too low" in result.message and "1050624" not in result.message
