"""Norms, feed-forward, positional encodings, models: definitions, properties, bad input."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import transformer_lib as tl

ATOL = 1e-5


def test_layer_norm_uses_biased_variance_per_token():
    x = torch.randn(2, 3, 8)
    y = tl.LayerNorm(8, elementwise_affine=False)(x)
    assert torch.allclose(y.mean(-1), torch.zeros(2, 3), atol=1e-6)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-4)
    assert torch.allclose(y, F.layer_norm(x, (8,)), atol=ATOL)


def test_layer_norm_is_batch_independent_batchnorm_is_not():
    x = torch.randn(4, 5, 8)
    ln, bn = tl.LayerNorm(8), tl.TokenBatchNorm(8)
    assert torch.allclose(ln(x)[0], ln(x[:1])[0], atol=ATOL)
    assert not torch.allclose(bn(x)[0], bn(x[:1] * 1.0)[0], atol=1e-3)


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


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 8), seed=st.integers(0, 1000))
def test_self_attention_without_positions_is_permutation_equivariant(L, seed):
    torch.manual_seed(seed)
    mha, layer = tl.MultiHeadAttention(16, 4), tl.EncoderLayer(16, 4, 32)
    x, perm = torch.randn(2, L, 16), torch.randperm(L)
    assert torch.allclose(mha(x[:, perm])[0], mha(x)[0][:, perm], atol=ATOL)
    assert torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-4)


def test_sinusoidal_matches_formula():
    pe = tl.sinusoidal_encoding(50, 16)
    pos, i = 7, 3
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    x = torch.zeros(1, 50, 16)
    assert torch.allclose(tl.SinusoidalPositionalEncoding(16, max_len=10)(x)[0], pe, atol=1e-6)  # grows


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(0, 200), seed=st.integers(0, 1000))
def test_rope_scores_depend_only_on_offset(m, n, shift, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)
    rope = lambda x, p: tl.apply_rotary(x[None], torch.tensor([p]))[0]
    s1 = rope(q, m) @ rope(k, n)
    s2 = rope(q, m + shift) @ rope(k, n + shift)
    # float32 error analysis: an angle p * theta_i is off by about 3 * eps * p (theta_i from pow,
    # the product), which moves a score by |q||k| times that, for each of the four rotations;
    # the 16-term dot products add about d * eps relative. Bound = that sum, with room for pow's ulps.
    eps = torch.finfo(torch.float32).eps
    bound = eps * float(q.norm() * k.norm()) * (12 * (max(m, n) + shift) + 2 * 16 + 8)
    assert abs(s1.item() - s2.item()) <= bound
    assert torch.allclose(rope(q, 0), q) and torch.allclose(rope(q, m).norm(), q.norm(), atol=1e-4)


def test_rotary_module_offset_and_odd_dim():
    x = torch.randn(1, 2, 5, 8)
    r = tl.RotaryEmbedding(8)
    assert torch.allclose(r(x, offset=3)[..., 0, :], r(torch.cat([x[..., :1, :]] * 4, dim=-2))[..., 3, :], atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        tl.RotaryEmbedding(7)


def test_alibi():
    slopes = tl.alibi_slopes(8)
    assert torch.allclose(slopes, torch.tensor([2.0 ** -(k + 1) for k in range(8)]))
    assert len(tl.alibi_slopes(6)) == 6
    b = tl.alibi_bias(8, 5)
    assert b.shape == (1, 8, 5, 5)
    assert torch.allclose(b[0, 0, 4, 1], torch.tensor(-3 * 0.5))


def test_learned_positions_have_a_hard_limit():
    emb = tl.LearnedPositionalEmbedding(8, 4)
    assert emb(torch.zeros(1, 8, 4)).shape == (1, 8, 4)
    with pytest.raises(ValueError, match="max_len=8"):
        emb(torch.zeros(1, 9, 4))
    lm = tl.DecoderOnlyLM(20, 16, 2, 1, max_len=8, positional="learned")
    with pytest.raises(ValueError, match="longer than the learned position table"):
        lm(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "none"])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_decoder_only_lm_is_causal(positional, norm):
    torch.manual_seed(0)
    lm = tl.DecoderOnlyLM(30, 16, 2, 2, max_len=16, positional=positional, norm=norm, activation="swiglu").eval()
    x = torch.randint(0, 30, (2, 10))
    y = x.clone()
    y[:, 6:] = torch.randint(0, 30, (2, 4))
    a, b = lm(x), lm(y)
    assert torch.allclose(a[:, :6], b[:, :6], atol=ATOL)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=ATOL)
    assert lm.generate(x[:, :3], 4).shape == (2, 7)


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


def test_seq2seq_parallel_and_incremental_decoding_agree():
    torch.manual_seed(0)
    model = tl.Seq2SeqTransformer(12, 12, d_model=32, num_heads=4, d_ff=64).eval()
    src = torch.randint(3, 12, (2, 6))
    tgt_in = torch.randint(3, 12, (2, 5))
    full = model(src, tgt_in)
    memory = model.encode(src)
    for t in range(1, 6):
        prefix_logits = model.decode(tgt_in[:, :t], memory)
        assert torch.allclose(prefix_logits[:, -1], full[:, t - 1], atol=1e-5)
    out = model.greedy_decode(src, bos_id=1, max_len=4)
    assert out.shape == (2, 4)


@pytest.mark.parametrize("call, message", [
    (lambda: tl.MultiHeadAttention(10, 3), "divisible"),
    (lambda: tl.MultiHeadAttention(8, 0), "positive"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), torch.randn(3, 4, 8)), "batch sizes differ"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 6)), r"\(B, L, 8\)"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(3, 3)), "boolean"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(4, 4, dtype=torch.bool)), "broadcast"),
    (lambda: tl.DecoderLayer(8, 2, 16)(torch.randn(2, 3, 8), torch.randn(1, 4, 8)), "batch sizes differ"),
    (lambda: tl.Transformer(8, 2, 1, 1, 16)(torch.randn(2, 3, 8), torch.randn(3, 3, 8)), "batch sizes differ"),
    (lambda: tl.FeedForward(8, activation="tanh"), "activation"),
    (lambda: tl.LayerNorm(8)(torch.randn(2, 7)), "last dim 8"),
    (lambda: tl.sinusoidal_encoding(4, 7), "even"),
    (lambda: tl.DecoderOnlyLM(10, positional="xyz"), "positional"),
    (lambda: tl.ElmanRNN(3, 4)(torch.randn(2, 5, 2)), "expected"),
    (lambda: tl.torch_rnn("transformer", 3, 4), "kind"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


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


def test_seq2seq_blocks_list_both_stacks_encoder_first():
    model = tl.Seq2SeqTransformer(10, 10, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=3)
    kinds = [type(b).__name__ for b in model.blocks]
    assert kinds == ["EncoderLayer"] * 2 + ["DecoderLayer"] * 3
    assert model.blocks[0] is model.transformer.encoder.blocks[0]
