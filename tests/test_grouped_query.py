"""Grouped-query attention and rotary styles (chapter 17), on small random modules (the real model
is in test_smollm2.py; the cache in test_kv_cache.py, decoding in test_sampling.py).

Tolerances: float32 attention over <= 24 keys, values O(1): the readable and fused paths sum in
different orders, each output is a convex combination of values, so their difference is a few
ulp of the largest value (~1e-6); 1e-5 leaves room for the projections' matmuls.
"""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib.grouped_query import GroupedQueryAttention, causal_mask_with_offset, repeat_kv
from transformer_lib.kv_cache import KVCache, cache_bytes_per_token
from transformer_lib.multihead import MultiHeadAttention
from transformer_lib.positional import RotaryEmbedding, apply_rotary
from transformer_lib.pretrained.gguf import unpermute_rotary_rows

ATOL = 1e-5


def per_head_loop(gqa: GroupedQueryAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
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
    gqa = GroupedQueryAttention(H * d, H, num_kv, rotary=RotaryEmbedding(d, style="halves") if rotary else None)
    x = torch.randn(2, L, H * d)
    with torch.no_grad():
        expected = per_head_loop(gqa, x, causal)
        fast, none = gqa(x, causal=causal)
        readable, weights = gqa(x, causal=causal, need_weights=True)
    assert none is None and weights.shape == (2, H, L, L)
    torch.testing.assert_close(fast, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(readable, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, L), atol=1e-6, rtol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_gqa_with_as_many_kv_heads_as_heads_is_multihead_attention(bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, bias=bias).eval()
    gqa = GroupedQueryAttention.from_multihead(mha).eval()
    x = torch.randn(3, 7, 32)
    mask = torch.rand(3, 1, 7, 7) > 0.3
    mask[..., 0] = True
    with torch.no_grad():
        for need_weights in (False, True):
            out_m, w_m = mha(x, mask=mask, need_weights=need_weights)
            out_g, w_g = gqa(x, mask=mask, need_weights=need_weights)
            torch.testing.assert_close(out_g, out_m, atol=ATOL, rtol=0)
            if need_weights:
                torch.testing.assert_close(w_g, w_m, atol=1e-6, rtol=0)


def test_repeat_kv_and_causal_offset_mask():
    x = torch.arange(2 * 3 * 4).reshape(1, 2, 3, 4).float()
    r = repeat_kv(x, 3)
    assert r.shape == (1, 6, 3, 4)
    for h in range(6):
        assert torch.equal(r[0, h], x[0, h // 3])
    m = causal_mask_with_offset(2, 5)  # queries at positions 3 and 4
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    with pytest.raises(ValueError):
        causal_mask_with_offset(3, 2)


@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_with_cache_in_chunks_equals_one_causal_pass(need_weights):
    torch.manual_seed(1)
    gqa = GroupedQueryAttention(48, 6, 2, rotary=RotaryEmbedding(8, base=100.0, style="halves"))
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
    lambda: GroupedQueryAttention(48, 6, 4), lambda: GroupedQueryAttention(50, 6, 2),
    lambda: GroupedQueryAttention(48, 6, 0), lambda: GroupedQueryAttention(48, 6, 2)(torch.zeros(1, 3, 47)),
    lambda: GroupedQueryAttention(48, 6, 2)(torch.zeros(1, 3, 48), mask=torch.ones(3, 3)),  # float mask
])
def test_bad_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        bad()


def test_a_bad_mask_is_rejected_before_the_cache_changes():
    """#26: the mask used to be checked after this layer's keys were appended to the cache."""
    gqa = GroupedQueryAttention(16, 4, 2)
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
