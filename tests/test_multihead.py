"""Multi-head attention's module-level properties and bad input (parity with torch: test_parity.py)."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl

ATOL = 1e-5


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 8), seed=st.integers(0, 1000))
def test_self_attention_without_positions_is_permutation_equivariant(L, seed):
    torch.manual_seed(seed)
    mha, layer = tl.MultiHeadAttention(16, 4), tl.EncoderLayer(16, 4, 32)
    x, perm = torch.randn(2, L, 16), torch.randperm(L)
    assert torch.allclose(mha(x[:, perm])[0], mha(x)[0][:, perm], atol=ATOL)
    assert torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-4)


@pytest.mark.parametrize("call, message", [
    (lambda: tl.MultiHeadAttention(10, 3), "divisible"),
    (lambda: tl.MultiHeadAttention(8, 0), "positive"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), torch.randn(3, 4, 8)), "batch sizes differ"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 6)), r"\(B, L, 8\)"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(3, 3)), "boolean"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(4, 4, dtype=torch.bool)), "broadcast"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
