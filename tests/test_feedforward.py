"""The position-wise feed-forward network (ReLU, GELU, SwiGLU): definition, position-wise, bad input."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import transformer_lib as tl

ATOL = 1e-5
SETTINGS = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
def test_feedforward_definition(activation):
    ffn = tl.FeedForward(8, expansion=4, activation=activation)
    x = torch.randn(2, 5, 8)
    h = ffn.linear1(x)
    act = {"relu": F.relu(h), "gelu": F.gelu(h), "swiglu": F.silu(h) * (ffn.linear3(x) if ffn.linear3 else h)}[activation]
    assert ffn.d_ff == 32
    assert torch.allclose(ffn(x), ffn.linear2(act), atol=ATOL)


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 8), seed=st.integers(0, 1000))
def test_feedforward_is_position_wise(L, seed):
    torch.manual_seed(seed)
    ffn = tl.FeedForward(8, 16)
    x, perm = torch.randn(1, L, 8), torch.randperm(L)
    assert torch.allclose(ffn(x[:, perm]), ffn(x)[:, perm], atol=ATOL)


@pytest.mark.parametrize("call, message", [
    (lambda: tl.FeedForward(8, activation="tanh"), "activation"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_activations_are_the_wide_layer_the_output_reads():
    ffn = tl.FeedForward(8, 32, activation="relu")
    x = torch.randn(3, 8)
    h = ffn.activations(x)  # (3, 32): what chapter 6 plots
    assert h.shape == (3, 32) and (h >= 0).all()
    assert torch.allclose(ffn(x), ffn.linear2(h), atol=ATOL)


# -- position-wise, shown on permuted and single positions (chapter 6) -----------------------------

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
