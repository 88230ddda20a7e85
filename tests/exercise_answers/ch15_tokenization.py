"""Answers for the checkers of transformer_lib/exercises/ch15_tokenization.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

from collections import Counter

from transformer_lib.tokenization import BPETokenizer, count_pairs, merge_pair


def _reference_step(words, new_id):
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    merged = Counter()
    for w, n in words.items():
        merged[tuple(merge_pair(w, pair, new_id))] += n
    return pair, dict(merged)


def _reference_encode(data: bytes, merges):
    tok = BPETokenizer()
    for a, b in merges:  # spell the merges as byte strings (ids 256 + i)
        tok = BPETokenizer(tok.merges + [(tok.token_bytes(a), tok.token_bytes(b))])
    return tok.encode_chunk(data)


def _count_unique_words(words):  # ignores how often each word occurs
    return Counter(p for w in words for p in zip(w, w[1:]))


def _count_distinct_pairs_per_word(words):  # "aaa" holds the pair (a, a) twice, not once
    c = Counter()
    for w, n in words.items():
        for p in set(zip(w, w[1:])):
            c[p] += n
    return c


def _count_across_words(words):  # one long stream: pairs that span two words are counted too
    stream = [t for w, n in words.items() for _ in range(n) for t in w]
    return Counter(zip(stream, stream[1:]))


def _count_with_a_plain_dict(words):
    totals = {}
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            totals[pair] = totals.get(pair, 0) + n
    return totals


def _count_with_indices(words):
    totals = Counter()
    for word, n in words.items():
        for i in range(len(word) - 1):
            totals[(word[i], word[i + 1])] += n
    return dict(totals)


def _step_overlapping(words, new_id):  # merges every position, so "a a a" becomes "aa aa"
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    out = Counter()
    for w, n in words.items():
        w = list(w)
        new = [new_id if i + 1 < len(w) and (w[i], w[i + 1]) == pair else w[i] for i in range(len(w))]
        out[tuple(x for i, x in enumerate(new) if not (i > 0 and new[i - 1] == new_id and w[i] == pair[1]))] += n
    return pair, dict(out)


def _step_first_only(words, new_id):  # replaces only the first occurrence in each word
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    out = Counter()
    for w, n in words.items():
        w = list(w)
        for i in range(len(w) - 1):
            if (w[i], w[i + 1]) == pair:
                w[i:i + 2] = [new_id]
                break
        out[tuple(w)] += n
    return pair, dict(out)


def _step_unweighted(words, new_id):  # ignores how often each word occurs
    counts = Counter(p for w in words for p in zip(w, w[1:]))
    pair = max(counts, key=counts.get)
    return pair, {tuple(merge_pair(w, pair, new_id)): n for w, n in words.items()}


def _step_right_to_left(words, new_id):  # scans from the right: "a a a" becomes "a aa"
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    out = Counter()
    for w, n in words.items():
        rev = merge_pair(list(reversed(w)), (pair[1], pair[0]), new_id)
        out[tuple(reversed(rev))] += n
    return pair, dict(out)


def _step_with_lists(words, new_id):  # the pair as a list, the words as a Counter: both accepted
    totals = Counter()
    for word, n in words.items():
        for i in range(len(word) - 1):
            totals[word[i], word[i + 1]] += n
    (a, b), _ = totals.most_common(1)[0]
    new_words = Counter()
    for word, n in words.items():
        out, i = [], 0
        while i < len(word):
            if word[i:i + 2] == (a, b):
                out.append(new_id)
                i += 2
            else:
                out.append(word[i])
                i += 1
        new_words[tuple(out)] += n
    return [a, b], new_words


def _encode_reverse_order(data, merges):
    ids = list(data)
    for i, pair in reversed(list(enumerate(merges))):
        ids = merge_pair(ids, pair, 256 + i)
    return ids


def _encode_single_pass(data, merges):  # each position merged at most once, earliest rank only
    ids, out, i = list(data), [], 0
    ranks = {p: r for r, p in enumerate(merges)}
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) in ranks:
            out.append(256 + ranks[(ids[i], ids[i + 1])])
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _token_bytes(merges):
    spelled = {i: bytes([i]) for i in range(256)}
    for i, (a, b) in enumerate(merges):
        spelled[256 + i] = spelled[a] + spelled[b]
    return spelled


def _encode_longest_match(data, merges):  # greedy longest token first: not what BPE does
    by_bytes = {v: k for k, v in sorted(_token_bytes(merges).items(), reverse=True)}
    out, i = [], 0
    while i < len(data):
        j = max(j for j in range(i + 1, len(data) + 1) if data[i:j] in by_bytes)
        out.append(by_bytes[data[i:j]])
        i = j
    return out


def _encode_in_merge_order(data, merges):  # each merge once, in order: equivalent to replaying by rank
    ids = list(data)
    for i, pair in enumerate(merges):
        ids = merge_pair(ids, pair, 256 + i)
    return ids


def _encode_by_rank(data, merges):
    rank = {p: r for r, p in enumerate(merges)}
    ids = list(data)
    while len(ids) > 1:
        pair = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, len(merges)))
        if pair not in rank:
            break
        ids = merge_pair(ids, pair, 256 + rank[pair])
    return tuple(ids)  # a tuple is accepted too


ANSWERS = {
    'tokenization.count_pairs': {
        'solution': lambda: count_pairs,
        'alternatives': lambda: [_count_with_a_plain_dict, _count_with_indices],
        'wrong': lambda: [_count_unique_words, _count_distinct_pairs_per_word,
                          lambda words: Counter(p for w, n in words.items() for p in zip(w, w[2:])),
                          _count_across_words],
    },
    'tokenization.merge_step': {
        'solution': lambda: _reference_step,
        'alternatives': lambda: [_step_with_lists],
        'wrong': lambda: [_step_overlapping, _step_first_only, _step_unweighted, _step_right_to_left],
    },
    'tokenization.encode': {
        'solution': lambda: (lambda data, merges: _reference_encode(data, merges)),
        'alternatives': lambda: [_encode_in_merge_order, _encode_by_rank],
        'wrong': lambda: [_encode_reverse_order, _encode_single_pass, lambda data, merges: list(data),
                          _encode_longest_match],
    },
}
