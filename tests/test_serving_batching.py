"""Batched decoding of prompts of different lengths (transformer_lib.serving.batching, .ragged):
each row equals its own one-at-a-time generation (sampling.generate_ids, the library's single-row
loop with the plain KVCache), for the reader's GPT (learned positions), the other tables, a
grouped-query RoPE model in both pair layouts, int8 and int4 models (whose one-at-a-time steps
take the fused kernel) and SmolLM2 itself.

Tolerance. Greedy ids must be equal. Logits are compared with each new token's logits from one
full pass over prompt + new tokens (no cache): the same arithmetic in another order (a (B, L)
batch of padded rows through GEMMs and a masked SDPA against one row through GEMVs), so the
difference is float32 rounding, amplified through the blocks: about 1e-6 of the logits' range per
block for these depths; the bound is 1e-5 of the range for the small models and 3e-4 absolute for
SmolLM2 (its logits span about 30, 30 blocks; the bound tests/test_smollm2.py argues for its own
cached-versus-full comparison). A bug (a wrong position, a pad attended to) moves logits by O(1).
"""
from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.model import LLAMA_SWITCHES
from transformer_lib.positional import LearnedPositionalEmbedding, RotaryEmbedding, apply_rotary
from transformer_lib.quantization import quantize
from transformer_lib.sampling import generate_ids
from transformer_lib.serving import PaddedKVCache, PagedKVCache, generate_batch, pad_prompts

V = 61


def _prompts(lengths, vocab=V, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def _full_logits(model, prompt, new):
    """Each new token's logits from one uncached pass over prompt + new: (n, V)."""
    ids = torch.tensor([prompt + new])
    with torch.no_grad():
        return model(ids)[0, len(prompt) - 1:len(prompt) + len(new) - 1].float()


def _assert_rows_equal_one_at_a_time(model, prompts, n, cache, rel=1e-5, atol=None):
    new, logits = generate_batch(model, prompts, n, cache=cache, block_size=4, return_logits=True)
    assert new == [generate_ids(model, p, n) for p in prompts]
    for p, ids, got in zip(prompts, new, logits):
        want = _full_logits(model, p, ids)
        bound = atol if atol is not None else rel * float(want.max() - want.min())
        torch.testing.assert_close(got, want, atol=bound, rtol=0)


MODELS = {
    "gpt-learned": dict(positional="learned"),
    "sinusoidal": dict(positional="sinusoidal"),
    "no-positions": dict(positional="none"),
    "gqa-rope-interleaved": dict(positional="rope", num_kv_heads=2),
    "gqa-rope-halves-llama": dict(num_kv_heads=2, **LLAMA_SWITCHES),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cache", ["padded", "paged"])
def test_batched_rows_equal_one_at_a_time(name, cache):
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(V, 32, 4, 2, max_len=64, **MODELS[name]).eval()
    _assert_rows_equal_one_at_a_time(model, _prompts((3, 9, 1, 17, 5)), 10, cache)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_batches_equal_the_fused_one_at_a_time_step(bits):
    torch.manual_seed(0)
    model = quantize(tl.DecoderOnlyLM(97, 64, 4, 2, num_kv_heads=2, d_ff=128, max_len=64, **LLAMA_SWITCHES).eval(),
                     bits)
    assert model.decode_step.plan(model) is not None  # one-at-a-time takes the compiled step
    prompts = _prompts((4, 11, 2), vocab=97)
    for cache in ("padded", "paged"):
        _assert_rows_equal_one_at_a_time(model, prompts, 8, cache)


def test_the_fused_step_refuses_a_ragged_cache():
    torch.manual_seed(0)
    model = quantize(tl.DecoderOnlyLM(97, 64, 2, 2, d_ff=128, max_len=64, **LLAMA_SWITCHES).eval(), 4)
    cache = PaddedKVCache(2, 1)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), cache=cache)
        assert model.decode_step(model, torch.tensor([[4]]), cache) is None


@pytest.fixture(scope="module")
def smollm2():
    from _smollm2 import smollm2 as loaded_once  # a copy of the process's one load (tests/_smollm2.py)
    return loaded_once(tl.get_device())


def test_smollm2_batched_equals_one_at_a_time(smollm2):
    tok = smollm2.tokenizer
    prompts = [tok.encode(t).ids for t in ("The capital of France is", "def fibonacci(n):",
                                            "Once upon a time, in a small village by the sea, there lived")]
    assert len({len(p) for p in prompts}) == 3
    _assert_rows_equal_one_at_a_time(smollm2.model, prompts, 8, "paged", atol=3e-4)


def test_smollm2_int4_batched_equals_one_at_a_time(smollm2):
    model = quantize(copy.deepcopy(smollm2.model), 4)
    prompts = [smollm2.tokenizer.encode(t).ids for t in ("The capital of France is", "Water boils at")]
    new = generate_batch(model, prompts, 6, cache="padded")
    assert new == [generate_ids(model, p, 6) for p in prompts]


def test_rotary_per_row_offsets_rotate_each_row_by_its_positions():
    rope = RotaryEmbedding(8, style="halves")
    x = torch.randn(3, 2, 4, 8)  # (B, H, L, d)
    offsets = torch.tensor([0, 5, 2])
    got = rope(x, offset=offsets)
    for i, o in enumerate(offsets.tolist()):  # the readable rotation at explicit positions
        want = apply_rotary(x[i], torch.arange(o, o + 4), style="halves")
        torch.testing.assert_close(got[i], want)


def test_learned_table_per_row_offsets_and_its_limit():
    table = LearnedPositionalEmbedding(6, 4)
    x = torch.zeros(2, 3, 4)
    out = table(x, offset=torch.tensor([0, 2]))
    torch.testing.assert_close(out[1], table.embedding.weight[2:5])
    with pytest.raises(ValueError, match="max_len=6"):
        table(x, offset=torch.tensor([0, 4]))  # positions 4, 5, 6: no row 6


def test_padded_cache_bookkeeping_and_memory():
    cache = PaddedKVCache(2, 3, initial_capacity=8)
    k = torch.randn(3, 1, 5, 4)
    for layer in range(2):
        cache.update(layer, k, -k)
    cache.set_lengths([2, 5, 1])  # forget the pads
    assert cache.row_lengths().tolist() == [2, 5, 1] and cache.length == 5
    assert cache.offset().tolist() == [2, 5, 1]
    mask = cache.mask(1)[:, 0, 0]  # (B, W + 1)
    assert mask.tolist() == [[True] * 3 + [False] * 3, [True] * 6, [True] * 2 + [False] * 4]
    per_slot = 2 * 2 * 4 * 4  # layers x (K, V) x d x bytes, one head
    assert cache.nbytes() == 8 * per_slot and cache.reserved_bytes() == 3 * 8 * per_slot  # 3 rows x capacity 8


BAD = [
    ("offset", lambda: RotaryEmbedding(8)(torch.randn(2, 1, 3, 8), offset=torch.tensor([1.0, 2.0])), "offset"),
    ("offset rows", lambda: RotaryEmbedding(8)(torch.randn(2, 1, 3, 8), offset=torch.tensor([1, 2, 3])), "per row"),
    ("negative offset", lambda: LearnedPositionalEmbedding(8, 4)(torch.zeros(1, 2, 4), torch.tensor([-1])), "0 or"),
    ("prompts", lambda: pad_prompts([]), "prompts"),
    ("prompt ids", lambda: pad_prompts([[1, 2], [3, "a"]]), r"prompts\[1\]"),
    ("empty prompt", lambda: pad_prompts([[1], []]), r"prompts\[1\]"),
    ("set_lengths longer", lambda: PaddedKVCache(1, 2).set_lengths([1, 0]), "cut shorter"),
    ("set_lengths rows", lambda: PaddedKVCache(1, 2).set_lengths([0]), "one per row"),
    ("batch", lambda: PaddedKVCache(1, 0), "batch"),
]


@pytest.mark.parametrize("name,call,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_value_error(name, call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_generate_batch_refuses_alibi_bad_cache_and_out_of_vocabulary_ids():
    alibi = tl.DecoderOnlyLM(V, 16, 2, 1, positional="alibi").eval()
    with pytest.raises(ValueError, match="alibi"):
        generate_batch(alibi, [[1, 2], [3]], 2)
    model = tl.DecoderOnlyLM(V, 16, 2, 1).eval()
    with pytest.raises(ValueError, match="cache"):
        generate_batch(model, [[1, 2]], 2, cache="contiguous")
    with pytest.raises(ValueError, match=r"prompts\[0\]"):
        generate_batch(model, [[1, V]], 2)
    with pytest.raises(ValueError, match="one per row|holds 2 rows"):
        PaddedKVCache(1, 2).update(0, torch.randn(3, 1, 1, 4), torch.randn(3, 1, 1, 4))


@settings(deadline=None, max_examples=25)  # a model call per example: a loaded machine exceeds any deadline
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5), block=st.integers(1, 6))
def test_paged_equals_padded_for_any_lengths_and_block_size(lengths, block):
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(V, 16, 2, 2, positional="rope", num_kv_heads=1, max_len=64).eval()
    prompts = _prompts(lengths)
    padded, a = generate_batch(model, prompts, 4, cache="padded", return_logits=True)
    paged, b = generate_batch(model, prompts, 4, cache="paged", block_size=block, return_logits=True)
    assert padded == paged
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
