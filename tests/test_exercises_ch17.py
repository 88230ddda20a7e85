"""Chapter 17's checkers accept the solutions and right alternatives and reject every registered
wrong answer; the solutions are written here independently of the library."""
import math

import pytest
import torch

from transformer_lib.exercises import check, list_exercises


def _top_p(logits, p):
    probs = torch.softmax(logits, -1)
    sorted_probs, order = probs.sort(descending=True)
    keep_sorted = torch.cat([torch.zeros(1), sorted_probs.cumsum(-1)[:-1]]) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _cached_step(q, k_new, v_new, K_cache, V_cache):
    K, V = torch.cat([K_cache, k_new[None]]), torch.cat([V_cache, v_new[None]])  # (L + 1, d)
    return torch.softmax(K @ q / math.sqrt(q.numel()), 0) @ V, K, V


SOLUTIONS = {
    "generation.top_p": _top_p,
    "generation.cached_step": _cached_step,
    "generation.cache_bytes": lambda layers, kv, hd, b, n, batch=1: layers * 2 * kv * hd * b * n * batch,
}


def test_every_chapter_17_exercise_has_a_solution_here():
    assert set(list_exercises("generation.")) == set(SOLUTIONS)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_written_here_passes(name):
    assert check(name, SOLUTIONS[name], quiet=True)
