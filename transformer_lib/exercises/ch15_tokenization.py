"""Chapter 15 (Tokenization) exercises: count the pairs, one BPE merge step, encode with a merge list.

The checkers compare with :mod:`transformer_lib.tokenization` (``count_pairs``, ``merge_pair``,
``BPETokenizer.encode_chunk``) on inputs the reader has not seen: repeated tokens (``a a a``,
where merges must not overlap), weighted words, and merges that build on earlier merges.
"""
from __future__ import annotations

from collections import Counter

from ..tokenization import BPETokenizer, best_pair, count_pairs, merge_pair
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


@exercise("tokenization.count_pairs",
          hint="for each word and its count n, add n for every adjacent pair zip(word, word[1:]) "
               "(a pair that occurs twice in a word counts twice)")
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

_STEP_CASES = [({tuple(b"low"): 5, tuple(b"lower"): 2, tuple(b"newest"): 6, tuple(b"wider"): 3}, 256),
               ({tuple(b"aaab"): 3, tuple(b"aaaa"): 2, tuple(b"ba"): 1}, 300),  # (a, a) wins, overlapping
               ({tuple(b"xy"): 3, tuple(b"xz"): 3, tuple(b"xq"): 3, tuple(b"zzzzz"): 1}, 257)]  # (x, ?) vs (z, z)


@exercise("tokenization.merge_step",
          hint="count the pairs (weighted), take the most frequent, then rewrite every word left to right, "
               "replacing each non-overlapping occurrence of the pair by new_id; return (pair, new_words)")
def _check_merge_step(answer):
    for words, new_id in _STEP_CASES:
        got = answer(dict(words), new_id)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise NotYet("return a tuple (pair, new_words)")
        pair, new_words = got
        exp_pair = best_pair(count_pairs(words))  # the library's choice (no ties in these corpora)
        exp_words = Counter()
        for word, n in words.items():
            exp_words[tuple(merge_pair(word, exp_pair, new_id))] += n
        if tuple(pair) != exp_pair:
            raise NotYet(f"the merged pair is not the most frequent one (new id {new_id})")
        if _as_counts(new_words, "new_words") != dict(exp_words):
            raise NotYet(f"the words after merging differ (new id {new_id}); check words where the pair repeats")
    return "right on all 3 corpora."


# -- 3. encode with a given merge list ------------------------------------------------------------

_MERGES = [(104, 101), (32, 116), (256, 108), (257, 256), (108, 108), (258, 111), (116, 104), (262, 101)]
# 256 = "he", 257 = " t", 258 = "hel", 259 = " the", 260 = "ll", 261 = "helo", 262 = "th", 263 = "the"


def _tokenizer_from_ids(merges) -> BPETokenizer:
    """The library's tokenizer with these merges, given as id pairs (merge i makes id 256 + i)."""
    tok = BPETokenizer()
    for a, b in merges:  # spell the merges as byte strings
        tok = BPETokenizer(tok.merges + [(tok.token_bytes(a), tok.token_bytes(b))])
    return tok


@exercise("tokenization.encode",
          hint="start from list(data); repeatedly find the adjacent pair that appears earliest in the merge "
               "list and replace it by 256 + its index, until no adjacent pair is in the list")
def _check_encode(answer):
    cases = [b" the", b"hello", b" thehello", b"hellllo", b"the the", b"", b"x", b"helhelo"]
    tokenizer = _tokenizer_from_ids(_MERGES)
    for data in cases:
        got = answer(data, list(_MERGES))
        if not isinstance(got, (list, tuple)):
            raise NotYet(f"return a list of ids, got {type(got).__name__}")
        if [int(i) for i in got] != tokenizer.encode_chunk(data):
            raise NotYet(f"the ids for the {len(data)}-byte input {data!r} differ")
    return f"right on all {len(cases)} inputs."
