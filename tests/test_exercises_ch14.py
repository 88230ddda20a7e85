"""Chapter 14's checkers (transformer_lib/exercises/ch14_heads.py) accept the library's own
functions (and a head's weights written here) and reject every registered wrong answer."""
import pytest
import torch

from exercise_answers import wrong_answers
from transformer_lib.exercises import get
from transformer_lib.pretrained import cosine_matrix, mean_pool
from transformer_lib.probes import diagonal_score


@pytest.mark.parametrize("name", ["heads.mean_pool", "heads.cosine_matrix", "heads.previous_token_score",
                                  "heads.head_weights"])
def test_chapter_checkers_pass_the_library_and_reject_wrong_answers(name):
    def head_weights(layer, x, head):
        a = layer.self_attn
        cols = slice(head * a.head_dim, (head + 1) * a.head_dim)
        q, k = a.q_proj(x)[:, cols], a.k_proj(x)[:, cols]  # (L, head_dim) each
        return torch.softmax(q @ k.T / a.head_dim ** 0.5, dim=-1)

    right = {"heads.mean_pool": mean_pool, "heads.cosine_matrix": cosine_matrix,
             "heads.previous_token_score": lambda A: diagonal_score(A, -1),
             "heads.head_weights": head_weights}[name]
    ex = get(name)
    assert ex.run(right).passed, ex.run(right).message
    wrong = wrong_answers(name)
    assert wrong
    for answer in wrong:
        assert not ex.run(answer).passed
