"""Encoder and decoder layers: causality with a causal mask, the FFN switched off, bad input, parity
with torch.nn.TransformerEncoderLayer and TransformerDecoderLayer (float32, 1e-5)."""

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from conftest import CONFIGS, DEVICES, lengths_and_masks, to_bf

ATOL = 1e-5


@settings(max_examples=15, deadline=None)
@given(t=st.integers(0, 8), seed=st.integers(0, 1000))
def test_causal_decoder_output_at_t_ignores_later_inputs(t, seed):
    torch.manual_seed(seed)
    layer = tl.TransformerBlock(16, 4, 32, norm_first=bool(seed % 2)).eval()
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
    with_ffn = tl.TransformerBlock(16, 4, 32, norm_first=norm_first).eval()
    torch.manual_seed(0)
    layer = tl.TransformerBlock(16, 4, 32, norm_first=norm_first, ffn=False).eval()
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


# -- parity with torch.nn.TransformerEncoderLayer / DecoderLayer (float32, 1e-5) -------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", CONFIGS)
def test_encoder_layer_matches_torch(device, batch_first, norm_first, activation):
    B, L, D, H, F = 2, 7, 32, 4, 64
    ref = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation=activation, batch_first=batch_first,
                                     norm_first=norm_first).to(device).eval()
    ours = tl.TransformerBlock.from_torch(ref).eval()
    x = torch.randn(B, L, D, device=device)
    mask, attn_mask, kpm = lengths_and_masks(B, L, device, causal=True)
    expected = ref(to_bf(x, batch_first), src_mask=attn_mask, src_key_padding_mask=kpm)
    assert torch.allclose(ours(x, mask), to_bf(expected, batch_first), atol=ATOL)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", CONFIGS)
def test_decoder_layer_matches_torch(device, batch_first, norm_first, activation):
    B, Lt, Ls, D, H, F = 2, 5, 6, 32, 4, 64
    ref = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, activation=activation, batch_first=batch_first,
                                     norm_first=norm_first).to(device).eval()
    ours = tl.DecoderLayer.from_torch(ref).eval()
    tgt, mem = torch.randn(B, Lt, D, device=device), torch.randn(B, Ls, D, device=device)
    self_mask, tgt_attn, tgt_kpm = lengths_and_masks(B, Lt, device, causal=True)
    mem_lengths = torch.tensor([Ls, 3])
    mem_mask = tl.padding_mask(mem_lengths, Ls, device=device)
    mem_kpm = ~mem_mask[:, 0, 0, :]
    expected = ref(to_bf(tgt, batch_first), to_bf(mem, batch_first), tgt_mask=tgt_attn,
                   tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm)
    out = ours(tgt, mem, self_mask=self_mask, memory_mask=mem_mask)
    assert torch.allclose(out, to_bf(expected, batch_first), atol=ATOL)


def test_encoder_layer_ffn_share_is_two_thirds():
    layer = tl.TransformerBlock(512, 8, 2048)
    share = tl.count_parameters(layer.ffn) / tl.count_parameters(layer)
    assert share == pytest.approx(2 / 3, abs=1e-3)
