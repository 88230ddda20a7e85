"""Encoder and decoder layers: causality with a causal mask, the FFN switched off, bad input."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl

ATOL = 1e-5


@settings(max_examples=15, deadline=None)
@given(t=st.integers(0, 8), seed=st.integers(0, 1000))
def test_causal_decoder_output_at_t_ignores_later_inputs(t, seed):
    torch.manual_seed(seed)
    layer = tl.EncoderLayer(16, 4, 32, norm_first=bool(seed % 2)).eval()
    x = torch.randn(1, 9, 16)
    y = x.clone()
    y[:, t + 1:] = torch.randn(1, 8 - t, 16)
    mask = tl.causal_mask(9)
    assert torch.allclose(layer(x, mask)[:, :t + 1], layer(y, mask)[:, :t + 1], atol=ATOL)


@pytest.mark.parametrize("norm_first", [True, False])
def test_ffn_off_leaves_attention_residual_and_norm(norm_first):
    """ffn=False: same initial attention weights as with the FFN, the FFN adds exactly nothing and
    none of its parameters trains."""
    torch.manual_seed(0)
    with_ffn = tl.EncoderLayer(16, 4, 32, norm_first=norm_first).eval()
    torch.manual_seed(0)
    layer = tl.EncoderLayer(16, 4, 32, norm_first=norm_first, ffn=False).eval()
    assert torch.equal(layer.self_attn.q_proj.weight, with_ffn.self_attn.q_proj.weight)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        if norm_first:
            expected = x + layer.self_attn(layer.norm1(x))[0]  # the FFN sub-layer adds 0
        else:
            expected = layer.norm2(layer.norm1(x + layer.self_attn(x)[0]))
        assert torch.equal(layer(x), expected)
    assert not any(p.requires_grad for p in layer.ffn.parameters())
    lm = tl.DecoderOnlyLM(20, d_model=16, num_heads=4, num_layers=2, ffn=False)
    assert all(not p.requires_grad for block in lm.blocks for p in block.ffn.parameters())


@pytest.mark.parametrize("call, message", [
    (lambda: tl.DecoderLayer(8, 2, 16)(torch.randn(2, 3, 8), torch.randn(1, 4, 8)), "batch sizes differ"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
