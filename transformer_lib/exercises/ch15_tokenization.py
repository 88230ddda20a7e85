"""Chapter 15 (Tokenization) exercises: count the pairs, one BPE merge step, encode with a merge list.

The checkers compare with :mod:`transformer_lib.tokenization` (``count_pairs``, ``merge_pair``,
``BPETokenizer.encode_chunk``) on inputs the reader has not seen: repeated tokens (``a a a``,
where merges must not overlap), weighted words, and merges that build on earlier merges.
"""
from __future__ import annotations

from collections import Counter

from ..tokenization import BPETokenizer, count_pairs, merge_pair
from ._core import NotYet, exercise

__all__ = []


def _words_cases() -> list[dict]:
    return [{tuple(b"low"): 5, tuple(b"lower"): 2, tuple(b"newest"): 6, tuple(b"widest"): 3},
            {tuple(b"aaa"): 1, tuple(b"aaaa"): 2, tuple(b"ab"): 1},
            {(256, 101, 256): 4, (101,): 9, tuple(b" the"): 7}]


def _as_counts(got, what) -> dict:
    if not isinstance(got, dict):
        raise NotYet(f"{what} should be a dict {{(a, b): count}}, got {type(got).__name__}")
    return {tuple(k): v for k, v in got.items() if v}


# -- 1. count the pairs ---------------------------------------------------------------------------

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


@exercise("tokenization.count_pairs",
          hint="for each word and its count n, add n for every adjacent pair zip(word, word[1:]) "
               "(a pair that occurs twice in a word counts twice)",
          wrong_answers=lambda: [_count_unique_words, _count_distinct_pairs_per_word,
                                 lambda words: Counter(p for w, n in words.items() for p in zip(w, w[2:])),
                                 _count_across_words],
          solution=lambda: count_pairs,
          alternative_answers=lambda: [_count_with_a_plain_dict, _count_with_indices])
def _check_count_pairs(answer):
    for words in _words_cases():
        got = _as_counts(answer(dict(words)), "your pair counts")
        expected = dict(count_pairs(words))
        if set(got) != set(expected):
            raise NotYet(f"the set of pairs differs for a corpus of {len(words)} words")
        wrong = [p for p in expected if got[p] != expected[p]]
        if wrong:
            raise NotYet(f"{len(wrong)} of {len(expected)} pair counts differ for a corpus of {len(words)} words")
    return "right on all 3 corpora (counts weighted by word frequency, repeated pairs counted)."


# -- 2. one merge step -----------------------------------------------------------------------------

def _reference_step(words, new_id):
    counts = count_pairs(words)
    pair = max(counts, key=counts.get)
    merged = Counter()
    for w, n in words.items():
        merged[tuple(merge_pair(w, pair, new_id))] += n
    return pair, dict(merged)


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


# each corpus has one most frequent pair (no ties to break)
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


_STEP_CASES = [({tuple(b"low"): 5, tuple(b"lower"): 2, tuple(b"newest"): 6, tuple(b"wider"): 3}, 256),
               ({tuple(b"aaab"): 3, tuple(b"aaaa"): 2, tuple(b"ba"): 1}, 300),  # (a, a) wins, overlapping
               ({tuple(b"xy"): 3, tuple(b"xz"): 3, tuple(b"xq"): 3, tuple(b"zzzzz"): 1}, 257)]  # (x, ?) vs (z, z)


@exercise("tokenization.merge_step",
          hint="count the pairs (weighted), take the most frequent, then rewrite every word left to right, "
               "replacing each non-overlapping occurrence of the pair by new_id; return (pair, new_words)",
          wrong_answers=lambda: [_step_overlapping, _step_first_only, _step_unweighted, _step_right_to_left],
          solution=lambda: _reference_step,
          alternative_answers=lambda: [_step_with_lists])
def _check_merge_step(answer):
    for words, new_id in _STEP_CASES:
        got = answer(dict(words), new_id)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise NotYet("return a tuple (pair, new_words)")
        pair, new_words = got
        exp_pair, exp_words = _reference_step(words, new_id)
        if tuple(pair) != exp_pair:
            raise NotYet(f"the merged pair is not the most frequent one (new id {new_id})")
        if _as_counts(new_words, "new_words") != exp_words:
            raise NotYet(f"the words after merging differ (new id {new_id}); check words where the pair repeats")
    return "right on all 3 corpora."


# -- 3. encode with a given merge list ------------------------------------------------------------

_MERGES = [(104, 101), (32, 116), (256, 108), (257, 256), (108, 108), (258, 111), (116, 104), (262, 101)]
# 256 = "he", 257 = " t", 258 = "hel", 259 = " the", 260 = "ll", 261 = "helo", 262 = "th", 263 = "the"


def _reference_encode(data: bytes, merges):
    tok = BPETokenizer()
    for a, b in merges:  # spell the merges as byte strings (ids 256 + i)
        tok = BPETokenizer(tok.merges + [(tok.token_bytes(a), tok.token_bytes(b))])
    return tok.encode_chunk(data)


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


@exercise("tokenization.encode",
          hint="start from list(data); repeatedly find the adjacent pair that appears earliest in the merge "
               "list and replace it by 256 + its index, until no adjacent pair is in the list",
          wrong_answers=lambda: [_encode_reverse_order, _encode_single_pass, lambda data, merges: list(data),
                                 _encode_longest_match],
          solution=lambda: (lambda data, merges: _reference_encode(data, merges)),
          alternative_answers=lambda: [_encode_in_merge_order, _encode_by_rank])
def _check_encode(answer):
    cases = [b" the", b"hello", b" thehello", b"hellllo", b"the the", b"", b"x", b"helhelo"]
    for data in cases:
        got = answer(data, list(_MERGES))
        if not isinstance(got, (list, tuple)):
            raise NotYet(f"return a list of ids, got {type(got).__name__}")
        if [int(i) for i in got] != _reference_encode(data, _MERGES):
            raise NotYet(f"the ids for the {len(data)}-byte input {data!r} differ")
    return f"right on all {len(cases)} inputs."
