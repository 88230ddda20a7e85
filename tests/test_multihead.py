"""Multi-head attention's module-level properties, bad input and parity with
torch.nn.MultiheadAttention (self and cross attention), and its grouped-query form (chapter 17) with rotary
styles, on small random modules (the real model is in test_smollm2.py; the cache in
test_kv_cache.py, decoding in test_sampling.py).

Tolerances: float32 attention over <= 24 keys, values O(1): the readable and fused paths sum in
different orders, each output is a convex combination of values, so their difference is a few
ulp of the largest value (~1e-6); 1e-5 leaves room for the projections' matmuls.
"""
import itertools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from conftest import DEVICES, lengths_and_masks, to_bf
from transformer_lib.kv_cache import KVCache, cache_bytes_per_token
from transformer_lib.multihead import MultiHeadAttention, repeat_kv
from transformer_lib.positional import RotaryEmbedding, apply_rotary
from transformer_lib.pretrained.gguf import unpermute_rotary_rows

ATOL = 1e-5


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 8), seed=st.integers(0, 1000))
def test_self_attention_without_positions_is_permutation_equivariant(L, seed):
    torch.manual_seed(seed)
    mha, layer = tl.MultiHeadAttention(16, 4), tl.TransformerBlock(16, 4, 32)
    x, perm = torch.randn(2, L, 16), torch.randperm(L)
    assert torch.allclose(mha(x[:, perm])[0], mha(x)[0][:, perm], atol=ATOL)
    assert torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-4)


@pytest.mark.parametrize("call, message", [
    (lambda: tl.MultiHeadAttention(10, 3), "divisible"),
    (lambda: tl.MultiHeadAttention(8, 0), "positive"),
    (lambda: tl.MultiHeadAttention(0, 4), "d_model"),  # issue 40: was accepted by the grouped class
    (lambda: tl.MultiHeadAttention(-8, 4), "d_model"),  # issue 40: was torch's RuntimeError
    (lambda: tl.MultiHeadAttention(0, 4, 2), "d_model"),
    (lambda: tl.MultiHeadAttention(-8, 4, 2), "d_model"),
    (lambda: tl.MultiHeadAttention(8, 4, -2), "num_kv_heads"),
    (lambda: tl.MultiHeadAttention(8, 4, head_dim=0), "head_dim"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), bias=torch.zeros(1, 3, 3, 3)), "bias"),  # 3 heads, not 2
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), bias=torch.zeros(5, 5)), "bias"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), bias=torch.zeros(3, 3, dtype=torch.long)), "bias"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), torch.randn(3, 4, 8)), "batch sizes differ"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 6)), r"\(B, L, 8\)"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(3, 3)), "boolean"),
    (lambda: tl.MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=torch.ones(4, 4, dtype=torch.bool)), "broadcast"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def per_head_loop(gqa: MultiHeadAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """An independent reference: head h attends with key/value head h // g, written as a loop."""
    B, L, _ = x.shape
    d, g = gqa.head_dim, gqa.groups
    q, k, v = gqa.q_proj(x), gqa.k_proj(x), gqa.v_proj(x)
    heads = []
    for h in range(gqa.num_heads):
        qh = q[..., h * d:(h + 1) * d]
        j = h // g
        kh, vh = k[..., j * d:(j + 1) * d], v[..., j * d:(j + 1) * d]
        if gqa.rotary is not None:
            qh, kh = gqa.rotary(qh), gqa.rotary(kh)
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(d)  # (B, L, L)
        if causal:
            scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(scores.softmax(-1) @ vh)
    return gqa.out_proj(torch.cat(heads, dim=-1))


@settings(max_examples=20, deadline=None)
@given(num_kv=st.sampled_from([1, 2, 4]), groups=st.sampled_from([1, 2, 3]), L=st.integers(1, 12),
       causal=st.booleans(), rotary=st.booleans(), seed=st.integers(0, 10_000))
def test_gqa_fast_and_readable_equal_a_per_head_loop(num_kv, groups, L, causal, rotary, seed):
    torch.manual_seed(seed)
    H, d = num_kv * groups, 8
    gqa = MultiHeadAttention(H * d, H, num_kv, rotary=RotaryEmbedding(d, style="halves") if rotary else None)
    x = torch.randn(2, L, H * d)
    with torch.no_grad():
        expected = per_head_loop(gqa, x, causal)
        fast, none = gqa(x, causal=causal)
        readable, weights = gqa(x, causal=causal, need_weights=True)
    assert none is None and weights.shape == (2, H, L, L)
    torch.testing.assert_close(fast, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(readable, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, L), atol=1e-6, rtol=0)


@settings(max_examples=20, deadline=None)
@given(num_kv=st.sampled_from([1, 2, 3]), groups=st.sampled_from([1, 2, 3]), L_q=st.integers(1, 6),
       extra=st.integers(0, 5), masked=st.booleans(), seed=st.integers(0, 10_000))
def test_both_paths_equal_torch_sdpa_with_enable_gqa(num_kv, groups, L_q, extra, masked, seed):
    """Parity with ``F.scaled_dot_product_attention(..., enable_gqa=True)`` on the module's own
    projections, causal (queries aligned to the end of the keys, as after a cache) or masked."""
    torch.manual_seed(seed)
    H, d = num_kv * groups, 4
    mha = MultiHeadAttention(H * d, H, num_kv, bias=True).eval()
    x = torch.randn(2, L_q + extra, H * d)
    L_k = L_q + extra
    cache = KVCache(1)
    mask = torch.rand(2, 1, L_q, L_k) > 0.3 if masked else None
    if mask is not None:
        mask[..., 0] = True
    with torch.no_grad():
        if extra:
            mha(x[:, :extra], causal=True, cache=cache)  # the first keys come from the cache
        fast = mha(x[:, extra:], mask=mask, causal=not masked, cache=cache)[0]
        cache.truncate(extra)
        readable, w = mha(x[:, extra:], mask=mask, causal=not masked, cache=cache, need_weights=True)
        q = mha.q_proj(x[:, extra:]).view(2, L_q, H, d).transpose(1, 2)  # (B, H, L_q, d)
        k = mha.k_proj(x).view(2, L_k, num_kv, d).transpose(1, 2)  # (B, H_kv, L_k, d)
        v = mha.v_proj(x).view(2, L_k, num_kv, d).transpose(1, 2)
        allowed = mask if masked else torch.ones(L_q, L_k, dtype=torch.bool).tril(extra)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)  # (B, H, L_q, d)
        ref = mha.out_proj(ref.transpose(1, 2).reshape(2, L_q, H * d))
    torch.testing.assert_close(fast, ref, atol=ATOL, rtol=0)
    torch.testing.assert_close(readable, ref, atol=ATOL, rtol=0)
    assert w.shape == (2, H, L_q, L_k)


def test_repeat_kv():
    x = torch.arange(2 * 3 * 4).reshape(1, 2, 3, 4).float()
    r = repeat_kv(x, 3)
    assert r.shape == (1, 6, 3, 4)
    for h in range(6):
        assert torch.equal(r[0, h], x[0, h // 3])


@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_with_cache_in_chunks_equals_one_causal_pass(need_weights):
    torch.manual_seed(1)
    gqa = MultiHeadAttention(48, 6, 2, rotary=RotaryEmbedding(8, base=100.0, style="halves"))
    x = torch.randn(2, 11, 48)
    cache = KVCache(num_layers=1, initial_capacity=2)  # forces the buffer to grow twice
    with torch.no_grad():
        full, _ = gqa(x, causal=True, need_weights=need_weights)
        parts = [gqa(x[:, a:b], causal=True, cache=cache, need_weights=need_weights)[0]
                 for a, b in ((0, 4), (4, 5), (5, 6), (6, 11))]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=ATOL, rtol=0)
    assert cache.length == 11
    assert cache.nbytes() == 11 * cache_bytes_per_token(1, 2, 8, 4) * 2  # batch 2


@given(seed=st.integers(0, 1000), L=st.integers(1, 6))
@settings(max_examples=20, deadline=None)
def test_rotary_halves_is_interleaved_up_to_the_gguf_row_permutation(seed, L):
    """llama.cpp permutes W^Q/W^K rows so pairs are neighbours; unpermuting and rotating halves
    gives the same scores as keeping the file's rows and rotating neighbours."""
    torch.manual_seed(seed)
    H, d, D = 2, 8, 12
    w_q_file, w_k_file = torch.randn(H * d, D), torch.randn(H * d, D)
    x = torch.randn(L, D)
    pos = torch.arange(L)

    def scores(w_q, w_k, style):
        q = (x @ w_q.T).view(L, H, d).transpose(0, 1)  # (H, L, d)
        k = (x @ w_k.T).view(L, H, d).transpose(0, 1)
        q, k = apply_rotary(q, pos, 100.0, style), apply_rotary(k, pos, 100.0, style)
        return q @ k.transpose(-1, -2)  # (H, L, L)

    interleaved = scores(w_q_file, w_k_file, "interleaved")
    halves = scores(unpermute_rotary_rows(w_q_file, H), unpermute_rotary_rows(w_k_file, H), "halves")
    torch.testing.assert_close(halves, interleaved, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError):
        apply_rotary(x[None], pos, style="diagonal")
    with pytest.raises(ValueError):
        unpermute_rotary_rows(torch.randn(10, 3), 3)


@pytest.mark.parametrize("bad", [
    lambda: MultiHeadAttention(48, 6, 4), lambda: MultiHeadAttention(50, 6, 2),
    lambda: MultiHeadAttention(48, 6, 0), lambda: MultiHeadAttention(48, 6, 2)(torch.zeros(1, 3, 47)),
    lambda: MultiHeadAttention(48, 6, 2)(torch.zeros(1, 3, 48), mask=torch.ones(3, 3)),  # float mask
])
def test_grouped_bad_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        bad()


def test_a_bad_mask_is_rejected_before_the_cache_changes():
    """#26: the mask used to be checked after this layer's keys were appended to the cache."""
    gqa = MultiHeadAttention(16, 4, 2)
    cache = KVCache(1)
    x = torch.randn(1, 3, 16)
    gqa(x, causal=True, cache=cache)
    with pytest.raises(ValueError, match="broadcast"):
        gqa(x[:, :1], mask=torch.ones(1, 3, dtype=torch.bool), cache=cache)  # needs (.., 1, 4)
    assert cache.length == 3 and cache.lengths == [3]
    with pytest.raises(ValueError, match="layer"):
        gqa(x, cache=cache, layer=1)  # a one-layer cache has no layer 1
    assert cache.lengths == [3]
    with pytest.raises(ValueError, match="floating"):
        gqa(torch.zeros(1, 3, 16, dtype=torch.long))


# -- parity with torch.nn.MultiheadAttention (float32, 1e-5) ---------------------------------------

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
