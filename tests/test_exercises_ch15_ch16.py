"""Every checker of chapters 15 and 16 accepts a solution written here (independently of the
library, as a reader would) and rejects each registered wrong answer."""
import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.exercises import check, list_exercises


def count_pairs(words):
    counts = {}
    for word, n in words.items():
        for a, b in zip(word, word[1:]):
            counts[(a, b)] = counts.get((a, b), 0) + n
    return counts


def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i:i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_step(words, new_id):
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    new_words = Counter()
    for word, n in words.items():
        new_words[tuple(merge(list(word), pair, new_id))] += n
    return pair, dict(new_words)


def encode(data, merges):
    ids = list(data)
    for i, pair in enumerate(merges):  # applying the merges in order, each once, is equivalent
        ids = merge(ids, pair, 256 + i)
    return ids


def encode_by_rank(data, merges):
    ranks = {p: r for r, p in enumerate(merges)}
    ids = list(data)
    while len(ids) > 1:
        pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, math.inf))
        if pair not in ranks:
            break
        ids = merge(ids, pair, 256 + ranks[pair])
    return ids


def lm_loss(logits, tokens):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))


def schedule(step, warmup, total, min_ratio):
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / (total - warmup))
    return min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi * t)) / 2


SOLUTIONS = {
    "tokenization.count_pairs": [count_pairs, lambda words: Counter({p: n for p, n in count_pairs(words).items()})],
    "tokenization.merge_step": [merge_step],
    "tokenization.encode": [encode, encode_by_rank],
    "training.causal_lm_loss": [lm_loss, lambda logits, tokens: -torch.log_softmax(logits, -1)[:, :-1]
                                .gather(-1, tokens[:, 1:, None]).mean()],
    "training.warmup_cosine": [schedule],
    "training.perplexity": [lambda losses: math.exp(sum(losses) / len(losses)),
                            lambda losses: float(torch.tensor(losses).mean().exp())],
}


def test_every_exercise_of_both_chapters_has_a_solution_here():
    assert set(list_exercises("tokenization.")) | set(list_exercises("training.")) == set(SOLUTIONS)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solutions_pass(name):
    for answer in SOLUTIONS[name]:
        assert check(name, answer, quiet=True), check(name, answer, quiet=True).message
