"""Grouped-query attention, the KV cache, rotary styles and the decoding strategies (chapter 17),
on small random modules (the real model is in test_smollm2.py).

Tolerances: float32 attention over <= 24 keys, values O(1): the readable and fused paths sum in
different orders, each output is a convex combination of values, so their difference is a few
ulp of the largest value (~1e-6); 1e-5 leaves room for the projections' matmuls.
"""
import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib.grouped_query import GroupedQueryAttention, causal_mask_with_offset, repeat_kv
from transformer_lib.kv_cache import KVCache, cache_bytes_per_token
from transformer_lib.multihead import MultiHeadAttention
from transformer_lib.positional import RotaryEmbedding, apply_rotary
from transformer_lib.pretrained.gguf import unpermute_rotary_rows
from transformer_lib.pretrained.llama import LlamaConfig, LlamaDecoder
from transformer_lib.sampling import (apply_repetition_penalty, beam_search, generate_ids, next_token_probs,
                                      sample_next, top_k_filter, top_p_filter)

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


def test_kv_cache_bookkeeping_and_bad_input():
    cache = KVCache(3)
    k = torch.randn(1, 2, 5, 4)
    for layer in range(3):
        got_k, got_v = cache.update(layer, k, -k)
        assert torch.equal(got_k, k) and torch.equal(got_v, -k)
    assert cache.length == 5 and cache.nbytes() == 3 * 2 * 2 * 5 * 4 * 4
    assert cache_bytes_per_token(30, 3, 64, 4) == 30 * 2 * 3 * 64 * 4 == 46080
    cache.truncate(2)  # forget positions 2.. ; the next update overwrites them
    assert cache.length == 2
    got_k, _ = cache.update(0, -k[:, :, :1], k[:, :, :1])
    assert got_k.shape == (1, 2, 3, 4) and torch.equal(got_k[:, :, :2], k[:, :, :2])
    assert torch.equal(got_k[:, :, 2], -k[:, :, 0])
    for bad_length in (-1, 3, 1.5):
        with pytest.raises(ValueError):
            cache.truncate(bad_length)
    with pytest.raises(ValueError):
        cache.update(3, k, k)
    with pytest.raises(ValueError):
        cache.update(0, k, k[..., :2])
    with pytest.raises(ValueError):
        cache.update(0, torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))  # 3 heads into a 2-head cache
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError):
            KVCache(bad)
        with pytest.raises(ValueError):
            cache_bytes_per_token(bad, 3, 64)


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


# -- decoding strategies ------------------------------------------------------------------------

logit_rows = st.lists(st.floats(-8, 8, allow_nan=False), min_size=2, max_size=40).map(torch.tensor)


@settings(max_examples=60, deadline=None)
@given(logits=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_with_mass_at_least_p(logits, p):
    probs = logits.softmax(-1)
    kept = torch.isfinite(top_p_filter(logits, p))
    mass = probs[kept].sum().item()
    assert mass >= p - 1e-6 or kept.all()
    # smallest: dropping the least likely kept token falls below p
    assert kept.sum() == 1 or mass - probs[kept].min().item() < p + 1e-6
    # most likely first: every kept token is at least as likely as every dropped one
    if not kept.all():
        assert probs[kept].min() >= probs[~kept].max()


@settings(max_examples=40, deadline=None)
@given(logits=logit_rows, k=st.integers(1, 50))
def test_top_k_keeps_the_k_largest(logits, k):
    kept = torch.isfinite(top_k_filter(logits, k))
    k_eff = min(k, logits.numel())
    assert kept.sum() >= k_eff  # ties with the k-th are kept
    assert logits[kept].min() >= logits.sort(descending=True).values[k_eff - 1]


@settings(max_examples=40, deadline=None)
@given(logits=logit_rows, penalty=st.floats(1.0, 3.0), seen=st.lists(st.integers(0, 1), max_size=3))
def test_repetition_penalty_lowers_only_seen_tokens(logits, penalty, seen):
    out = apply_repetition_penalty(logits, seen, penalty)
    for i in range(logits.numel()):
        if i in seen:
            assert out[i] <= logits[i]
        else:
            assert out[i] == logits[i]


def test_temperature_sharpens_and_flattens_and_zero_is_greedy():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    ent = lambda pr: -(pr * pr.clamp_min(1e-30).log()).sum().item()  # noqa: E731
    cold, base, hot = (next_token_probs(logits, t) for t in (0.5, 1.0, 2.0))
    assert ent(cold) < ent(base) < ent(hot)
    assert next_token_probs(logits, 0).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert int(sample_next(logits, 0)) == 0


def test_seeded_sampling_is_reproducible_and_follows_the_distribution():
    logits = torch.tensor([1.0, 0.5, 0.0, -3.0])
    g = torch.Generator().manual_seed(0)
    draws = sample_next(logits.expand(20_000, 4), 1.0, generator=g)  # (20000,)
    freq = torch.bincount(draws, minlength=4).float() / 20_000
    # 4 binomial standard errors at n = 20000 is < 0.015
    torch.testing.assert_close(freq, logits.softmax(-1), atol=0.015, rtol=0)
    a = sample_next(logits, 1.0, top_p=0.9, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits, 1.0, top_p=0.9, generator=torch.Generator().manual_seed(3))
    assert int(a) == int(b) and int(a) != 3  # token 3 (p ~ 0.02) is outside the 0.9 nucleus


@pytest.mark.parametrize("bad", [
    lambda: top_p_filter(torch.zeros(4), 0.0), lambda: top_p_filter(torch.zeros(4), 1.5),
    lambda: top_k_filter(torch.zeros(4), 0), lambda: next_token_probs(torch.zeros(4), -1.0),
    lambda: apply_repetition_penalty(torch.zeros(4), [1], 0.0), lambda: top_k_filter(torch.zeros(2, 2, 2), 1),
    lambda: top_p_filter(torch.zeros(4, dtype=torch.long), 0.5),
    lambda: GroupedQueryAttention(48, 6, 4), lambda: GroupedQueryAttention(50, 6, 2),
    lambda: GroupedQueryAttention(48, 6, 0), lambda: GroupedQueryAttention(48, 6, 2)(torch.zeros(1, 3, 47)),
    lambda: GroupedQueryAttention(48, 6, 2)(torch.zeros(1, 3, 48), mask=torch.ones(3, 3)),  # float mask
])
def test_bad_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        bad()


# -- generation on a tiny random decoder ---------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=7, d_model=16, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=24,
                      rope_base=100.0, context_length=32)
    model = LlamaDecoder(cfg).eval()
    with torch.no_grad():
        model.embed.weight.mul_(3.0)  # livelier logits than the default init
    return model


def test_cached_generation_equals_uncached(tiny):
    for kwargs in ({}, {"temperature": 1.0, "top_k": 4, "seed": 5}, {"temperature": 0.7, "top_p": 0.8, "seed": 1},
                   {"repetition_penalty": 1.5}):
        a = generate_ids(tiny, [1, 2, 3], 12, use_cache=True, **kwargs)
        b = generate_ids(tiny, [1, 2, 3], 12, use_cache=False, **kwargs)
        assert a == b and len(a) == 12


def test_beam_search_finds_the_most_likely_continuation(tiny):
    """With as many beams as tokens, 3 steps of beam search are exhaustive: compare with brute force."""
    prompt, V = [4, 1], tiny.cfg.vocab_size
    best, best_score = None, -math.inf
    with torch.no_grad():
        for cont in itertools.product(range(V), repeat=3):
            ids = torch.tensor([prompt + list(cont)])
            logp = tiny(ids).log_softmax(-1)[0]  # (L, V)
            score = sum(logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(cont))
            if score > best_score:
                best, best_score = list(cont), score
    ids, score = beam_search(tiny, prompt, num_beams=V * V, max_new_tokens=3, length_penalty=0.0)
    assert ids == best
    assert score == pytest.approx(best_score, abs=1e-4)
    greedy = generate_ids(tiny, prompt, 3)
    assert beam_search(tiny, prompt, num_beams=1, max_new_tokens=3, length_penalty=0.0)[0] == greedy


def test_decoder_bad_input(tiny):
    with pytest.raises(ValueError):
        tiny(torch.tensor([[1, 7]]))  # id out of range
    with pytest.raises(ValueError):
        tiny(torch.zeros(1, 33, dtype=torch.long))  # past the context length
    with pytest.raises(ValueError):
        tiny(torch.zeros(3, dtype=torch.long))  # not (B, L)
    with pytest.raises(ValueError):
        generate_ids(tiny, [], 3)
    with pytest.raises(ValueError):
        beam_search(tiny, [1], num_beams=0, max_new_tokens=2)
