"""Chapter 11 checkers, beyond what tests/test_exercises.py and tests/test_exercises_answers.py
check for every exercise (solutions, alternatives, wrong answers, stubs, crashes): messages that
point the way without giving the expected value away, and the answer types the chapter promises."""
import re

from exercise_answers import ch11_flash as answers_ch11
from transformer_lib.exercises import check, list_exercises
from transformer_lib.tiled import count_tiles

NAMES = ["flash.causal_tiles_skipped", "flash.merge", "flash.online_softmax_step", "flash.tile_update"]


def test_the_chapter_registers_these_exercises():
    assert list_exercises("flash.") == NAMES


def test_an_off_by_one_count_is_told_too_high_or_low_without_the_value():
    def off_by_one(n, block_q, block_k):
        computed, total = count_tiles(n, n, block_q, block_k, causal=True)
        return total - computed + 1

    result = check("flash.causal_tiles_skipped", off_by_one, quiet=True)
    assert not result.passed and "too high" in result.message
    assert not re.search(r"\b(2016|2080)\b", result.message)  # 64 x 64 grid: 2080 computed, 2016 skipped


def test_a_tile_update_that_normalizes_early_is_caught_at_the_output():
    result = check("flash.tile_update", answers_ch11._tile_normalizes_early, quiet=True)
    assert not result.passed and "acc / l" in result.message


def test_forms_equal_in_exact_arithmetic_but_not_in_float32_are_rejected():
    """Issue 26: the unshifted exp(s) / exp(m_new) and the shift by the block's own maximum agree
    with the right update on small scores (so only the checker's large scores can tell), and the
    checker rejects both for producing inf or NaN."""
    import torch

    g = torch.Generator().manual_seed(0)
    acc, m, l = torch.randn(3, 2, generator=g), torch.tensor([0.5, 2.0, -1.0]), torch.tensor([1.5, 2.0, 0.7])
    s, v = torch.randn(3, 4, generator=g), torch.randn(4, 2, generator=g)
    right = answers_ch11._reference_tile(acc, m, l, s, v)
    for form in (answers_ch11._tile_unshifted, answers_ch11._tile_block_max_shift):
        for got, want in zip(form(acc, m, l, s, v), right):
            assert torch.allclose(got, want, atol=1e-6)
        result = check("flash.tile_update", form, quiet=True)
        assert not result.passed and "NaN or inf" in result.message, result.message
    step = answers_ch11._step_block_max_shift
    assert torch.allclose(step(m, l, s)[1], answers_ch11.online_softmax_step(m, l, s)[1])
    assert not check("flash.online_softmax_step", step, quiet=True).passed


def test_the_answer_types_the_chapter_promises_are_accepted():
    """The exercises say: pairs as tuple or list, values as tensors, NumPy arrays or lists, counts as ints."""
    import numpy as np

    from transformer_lib.tiled import merge_partial_attention, online_softmax_step

    def step_as_lists(m, l, s):
        new_m, new_l = online_softmax_step(m, l, s)
        return [new_m.tolist(), new_l.numpy()]

    def merge_as_lists(out_a, lse_a, out_b, lse_b):
        out, lse = merge_partial_attention(out_a, lse_a, out_b, lse_b)
        return [out.tolist(), np.asarray(lse)]

    def skipped_as_numpy_int(n, block_q, block_k):
        computed, total = count_tiles(n, n, block_q, block_k, causal=True)
        return np.int64(total - computed)

    for name, answer in [("flash.online_softmax_step", step_as_lists), ("flash.merge", merge_as_lists),
                         ("flash.causal_tiles_skipped", skipped_as_numpy_int)]:
        result = check(name, answer, quiet=True)
        assert result.passed, f"{name}: {result.message}"
