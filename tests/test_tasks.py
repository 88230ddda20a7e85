"""transformer_lib.tasks: every synthetic data set, against its definition written out with loops."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib import tasks
from transformer_lib.tasks import LOOKUP_TASKS as TASKS
from transformer_lib.tasks import (BOS, EOS, FIRST_TOKEN, answer_keys, prompt_batch, running_sum_batch,
                                   three_lookups_batch)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_random_tokens_are_content_tokens_and_repeat_with_the_generator():
    t = tasks.random_tokens(4, 50, 7, gen(1))
    assert t.shape == (4, 50) and t.dtype == torch.long
    assert set(t.unique().tolist()) == set(range(FIRST_TOKEN, 7))  # 200 draws hit all 4 values
    assert torch.equal(t, tasks.random_tokens(4, 50, 7, gen(1)))


@pytest.mark.parametrize("kwargs, name", [(dict(batch_size=0), "batch_size"), (dict(length=0), "length"),
                                          (dict(vocab_size=FIRST_TOKEN), "vocab_size"),
                                          (dict(vocab_size=5.0), "vocab_size")])
def test_random_tokens_bad_sizes(kwargs, name):
    args = dict(batch_size=2, length=3, vocab_size=8) | kwargs
    with pytest.raises(ValueError, match=name):
        tasks.random_tokens(**args)


def test_a_generator_must_be_a_torch_generator():
    with pytest.raises(TypeError, match="generator"):
        tasks.random_tokens(2, 3, 8, generator=0)
    with pytest.raises(TypeError, match="generator"):
        tasks.running_sum_batch(2, 3, generator="seed")


def test_reversal_and_shift_right():
    src, target = tasks.reversal_batch(3, 6, 10, gen())
    assert [row[::-1] for row in src.tolist()] == target.tolist()
    shifted = tasks.shift_right(target)
    assert shifted.tolist() == [[BOS] + row[:-1] for row in target.tolist()]
    assert tasks.shift_right(target, bos=9)[:, 0].tolist() == [9, 9, 9]
    with pytest.raises(ValueError, match="target"):
        tasks.shift_right(target.float())
    with pytest.raises(ValueError, match="bos"):
        tasks.shift_right(target, bos=-1)


def test_recall_first_labels_the_first_token():
    tokens, label = tasks.recall_first_batch(16, 9, 12, num_classes=4, generator=gen(2))
    assert (tokens[:, 0] - FIRST_TOKEN).tolist() == label.tolist()
    assert label.min() >= 0 and label.max() < 4
    for bad in (0, 12 - FIRST_TOKEN + 1):
        with pytest.raises(ValueError, match="num_classes"):
            tasks.recall_first_batch(2, 4, 12, num_classes=bad)


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 12), base=st.integers(2, 12), seed=st.integers(0, 1000))
def test_property_running_sum_is_the_prefix_sum_mod_base(length, base, seed):
    src, target = tasks.running_sum_batch(3, length, gen(seed), base=base)
    for digits, sums in zip(src.tolist(), target.tolist()):
        total = 0
        for d, s in zip(digits, sums):
            assert FIRST_TOKEN <= d < FIRST_TOKEN + base
            total = (total + d - FIRST_TOKEN) % base
            assert s == FIRST_TOKEN + total


def test_running_sum_bad_base():
    with pytest.raises(ValueError, match="base"):
        tasks.running_sum_batch(2, 3, base=1)


def test_prompt_batch_is_source_separator_answer():
    src, target = torch.tensor([[3, 4], [5, 6]]), torch.tensor([[7], [8]])
    assert tasks.prompt_batch(src, target).tolist() == [[3, 4, EOS, 7], [5, 6, EOS, 8]]
    with pytest.raises(ValueError, match="same B"):
        tasks.prompt_batch(src, target[:1])
    with pytest.raises(ValueError, match="src and target"):
        tasks.prompt_batch(src.float(), target.float())
    with pytest.raises(ValueError, match="sep"):
        tasks.prompt_batch(src, target, sep=-3)


def test_three_lookups_targets_and_answer_keys_by_brute_force():
    tokens, targets = tasks.three_lookups_batch(4, 10, 5, gen(3))
    keys = tasks.answer_keys(tokens)
    V = 5
    for b, row in enumerate(tokens.tolist()):
        for i in range(len(row)):
            assert targets["previous"][b, i] == (row[i - 1] if i else V)
            assert targets["first"][b, i] == row[0]
            assert targets["max"][b, i] == max(row[: i + 1])
            for j in range(len(row)):
                assert keys["previous"][b, i, j] == (j == i - 1)
                assert keys["first"][b, i, j] == (j == 0)
                assert keys["max"][b, i, j] == (j <= i and row[j] == max(row[: i + 1]))
    with pytest.raises(ValueError, match="length"):
        tasks.three_lookups_batch(2, 1, 5)
    with pytest.raises(ValueError, match="vocab_size"):
        tasks.three_lookups_batch(2, 4, 1)


# -- running_sum_batch and prompt_batch against loops (chapter 13) ---------------------------------

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


# -- three_lookups_batch and answer_keys against brute force (chapter 3) ---------------------------

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


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0, length=4, vocab_size=5), "batch_size"),
    (dict(batch_size=2, length=1, vocab_size=5), "length"),
    (dict(batch_size=2, length=4, vocab_size=1), "vocab_size"),
])
def test_batch_rejects_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        three_lookups_batch(**kwargs)


# -- the Markov language of chapter 31 --------------------------------------------------------------

def test_markov_language_is_stationary_and_its_entropy_rate_is_the_sampled_loss():
    """pi is a fixed point of the chain; the mean -log p of sampled windows (the chain's own loss)
    matches window_loss within 4 standard errors of that mean."""
    from transformer_lib.tasks import markov_language
    lang = markov_language(vocab_size=12, seed=3)
    p, pi = lang.transitions, lang.stationary
    torch.testing.assert_close(torch.einsum("ab,abc->bc", pi, p), pi, rtol=0, atol=1e-12)
    torch.testing.assert_close(p.sum(-1), torch.ones(12, 12, dtype=torch.float64))
    w = lang.sample(4000, 10, torch.Generator().manual_seed(0))  # (4000, 10)
    first = pi.sum(1)
    nll = torch.cat([-torch.log(pi[w[:, 0], w[:, 1]] / first[w[:, 0]])[:, None],
                     -torch.log(p[w[:, :-2], w[:, 1:-1], w[:, 2:]])], dim=1)  # (4000, 9)
    per_window = nll.mean(1)
    se = float(per_window.std() / math.sqrt(len(per_window)))
    assert abs(float(per_window.mean()) - lang.window_loss(10)) < 4 * se
    # the windows start in the stationary state: pair frequencies within 5 SE of pi
    counts = torch.bincount(w[:, 0] * 12 + w[:, 1], minlength=144).double() / len(w)
    bound = 5 * torch.sqrt(pi.reshape(-1) * (1 - pi.reshape(-1)) / len(w)) + 1e-3
    assert torch.all((counts - pi.reshape(-1)).abs() < bound)
    assert lang.window_loss(2) > lang.window_loss(10) > lang.entropy_rate


def test_markov_language_is_seeded_and_checks_its_input():
    from transformer_lib.tasks import markov_language
    assert torch.equal(markov_language(8, seed=1).transitions, markov_language(8, seed=1).transitions)
    assert not torch.equal(markov_language(8, seed=1).transitions, markov_language(8, seed=2).transitions)
    for kwargs, name in [(dict(vocab_size=1), "vocab_size"), (dict(seed=-1), "seed"), (dict(concentration=0), "concentration"),
                         (dict(weights=(0.5, 0.5)), "weights"), (dict(weights=(0.0, 0.5, 0.5)), "weights")]:
        with pytest.raises(ValueError, match=name):
            markov_language(**kwargs)
    lang = markov_language(8)
    for args, name in [((0, 4), "batch_size"), ((2, 1), "length")]:
        with pytest.raises(ValueError, match=name):
            lang.sample(*args)
    with pytest.raises(ValueError, match="context"):
        lang.window_loss(1)
