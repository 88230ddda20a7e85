"""Parity with torch.nn reference modules (float32, 1e-5): MHA, encoder/decoder layers, Transformer."""
import itertools

import pytest
import torch
import torch.nn as nn

import transformer_lib as tl
from conftest import DEVICES

ATOL = 1e-5


def lengths_and_masks(B, L, device, causal):
    """Random key lengths (>= 1) -> (our bool mask, torch attn_mask, torch key_padding_mask)."""
    lengths = torch.randint(1, L + 1, (B,))
    lengths[0] = L
    ours = tl.padding_mask(lengths, L, device=device)  # (B, 1, 1, L)
    kpm = ~ours[:, 0, 0, :]  # torch: True = pad
    attn = None
    if causal:
        c = tl.causal_mask(L, device=device)
        ours = tl.combine_masks(ours, c)
        attn = tl.to_torch_mha_mask(c)  # torch: True = blocked
    return ours, attn, kpm


def to_bf(x, batch_first):
    return x if batch_first else x.transpose(0, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, bias, causal", list(itertools.product([True, False], [True, False], [True, False])))
def test_multihead_attention_matches_torch(device, batch_first, bias, causal):
    B, L, D, H = 3, 6, 32, 4
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=batch_first).to(device).eval()
    ours = tl.MultiHeadAttention.from_torch(ref).eval()
    x = torch.randn(B, L, D, device=device)
    mask, attn_mask, kpm = lengths_and_masks(B, L, device, causal)
    xt = to_bf(x, batch_first)
    exp_out, exp_w = ref(xt, xt, xt, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=True,
                         average_attn_weights=False)
    out, w = ours(x, mask=mask, need_weights=True)
    assert torch.allclose(out, to_bf(exp_out, batch_first), atol=ATOL)
    assert torch.allclose(w, exp_w, atol=ATOL)  # per-head weights (B, H, L, L)
    fast, none = ours(x, mask=mask)
    assert none is None and torch.allclose(fast, out, atol=ATOL)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_attention_matches_torch(device):
    B, Lq, Lk, D, H = 2, 3, 7, 16, 2
    ref = nn.MultiheadAttention(D, H, batch_first=True).to(device).eval()
    ours = tl.MultiHeadAttention.from_torch(ref)
    q, mem = torch.randn(B, Lq, D, device=device), torch.randn(B, Lk, D, device=device)
    kpm = torch.zeros(B, Lk, dtype=torch.bool, device=device)
    kpm[1, 5:] = True
    exp, exp_w = ref(q, mem, mem, key_padding_mask=kpm, average_attn_weights=False)
    out, w = ours(q, mem, mem, mask=tl.key_padding_to_mask(kpm), need_weights=True)
    assert w.shape == (B, H, Lq, Lk)
    assert torch.allclose(out, exp, atol=ATOL) and torch.allclose(w, exp_w, atol=ATOL)


CONFIGS = list(itertools.product([True, False], [False, True], ["relu", "gelu"]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", CONFIGS)
def test_encoder_layer_matches_torch(device, batch_first, norm_first, activation):
    B, L, D, H, F = 2, 7, 32, 4, 64
    ref = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation=activation, batch_first=batch_first,
                                     norm_first=norm_first).to(device).eval()
    ours = tl.EncoderLayer.from_torch(ref).eval()
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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", CONFIGS)
def test_transformer_matches_torch(device, batch_first, norm_first, activation):
    B, Ls, Lt, D, H, F = 2, 6, 5, 32, 4, 64
    ref = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=F, dropout=0.0,
                         activation=activation, batch_first=batch_first, norm_first=norm_first).to(device).eval()
    ours = tl.Transformer.from_torch(ref).eval()
    src, tgt = torch.randn(B, Ls, D, device=device), torch.randn(B, Lt, D, device=device)
    src_mask = tl.padding_mask([Ls, 4], Ls, device=device)
    src_kpm = ~src_mask[:, 0, 0, :]
    causal = tl.causal_mask(Lt, device=device)
    expected = ref(to_bf(src, batch_first), to_bf(tgt, batch_first), tgt_mask=tl.to_torch_mha_mask(causal),
                   src_key_padding_mask=src_kpm, memory_key_padding_mask=src_kpm)
    out = ours(src, tgt, src_mask=src_mask, tgt_mask=causal, memory_mask=src_mask)
    assert torch.allclose(out, to_bf(expected, batch_first), atol=ATOL)
    assert tl.count_parameters(ours) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_and_rms_norm_match_torch(device):
    x = torch.randn(4, 5, 16, device=device) * 3 + 1
    ref = nn.LayerNorm(16).to(device)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    assert torch.allclose(tl.LayerNorm.from_torch(ref)(x), ref(x), atol=ATOL)
    rms_ref = nn.RMSNorm(16, eps=1e-6).to(device)
    ours = tl.RMSNorm(16, eps=1e-6).to(device)
    assert torch.allclose(ours(x), rms_ref(x), atol=ATOL)


def test_elman_rnn_matches_torch():
    ref = nn.RNN(5, 7, batch_first=True)
    ours = tl.ElmanRNN.from_torch(ref)
    x = torch.randn(3, 9, 5)
    exp_out, exp_h = ref(x)
    out, h = ours(x)
    assert torch.allclose(out, exp_out, atol=ATOL) and torch.allclose(h, exp_h[0], atol=ATOL)
    for kind in ("rnn", "gru"):
        out, _ = tl.torch_rnn(kind, 5, 7)(x)
        assert out.shape == (3, 9, 7)
