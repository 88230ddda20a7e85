"""Chapter 11 checkers, beyond what tests/test_exercises.py and tests/test_exercises_answers.py
check for every exercise (solutions, alternatives, wrong answers, stubs, crashes): messages that
point the way without giving the expected value away, and the answer types the chapter promises."""
import re

from transformer_lib.exercises import check, get, list_exercises
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
    result = check("flash.tile_update", get("flash.tile_update").wrong_answers()[2], quiet=True)
    assert not result.passed and "acc / l" in result.message


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
