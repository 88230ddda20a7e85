"""Checkers of chapters 1 and 2: the reference solutions pass, typical mistakes fail with a
useful message, and no message gives the expected values away."""
import math

import pytest
import torch

import transformer_lib as tl
from exercise_answers import ch01_attention as answers_ch01, wrong_answers
from transformer_lib.exercises import REGISTRY
from transformer_lib.multihead import split_heads

NAMES = ["attention.scores", "attention.scaled_dot_product", "attention.entropy",
         "attention.unscaled_temperature", "self_cross.cross_attention", "self_cross.project_qkv",
         "self_cross.cross_mask"]


def _sdpa(q, k, v):
    return tl.scaled_dot_product_attention(q, k, v)


def _manual_stable_sdpa(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))  # a correct hand-written softmax
    w = e / e.sum(dim=-1, keepdim=True)
    return w @ v, w


def _cross_attention(x_dec, x_enc, w_q, w_k, w_v):
    return tl.scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v)  # queries decoder, K and V encoder


def _project_qkv(mha, x_q, x_kv):
    H = mha.num_heads
    return split_heads(mha.q_proj(x_q), H), split_heads(mha.k_proj(x_kv), H), split_heads(mha.v_proj(x_kv), H)


def _cross_mask(n_dec, lengths, n_enc):
    return tl.padding_mask(lengths, n_enc).expand(-1, -1, n_dec, -1)


SOLUTIONS = {
    "attention.scores": [lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])],
    "attention.scaled_dot_product": [_sdpa, _manual_stable_sdpa],
    "attention.entropy": [lambda w: -torch.special.xlogy(w, w).sum(-1),
                          lambda w: -(w * torch.log(w.clamp_min(1e-30))).sum(-1)],
    "attention.unscaled_temperature": [lambda d_k: 1 / math.sqrt(d_k), lambda d_k: torch.tensor(d_k) ** -0.5],
    "self_cross.cross_attention": [_cross_attention],
    "self_cross.project_qkv": [_project_qkv],
    "self_cross.cross_mask": [_cross_mask],
}


def test_all_registered():
    assert set(NAMES) <= set(REGISTRY)
    assert {n for n in REGISTRY if n.startswith(("attention.", "self_cross."))} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass(name):
    for answer in SOLUTIONS[name]:
        result = REGISTRY[name].run(answer)
        assert result.passed, result.message


@pytest.mark.parametrize("name", NAMES)
def test_wrong_answers_fail_with_a_message(name):
    wrong = wrong_answers(name)
    assert len(wrong) >= 3
    for answer in wrong:
        result = REGISTRY[name].run(answer)
        assert not result.passed
        assert "Hint:" in result.message or "raised" in result.message  # a crash names its error


def test_a_stub_that_returns_none_is_not_yet():
    result = REGISTRY["attention.scores"].run(lambda q, k: None)
    assert not result.passed and "None" in result.message


def test_a_non_function_is_not_yet():
    for name in NAMES:
        result = REGISTRY[name].run(42)
        assert not result.passed


def test_messages_do_not_reveal_the_temperature():
    result = REGISTRY["attention.unscaled_temperature"].run(lambda d_k: 1.0)
    assert not result.passed
    for d_k in (16, 64, 512):
        assert f"{1 / math.sqrt(d_k):g}" not in result.message


def test_wrong_softmax_axis_is_caught_even_when_square():
    """A square case must not let softmax(dim=-2) slip through: the checker uses L_q != L_k."""
    result = REGISTRY["attention.scaled_dot_product"].run(answers_ch01._wrong_axis_attention)
    assert not result.passed and "weights" in result.message


def test_checkers_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for name in NAMES:
        REGISTRY[name].run(SOLUTIONS[name][0])
    assert torch.equal(torch.rand(3), expected)


def test_entropy_reference_limits():
    L = 7
    uniform = torch.full((2, L), 1 / L)
    one_hot = torch.eye(L)
    assert torch.allclose(answers_ch01._entropy_reference(uniform), torch.full((2,), math.log(L)))
    assert torch.equal(answers_ch01._entropy_reference(one_hot), torch.zeros(L))


def test_executed_notebooks_keep_one_stream_per_run_of_prints():
    """notebooks.strip_volatile merges the kernel's timer-split stdout chunks (chapters 1-2 print
    tables in loops), so a re-execution under load leaves the saved .ipynb unchanged."""
    import nbformat
    from bookkit.notebooks import _coalesce_streams

    outs = [nbformat.v4.new_output("stream", name="stdout", text="a\n"),
            nbformat.v4.new_output("stream", name="stdout", text="b\n"),
            nbformat.v4.new_output("stream", name="stderr", text="warn\n"),
            nbformat.v4.new_output("display_data", data={"text/plain": "x"}),
            nbformat.v4.new_output("stream", name="stdout", text="c\n")]
    merged = _coalesce_streams(outs)
    assert [o.get("name", o["output_type"]) for o in merged] == ["stdout", "stderr", "display_data", "stdout"]
    assert merged[0]["text"] == "a\nb\n"
