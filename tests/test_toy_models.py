"""Tests for transformer_lib.toy_models (the three-lookups model of chapter 3), its task in
transformer_lib.tasks and its head scores in transformer_lib.probes."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.device import cpu_threads
from transformer_lib.probes import head_scores, record_attention
from transformer_lib.tasks import LOOKUP_TASKS as TASKS
from transformer_lib.tasks import answer_keys, three_lookups_batch
from transformer_lib.toy_models import LookupModel, lookup_accuracy, lookup_loss, train_lookup_model


def _brute_force_targets(tokens, vocab_size):
    B, L = tokens.shape
    prev = torch.empty(B, L, dtype=torch.long)
    first = torch.empty(B, L, dtype=torch.long)
    biggest = torch.empty(B, L, dtype=torch.long)
    for b in range(B):
        for t in range(L):
            prev[b, t] = tokens[b, t - 1] if t > 0 else vocab_size
            first[b, t] = tokens[b, 0]
            biggest[b, t] = max(tokens[b, : t + 1].tolist())
    return {"previous": prev, "first": first, "max": biggest}


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 4), L=st.integers(2, 9), V=st.integers(2, 7), seed=st.integers(0, 1000))
def test_targets_match_brute_force(B, L, V, seed):
    tokens, targets = three_lookups_batch(B, L, V, torch.Generator().manual_seed(seed))
    assert tokens.shape == (B, L) and tokens.min() >= 0 and tokens.max() < V
    expected = _brute_force_targets(tokens, V)
    for task in TASKS:
        assert torch.equal(targets[task], expected[task]), task


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(2, 8), V=st.integers(2, 6), seed=st.integers(0, 1000))
def test_answer_keys_hold_the_answers(B, L, V, seed):
    """Every marked key holds the target token, and every query t >= 1 has at least one such key."""
    tokens, targets = three_lookups_batch(B, L, V, torch.Generator().manual_seed(seed))
    keys = answer_keys(tokens)
    for task in TASKS:
        k = keys[task]
        assert k.shape == (B, L, L) and k.dtype == torch.bool
        assert not k.triu(1).any(), "an answer key lies in the future"
        assert k[:, 1:].any(-1).all()
        b, i, j = k.nonzero(as_tuple=True)
        assert torch.equal(tokens[b, j], targets[task][b, i])


def test_head_scores_are_one_for_perfect_heads_and_uniform_heads_score_lower():
    tokens, _ = three_lookups_batch(8, 10, 5, torch.Generator().manual_seed(0))
    keys = answer_keys(tokens)
    perfect = torch.stack([keys[t].float() / keys[t].float().sum(-1, keepdim=True).clamp_min(1) for t in TASKS],
                          dim=1)  # (B, 3, L, L): head h attends evenly to task h's answer keys
    scores = head_scores(perfect, tokens)
    for h, task in enumerate(TASKS):
        assert scores[task][h].item() == pytest.approx(1.0, abs=1e-6)
    uniform = torch.tril(torch.ones(10, 10))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(8, 1, 10, 10)
    assert head_scores(uniform, tokens)["previous"].item() < 0.5


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


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0, length=4, vocab_size=5), "batch_size"),
    (dict(batch_size=2, length=1, vocab_size=5), "length"),
    (dict(batch_size=2, length=4, vocab_size=1), "vocab_size"),
])
def test_batch_rejects_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        three_lookups_batch(**kwargs)


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


def test_cpu_threads_restores_the_setting_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with cpu_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
