"""The key/value cache (chapter 17): its bookkeeping, its bad inputs, and the property every decoder
of the library must have with it: a prompt, then one token at a time, gives the logits of one full
forward pass, for every positional scheme of ``DecoderOnlyLM`` (learned, sinusoidal, RoPE, ALiBi,
none), for SmolLM2's configuration of ``DecoderOnlyLM`` and for the seq2seq decoder side.

Tolerance: float32 logits of O(1-10) from models of width <= 32 and <= 3 blocks; the cached and the
full pass differ only in the order of the attention sums (the fast SDPA path over a different
number of keys), a few ulp of the largest logit. The issue asks for 1e-5 absolute; the logits
here are kept O(1) (init_std=0.2) so that 1e-5 is a real bound, not a relative one.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from transformer_lib.kv_cache import KVCache, cache_bytes_per_token, step_times
from transformer_lib.pretrained.llama import LlamaConfig, llama_decoder

ATOL = 1e-5
SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "none"]


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
    for bad_index in (torch.tensor([0, 1]), torch.tensor([-1]), torch.tensor([0.0]), [0]):  # batch is 1
        with pytest.raises(ValueError, match="index"):  # issue 40: [0, 1] was torch's IndexError
            cache.reorder(bad_index)
    cache.reorder(torch.tensor([0, 0]))  # two beams from row 0
    assert cache.keys[0].shape[0] == 2
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError):
            KVCache(bad)
        with pytest.raises(ValueError):
            cache_bytes_per_token(bad, 3, 64)



def test_step_times_measures_both_ways_at_every_context_and_refuses_a_short_text():
    """The chapter-17 sweep's function: one time per context and way (values are wall times, so
    only their kind is asserted), in the order asked; the text must reach past the longest context."""
    model = _gpt("rope")
    ids = torch.randint(0, 11, (1, 13), generator=torch.Generator().manual_seed(0))
    got = step_times(model, ids, [4, 12, 8], repeat=2)
    assert set(got) == {"cached", "uncached"}
    for times in got.values():
        assert len(times) == 3 and all(0 < t < 60 for t in times)
    with pytest.raises(ValueError, match="ids"):
        step_times(model, ids, [13])
    with pytest.raises(ValueError, match="contexts"):
        step_times(model, ids, [0, 4])
    with pytest.raises(ValueError, match="repeat"):
        step_times(model, ids, [4], repeat=0)


def _gpt(positional: str, seed: int = 0, **kwargs) -> tl.DecoderOnlyLM:
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(23, d_model=32, num_heads=4, num_layers=3, max_len=40, positional=positional,
                            init_std=0.2, **kwargs).eval()


def _in_steps(model, tokens: torch.Tensor, prompt: int) -> torch.Tensor:
    """The prompt at once, then one token per call, all through one cache: (B, L, V)."""
    cache = model.new_cache(initial_capacity=2)  # small: the buffers must grow on the way
    with torch.no_grad():
        parts = [model(tokens[:, :prompt], cache=cache)]
        parts += [model(tokens[:, t:t + 1], cache=cache) for t in range(prompt, tokens.shape[1])]
    assert cache.length == tokens.shape[1]
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("positional", SCHEMES)
@pytest.mark.parametrize("norm_first", [True, False])
def test_prompt_then_one_token_at_a_time_equals_the_full_pass(positional, norm_first):
    model = _gpt(positional, norm_first=norm_first)
    tokens = torch.randint(0, 23, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)  # (B, L, V)
    assert full.abs().max() > 0.5  # the logits are not all near zero: the bound means something
    torch.testing.assert_close(_in_steps(model, tokens, prompt=5), full, atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(positional=st.sampled_from(SCHEMES), L=st.integers(2, 20), prompt=st.integers(1, 20),
       seed=st.integers(0, 10_000))
def test_cache_parity_holds_for_any_prompt_length(positional, L, prompt, seed):
    model = _gpt(positional, seed)
    prompt = min(prompt, L)
    tokens = torch.randint(0, 23, (1, L), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(_in_steps(model, tokens, prompt), full, atol=ATOL, rtol=0)


def test_llama_decoder_and_seq2seq_decoder_have_the_same_cache_property():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=19, d_model=16, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=24,
                      rope_base=100.0, context_length=32)
    llama = llama_decoder(cfg).eval()
    tokens = torch.randint(0, 19, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(_in_steps(llama, tokens, 4), llama(tokens), atol=ATOL, rtol=0)
    s2s = tl.Seq2SeqTransformer(13, 19, d_model=32, num_heads=4, d_ff=64).eval()
    src = torch.randint(3, 13, (2, 7))
    decoder = s2s.conditioned_on(src)  # the decoder side with the source encoded once
    with torch.no_grad():
        full = s2s(src, tokens)
        torch.testing.assert_close(decoder(tokens), full, atol=ATOL, rtol=0)
        torch.testing.assert_close(_in_steps(decoder, tokens, 3), full, atol=ATOL, rtol=0)


def test_learned_positions_refuse_to_run_past_the_table_with_a_cache():
    model = _gpt("learned")  # max_len 40
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, 39, dtype=torch.long), cache=cache)
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="longer than the learned position table"):
            model(torch.zeros(1, 1, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("layers", [2, 4])
def test_a_cache_for_another_number_of_layers_is_refused_before_anything_runs(layers):
    """#26: more layers bypassed the context-length check (length is the minimum over layers, and
    the unused ones stay at 0); fewer failed with an IndexError."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=7, d_model=16, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=24,
                      context_length=8)
    for model in (_gpt("rope"), llama_decoder(cfg).eval()):
        cache = KVCache(layers)
        with pytest.raises(ValueError, match=f"cache was built for {layers} layers but the model has 3"):
            model(torch.zeros(1, 2, dtype=torch.long), cache=cache)
        assert cache.lengths == [0] * layers
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        _gpt("rope")(torch.zeros(1, 2, dtype=torch.long), cache={"keys": []})


def test_llama_context_length_counts_the_cached_tokens():
    """A pretrained RoPE model (context_length set, as load_smollm2 does) refuses positions past
    its trained context, cached ones included, before any layer appends to the cache."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=7, d_model=16, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=24,
                      context_length=8)
    model = llama_decoder(cfg).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="9 positions exceed the context length 8"):
            model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="9 positions exceed the context length 8"):
            model(torch.zeros(1, 9, dtype=torch.long))
    assert cache.lengths == [6, 6]  # refused before any layer appended


def test_multihead_cache_is_for_self_attention_and_checks_the_mask_first():
    mha = tl.MultiHeadAttention(16, 4)
    cache = KVCache(1)
    x = torch.randn(1, 3, 16)
    with pytest.raises(ValueError, match="self-attention only"):
        mha(x, torch.randn(1, 5, 16), cache=cache)
    mha(x, mask=tl.causal_mask(3), cache=cache)
    with pytest.raises(ValueError, match="broadcast"):
        mha(x[:, :1], mask=tl.causal_mask(3), cache=cache)  # (3, 3), but 1 query sees 4 keys
    assert cache.lengths == [3]
