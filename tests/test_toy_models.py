"""Tests for transformer_lib.toy_models: the three-lookups model of chapter 3 (its task is tested in
test_tasks.py, its head scores in test_probes.py), chapter 9's TransformerClassifier and chapter
13's TokenClassifier against a dense reference, causal and bidirectional."""
import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.probes import head_scores, record_attention
from transformer_lib.tasks import LOOKUP_TASKS as TASKS
from transformer_lib.tasks import three_lookups_batch
from transformer_lib.toy_models import (LookupModel, TokenClassifier, TransformerClassifier, lookup_accuracy,
                                        lookup_loss, train_lookup_model)


def test_model_shapes_loss_and_weights():
    torch.manual_seed(0)
    model = LookupModel(vocab_size=6, max_len=7, d_model=16, num_heads=2, num_layers=3)
    batch = three_lookups_batch(3, 7, 6, torch.Generator().manual_seed(1))
    logits = model(batch[0])
    assert logits["previous"].shape == (3, 7, 7) and logits["first"].shape == (3, 7, 6)
    assert lookup_loss(model, batch).dim() == 0
    with record_attention(model) as calls:
        model(batch[0])
    assert [c.weights for c in calls] == [None] * 3  # weights only when asked for
    with record_attention(model, weights=True) as calls:
        model(batch[0])
    weights = [c.weights for c in calls]
    assert len(weights) == 3 and [c.name for c in calls] == [f"blocks.{i}.self_attn" for i in range(3)]
    assert len(weights) == 3 and weights[0].shape == (3, 2, 7, 7)
    assert torch.allclose(weights[0].sum(-1), torch.ones(3, 2, 7))
    assert not weights[0].triu(1).any(), "the model must be causal"


def test_model_is_causal():
    """Changing token t must not change any answer at positions before t."""
    torch.manual_seed(0)
    model = LookupModel(vocab_size=8, max_len=9, d_model=16, num_heads=2).eval()
    tokens, _ = three_lookups_batch(2, 9, 8, torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 8
    a, b = model(tokens), model(changed)
    for task in TASKS:
        assert torch.equal(a[task][:, :5], b[task][:, :5])
        assert not torch.allclose(a[task][:, 5:], b[task][:, 5:])


def test_training_makes_heads_specialize():
    """A short run solves all three tasks; some head does each lookup with most of its weight."""
    model, history = train_lookup_model(steps=300, seed=0)
    losses = history["loss"]
    assert losses[-1] < 0.3 * losses[0]
    batch = three_lookups_batch(256, 12, 16, torch.Generator().manual_seed(99))
    accuracy = lookup_accuracy(model, batch)
    assert min(accuracy.values()) > 0.95, accuracy
    with record_attention(model, weights=True) as calls:
        model(batch[0])
    best = {t: max(head_scores(c.weights, batch[0])[t].max().item() for c in calls) for t in TASKS}
    assert min(best.values()) > 0.75, best


def test_training_is_deterministic():
    _, a = train_lookup_model(steps=5, seed=3, num_layers=1)
    _, b = train_lookup_model(steps=5, seed=3, num_layers=1)
    assert a == b


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match="divisible"):
        LookupModel(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="num_layers"):
        LookupModel(num_layers=0)
    model = LookupModel(max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, H, L, L\)"):
        head_scores(torch.zeros(2, 3, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="do not match"):
        head_scores(torch.zeros(2, 1, 3, 3), torch.zeros(2, 4, dtype=torch.long))


# -- TokenClassifier: a label per token, causal or bidirectional (chapter 13) ----------------------

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


# -- TransformerClassifier (chapter 9) -------------------------------------------------------------

def test_transformer_classifier_shapes_and_errors():
    model = TransformerClassifier(11, 16, 8, num_heads=4, max_len=20)
    assert model(torch.randint(0, 11, (3, 20))).shape == (3, 8)
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(torch.randint(0, 11, (20,)))
    with pytest.raises(ValueError, match="longer than the learned position table"):
        model(torch.randint(0, 11, (1, 21)))
