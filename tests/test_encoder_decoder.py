"""Tests for what chapter 13 uses (prefix_lm_mask in masks, record_attention / mask_kind /
dependency_map in probes, TokenClassifier in toy_models, its data sets in tasks) and the
chapter's exercise checkers."""
import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import tasks
from exercise_answers import wrong_answers
from transformer_lib.exercises import get
from transformer_lib.masks import prefix_lm_mask
from transformer_lib.probes import dependency_map, mask_kind, record_attention
from transformer_lib.tasks import prompt_batch, running_sum_batch
from transformer_lib.toy_models import TokenClassifier


# -- prefix_lm_mask and mask_kind ----------------------------------------------------------------

def _prefix_lm_loop(n_prefix, L):
    """Dense reference written as the definition, entry by entry."""
    m = torch.zeros(L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(L):
            m[i, j] = j < n_prefix or j <= i
    return m


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 12), data=st.data())
def test_prefix_lm_mask_matches_its_definition(L, data):
    n_prefix = data.draw(st.integers(0, L))
    mask = prefix_lm_mask(n_prefix, L)
    assert mask.dtype == torch.bool and mask.shape == (L, L)
    assert torch.equal(mask, _prefix_lm_loop(n_prefix, L))


def test_prefix_lm_mask_ends_are_causal_and_full():
    assert torch.equal(prefix_lm_mask(0, 6), tl.causal_mask(6))
    assert prefix_lm_mask(6, 6).all()
    assert prefix_lm_mask(1, 6).equal(tl.causal_mask(6))  # the first key is visible to all anyway


@pytest.mark.parametrize("n_prefix, L", [(-1, 4), (5, 4), (1.5, 4), (True, 4), (1, 0)])
def test_prefix_lm_mask_rejects_bad_sizes(n_prefix, L):
    with pytest.raises(ValueError):
        prefix_lm_mask(n_prefix, L)


def test_mask_kind_names_each_pattern():
    L = 6
    assert mask_kind(None) == "full"
    assert mask_kind(torch.ones(3, 5, dtype=torch.bool)) == "full"
    assert mask_kind(tl.causal_mask(L)) == "causal"
    assert mask_kind(tl.causal_mask(3, 5)) == "causal"  # aligned to the end, as with a KV cache
    pad = tl.padding_mask([4], L)[0, 0].expand(L, L)  # (L, L): keys 4, 5 are padding
    assert mask_kind(pad) == "padding"
    assert mask_kind(pad & tl.causal_mask(L)) == "causal + padding"
    assert mask_kind(prefix_lm_mask(3, L)) == "prefix LM (3)"
    assert mask_kind(tl.sliding_window_mask(L, 3)) == "custom"
    with pytest.raises(ValueError, match="2-D boolean"):
        mask_kind(torch.ones(2, L, L, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D boolean"):
        mask_kind(torch.ones(L, L))


# -- record_attention ------------------------------------------------------------------------------

def test_record_attention_sees_the_three_calls_of_an_encoder_decoder():
    model = tl.Seq2SeqTransformer(13, 13, d_model=16, num_heads=2, num_encoder_layers=2,
                                  num_decoder_layers=1, d_ff=32).eval()
    src, tgt = torch.randint(3, 13, (2, 7)), torch.randint(3, 13, (2, 4))
    with record_attention(model) as calls, torch.no_grad():
        model(src, tasks.shift_right(tgt), src_lengths=[7, 5])
    summary = [(c.name, c.kind, c.mask_kind, c.shapes) for c in calls]
    assert summary == [
        ("transformer.encoder.blocks.0.self_attn", "self", "padding", "7 x 7"),
        ("transformer.encoder.blocks.1.self_attn", "self", "padding", "7 x 7"),
        ("transformer.decoder.blocks.0.self_attn", "self", "causal", "4 x 4"),
        ("transformer.decoder.blocks.0.cross_attn", "cross", "padding", "4 x 7"),
    ]
    cross = calls[-1]
    assert cross.masks.shape == (2, 4, 7) and cross.mask_given
    assert cross.mask.all() and not cross.masks[1, :, 5:].any()  # sequence 1 has 2 pads
    assert cross.query.shape == (2, 4, 16) and cross.key.shape == (2, 7, 16)
    with torch.no_grad():
        memory = model.encode(src, [7, 5])
    assert torch.equal(cross.key, memory) and torch.equal(cross.value, memory)
    assert calls[0].mask_given and calls[2].mask_given  # padding in the encoder, causal in the decoder


def test_record_attention_weights_are_the_modules_own_and_the_fast_path_agrees():
    torch.manual_seed(0)
    layer = tl.DecoderLayer(16, 4, 32).eval()
    x, memory, causal = torch.randn(2, 5, 16), torch.randn(2, 7, 16), tl.causal_mask(5)
    with torch.no_grad():
        fast = layer(x, memory, causal)
        with record_attention(layer) as calls:
            assert torch.equal(layer(x, memory, causal), fast)  # recording without weights changes nothing
        assert [c.weights for c in calls] == [None, None]
        with record_attention(layer, weights=True) as calls:
            readable = layer(x, memory, causal)
        self_call, cross_call = calls
        _, expected = layer.cross_attn(cross_call.query, memory, memory, need_weights=True)
    assert torch.equal(cross_call.weights, expected) and cross_call.weights.shape == (2, 4, 5, 7)
    assert self_call.weights.shape == (2, 4, 5, 5) and not self_call.weights.triu(1).any()  # causal
    assert torch.allclose(readable, fast, atol=1e-5)  # readable and fused paths agree (float32 rounding)


def test_record_attention_removes_its_hooks_and_checks_its_input():
    model = tl.DecoderOnlyLM(11, d_model=16, num_heads=2, num_layers=1)
    with record_attention(model) as calls:
        model(torch.randint(0, 11, (1, 5)))
    assert [c.mask_kind for c in calls] == ["causal"]
    model(torch.randint(0, 11, (1, 5)))
    assert len(calls) == 1, "hooks must be removed when the block ends"
    with pytest.raises(ValueError, match="no attention module"):
        with record_attention(torch.nn.Linear(2, 2)):
            pass
    with pytest.raises(TypeError, match="nn.Module"):
        with record_attention("model"):
            pass


# -- TokenClassifier -----------------------------------------------------------------------------------

def _dense_reference(model, tokens):
    """The classifier written out from its parts, with the mask passed to every layer by hand."""
    L = tokens.shape[1]
    mask = tl.causal_mask(L) if model.causal else None
    x = model.embed(tokens) + model.pos.embedding.weight[:L]  # (B, L, D)
    for layer in model.blocks:
        x = x + layer.self_attn(layer.norm1(x), mask=mask)[0]  # Pre-LN: x + Sublayer(LN(x))
        x = x + layer.ffn(layer.norm2(x))
    return model.head(model.norm(x))  # (B, L, C)


@pytest.mark.parametrize("causal", [False, True])
def test_token_classifier_equals_a_dense_reference(causal):
    torch.manual_seed(1)
    model = TokenClassifier(17, num_classes=5, d_model=24, num_heads=3, num_layers=2, causal=causal).eval()
    tokens = torch.randint(0, 17, (3, 9))
    with torch.no_grad():
        got, expected = model(tokens), _dense_reference(model, tokens)
    assert got.shape == (3, 9, 5)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@functools.lru_cache(maxsize=1)
def _causal_and_full_pair():
    """Two classifiers with the same parameters; only the mask differs."""
    torch.manual_seed(4)
    causal = TokenClassifier(9, d_model=16, num_heads=2, num_layers=2, causal=True).eval()
    full = TokenClassifier(9, d_model=16, num_heads=2, num_layers=2, causal=False).eval()
    full.load_state_dict(causal.state_dict())
    return causal, full


@settings(max_examples=25, deadline=None)
@given(L=st.integers(2, 10), t=st.integers(0, 8), seed=st.integers(0, 10_000))
def test_causal_classifier_never_reads_the_future_and_bidirectional_does(L, t, seed):
    t = min(t, L - 2)
    causal, full = _causal_and_full_pair()
    tokens = torch.randint(0, 9, (2, L), generator=torch.Generator().manual_seed(seed))
    changed = tokens.clone()
    changed[:, t + 1:] = (tokens[:, t + 1:] + 1) % 9  # every token after t is different
    with torch.no_grad():
        assert torch.equal(causal(tokens)[:, :t + 1], causal(changed)[:, :t + 1])  # bit for bit
        assert not torch.allclose(full(tokens)[:, :t + 1], full(changed)[:, :t + 1])


def test_token_classifier_rejects_bad_input():
    with pytest.raises(ValueError, match="vocab_size"):
        TokenClassifier(0)
    with pytest.raises(ValueError, match="num_classes"):
        TokenClassifier(5, num_classes=0)
    with pytest.raises(ValueError, match="divisible"):
        TokenClassifier(5, d_model=10, num_heads=4)
    model = TokenClassifier(5, max_len=4)
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))


# -- dependency_map -------------------------------------------------------------------------------------

def test_dependency_map_equals_a_loop_of_backward_passes_and_is_zero_exactly_where_masked():
    torch.manual_seed(2)
    block = tl.EncoderLayer(16, 2, 32).eval()
    x = torch.randn(6, 16)
    fn = lambda z: block(z[None], tl.causal_mask(6))[0]  # (6, 16)
    dep = dependency_map(fn, x)
    reference = torch.zeros(6, 6)
    for t in range(6):
        for f in range(16):
            z = x.clone().requires_grad_(True)
            fn(z)[t, f].backward()
            reference[t] = torch.maximum(reference[t], z.grad.abs().amax(dim=1))
    torch.testing.assert_close(dep, reference, atol=1e-6, rtol=1e-5)
    assert torch.equal(dep > 0, tl.causal_mask(6))


def test_dependency_map_rejects_bad_shapes():
    with pytest.raises(ValueError, match="one sequence"):
        dependency_map(lambda z: z, torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="L_out, D_out"):
        dependency_map(lambda z: z.sum(), torch.randn(3, 4))


# -- data ---------------------------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 4), L=st.integers(1, 9), base=st.integers(2, 12), seed=st.integers(0, 1000))
def test_running_sum_batch_matches_a_loop(B, L, base, seed):
    src, tgt = running_sum_batch(B, L, torch.Generator().manual_seed(seed), base=base)
    assert src.shape == tgt.shape == (B, L)
    digits = src - tasks.FIRST_TOKEN
    assert digits.min() >= 0 and digits.max() < base
    for b in range(B):
        total = 0
        for t in range(L):
            total = (total + digits[b, t].item()) % base
            assert tgt[b, t].item() == total + tasks.FIRST_TOKEN


def test_running_sum_and_prompt_batch_reject_bad_input():
    for args in ((0, 4), (2, 0)):
        with pytest.raises(ValueError):
            running_sum_batch(*args)
    with pytest.raises(ValueError, match="base"):
        running_sum_batch(2, 3, base=1)
    src, tgt = torch.randint(3, 9, (2, 4)), torch.randint(3, 9, (2, 3))
    seq = prompt_batch(src, tgt)
    assert seq.shape == (2, 8) and torch.equal(seq[:, :4], src) and torch.equal(seq[:, 5:], tgt)
    assert (seq[:, 4] == tasks.EOS).all()
    with pytest.raises(ValueError, match="same B"):
        prompt_batch(src, tgt[:1])


# -- the parallel == incremental fact the chapter relies on ----------------------------------------------------

def test_one_parallel_pass_equals_prefix_by_prefix_decoding():
    torch.manual_seed(3)
    model = tl.Seq2SeqTransformer(13, 13, d_model=32, num_heads=4, num_encoder_layers=1,
                                  num_decoder_layers=2, d_ff=64).eval()
    src, tgt = torch.randint(3, 13, (3, 7)), torch.randint(3, 13, (3, 6))
    tgt_in = tasks.shift_right(tgt)
    with torch.no_grad():
        parallel = model(src, tgt_in)
        memory = model.encode(src)
        incremental = torch.stack([model.decode(tgt_in[:, :t + 1], memory)[:, -1] for t in range(6)], dim=1)
    torch.testing.assert_close(parallel, incremental, atol=1e-5, rtol=1e-5)


# -- the chapter's checkers accept right answers ------------------------------------------------------------------

def _generate(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    steps = []
    for _ in range(max_len):
        logits = model.decode(ys, memory)[:, -1]
        steps.append(logits)
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:], torch.stack(steps, dim=1)


SOLUTIONS = {
    "encdec.teacher_forcing_loss":
        lambda m, s, t: F.cross_entropy(m(s, tasks.shift_right(t)).flatten(0, 1), t.flatten()),
    "encdec.generate_with_logits": _generate,
    "encdec.prefix_lm_mask": lambda n, L: (torch.arange(L)[None] <= torch.arange(L)[:, None]) | (torch.arange(L)[None] < n),
    "encdec.extra_decoder_parameters": lambda d: 4 * (d * d + d) + 2 * d,
}


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_checker_accepts_a_right_answer_and_rejects_the_wrong_ones(name):
    exercise = get(name)
    assert exercise.run(SOLUTIONS[name]).passed, exercise.run(SOLUTIONS[name]).message
    for wrong in wrong_answers(name):
        assert not exercise.run(wrong).passed


def test_the_loss_checker_accepts_a_python_float_and_rejects_a_vector():
    right = SOLUTIONS["encdec.teacher_forcing_loss"]
    exercise = get("encdec.teacher_forcing_loss")
    assert exercise.run(lambda m, s, t: right(m, s, t).item()).passed
    result = exercise.run(lambda m, s, t: F.cross_entropy(m(s, tasks.shift_right(t)).flatten(0, 1), t.flatten(),
                                                          reduction="none"))
    assert not result.passed and "one number" in result.message


def test_checkers_do_not_disturb_the_readers_random_state():
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    get("encdec.generate_with_logits").run(_generate)
    get("encdec.extra_decoder_parameters").run(SOLUTIONS["encdec.extra_decoder_parameters"])
    assert torch.equal(torch.rand(3), before)
