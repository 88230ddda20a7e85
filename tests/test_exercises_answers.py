"""Every registered checker, generically: its reference solution and every alternative right answer
(einsum, loops, NumPy, other input or output types) pass, every registered wrong answer fails, and
no check changes the reader's random state (torch, NumPy, ``random``), whatever the answer does.

New exercises are covered as soon as they register: ``@exercise(..., solution=...,
alternative_answers=..., wrong_answers=...)``.
"""
import random

import numpy as np
import pytest
import torch

from transformer_lib.exercises import REGISTRY, ch02_self_cross, check, preserved_rng, to_int, to_number, to_numpy
from transformer_lib.exercises._core import NotYet

NAMES = sorted(REGISTRY)
MIN_WRONG = 4  # each exercise had 2-5 wrong answers; issue 18 asked for at least two more each


def _scramble_global_rngs():
    """Put every global generator in a state no checker would choose, and draw from it once."""
    torch.manual_seed(987_654)
    np.random.seed(4321)
    random.seed(77)
    torch.rand(3), np.random.rand(2), random.random()


def _snapshot():
    return torch.get_rng_state().clone(), np.random.get_state(), random.getstate()


def _same_state(a, b) -> bool:
    (t1, n1, p1), (t2, n2, p2) = a, b
    numpy_same = n1[0] == n2[0] and np.array_equal(n1[1], n2[1]) and tuple(n1[2:]) == tuple(n2[2:])
    return torch.equal(t1, t2) and numpy_same and p1 == p2


def _run_keeping_rng(name, answer):
    """Run the checker on ``answer``; fail the test if any global random state moved."""
    _scramble_global_rngs()
    before = _snapshot()
    result = REGISTRY[name].run(answer)
    assert _same_state(before, _snapshot()), f"{name}: the check changed the global random state"
    return result


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_passes_and_keeps_the_rng(name):
    ex = REGISTRY[name]
    assert ex.solution is not None, f"{name} registers no solution"
    result = _run_keeping_rng(name, ex.solution())
    assert result.passed, f"{name}: the reference solution fails: {result.message}"


@pytest.mark.parametrize("name", NAMES)
def test_alternative_right_answers_pass(name):
    alternatives = list(REGISTRY[name].alternative_answers())
    assert alternatives, f"{name} registers no alternative right answer"
    for k, answer in enumerate(alternatives):
        result = _run_keeping_rng(name, answer)
        assert result.passed, f"{name}: alternative right answer #{k} fails: {result.message}"


@pytest.mark.parametrize("name", NAMES)
def test_every_wrong_answer_fails_and_keeps_the_rng(name):
    wrong = list(REGISTRY[name].wrong_answers())
    assert len(wrong) >= MIN_WRONG, f"{name} registers {len(wrong)} wrong answers, expected >= {MIN_WRONG}"
    for k, answer in enumerate(wrong):
        result = _run_keeping_rng(name, answer)
        assert not result.passed, f"{name}: wrong answer #{k} passes"


def test_an_answer_that_draws_random_numbers_leaves_no_trace():
    """A reader's function may call torch.randn or np.random itself: the check still restores."""
    def noisy(x):
        torch.randn(5), np.random.rand(3), random.random()
        torch.manual_seed(0)
        np.random.seed(0)
        return x.pow(2).mean(dim=-1, keepdim=True)
    assert _run_keeping_rng("intro.mean_of_squares", noisy).passed


def test_a_checker_sees_the_same_random_numbers_whatever_the_reader_did():
    draws = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        with preserved_rng():
            draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1])


# -- the three holes issue 18 found --------------------------------------------------------------

def test_cross_attention_scaled_by_sqrt_d_model_fails():
    """With d_k != d_model, dividing by sqrt(x_dec.shape[-1]) is no longer the right scale."""
    def by_d_model(x_dec, x_enc, w_q, w_k, w_v):
        q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
        w = torch.softmax(q @ k.transpose(-2, -1) / x_dec.shape[-1] ** 0.5, dim=-1)
        return w @ v, w
    cases = ch02_self_cross._cross_inputs()
    assert any(c[2].shape[0] != c[2].shape[1] for c in cases), "no case with d_k != d_model"
    result = check("self_cross.cross_attention", by_d_model, quiet=True)
    assert not result.passed and "weights" in result.message


def test_cross_mask_accepts_chapter_4_style_tensor_code():
    def tensor_style(n_dec, lengths, n_enc):
        return (torch.arange(n_enc)[None, :] < lengths[:, None])[:, None, None, :].expand(-1, 1, n_dec, -1)
    assert check("self_cross.cross_mask", tensor_style, quiet=True).passed


def test_sequential_steps_accepts_a_numpy_integer():
    from transformer_lib.cost import sequential_steps
    assert check("rnn.sequential_steps", lambda m, n, L: np.int64(sequential_steps(m, n, L)), quiet=True).passed
    assert check("rnn.sequential_steps", lambda m, n, L: float(sequential_steps(m, n, L)), quiet=True).passed
    assert not check("rnn.sequential_steps", lambda m, n, L: sequential_steps(m, n, L) + 0.5, quiet=True).passed


# -- the conversion helpers --------------------------------------------------------------------------

@pytest.mark.parametrize("value", [3, 3.0, np.int64(3), np.float32(3), torch.tensor(3), torch.tensor([3.0]),
                                   np.array([[3]])])
def test_to_int_and_to_number_accept_every_natural_type(value):
    assert to_int(value) == 3 and to_number(value) == 3.0


@pytest.mark.parametrize("value", ["3", None, [1, 2], torch.ones(2), object(), 2.5])
def test_to_int_rejects_what_is_not_one_whole_number(value):
    with pytest.raises(NotYet):
        to_int(value)


def test_to_numpy_accepts_nested_lists_tensors_and_half_precision():
    assert to_numpy([[1, 2], (3, 4)]).shape == (2, 2)
    assert to_numpy([torch.ones(3), np.zeros(3)]).shape == (2, 3)
    assert to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32
    assert to_numpy(np.bool_(True)).dtype == bool
    for bad in ([torch.ones(2), torch.ones(3)], "abc", {1: 2}, None):
        with pytest.raises(NotYet):
            to_numpy(bad)
