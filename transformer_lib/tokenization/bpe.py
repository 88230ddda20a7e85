"""Training byte-level BPE: count pairs, merge the most frequent, repeat (chapter 15, "One
merge step by hand").

The corpus is first reduced to its distinct pre-tokenizer chunks with their counts ("words"), each
a tuple of token ids that starts as its UTF-8 bytes. One training step counts every adjacent pair
of ids over all words (weighted by the word's count), takes the most frequent pair and replaces it
everywhere by a new id whose bytes are the two halves joined.

Two trainers, held equal by a test:

* :func:`train_bpe` is the readable one: it recounts every pair after every merge, exactly as the
  chapter describes it. Cost: (number of merges) x (size of the word list).
* :func:`train_bpe_fast` keeps the pair counts and, per pair, the words that contain it; a merge
  updates only those words, and a heap finds the next best pair (what the ``tokenizers`` library
  does). It is the one :meth:`BPETokenizer.train` uses.

Ties between equally frequent pairs go to the pair whose ids come first in :func:`tie_rank` order,
the order in which ``tokenizers`` numbers its tokens, so both produce the same merges as its
``BpeTrainer``. If a merge spells a byte string that is already a token (``"a"+"bc"`` after
``"ab"+"c"``), the existing id is reused, as ``tokenizers`` does.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict

from .._checks import check_int
from .._checks.tokens import check_merge_args, check_pair_counts, check_words
from .pretokenize import BYTE_TIE_RANK

__all__ = ["count_pairs", "merge_pair", "tie_rank", "best_pair", "train_bpe", "train_bpe_fast"]

Pair = tuple[int, int]


def count_pairs(words: dict[tuple[int, ...], int]) -> Counter:
    """How often each adjacent pair of ids occurs, over all words weighted by their counts."""
    check_words(words, limit=None)
    counts: Counter = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += n
    return counts


def merge_pair(ids, pair: Pair, new_id: int) -> list[int]:
    """Replace each occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right
    (so ``a a a`` with pair ``(a, a)`` becomes ``aa a``)."""
    check_merge_args(ids, pair)
    check_int("new_id", new_id, 0)
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def tie_rank(token_id: int) -> int:
    """Order used to break ties: base bytes by their printable character, merged ids by age."""
    check_int("token_id", token_id, 0)  # -1 would silently rank as byte 255
    return BYTE_TIE_RANK[token_id] if token_id < 256 else token_id


def best_pair(counts: Counter) -> Pair:
    """The most frequent pair; among equals, the one smallest in :func:`tie_rank` order."""
    check_pair_counts(counts)
    return max(counts, key=lambda p: (counts[p], -tie_rank(p[0]), -tie_rank(p[1])))


def _new_token(vocab: list[bytes], index: dict[bytes, int], pair: Pair) -> int:
    """The id of the merged token, appended to ``vocab`` unless those bytes are a token already."""
    joined = vocab[pair[0]] + vocab[pair[1]]
    if joined not in index:
        index[joined] = len(vocab)
        vocab.append(joined)
    return index[joined]


def _base_vocab() -> tuple[list[bytes], dict[bytes, int]]:
    vocab = [bytes([b]) for b in range(256)]
    return vocab, {tok: i for i, tok in enumerate(vocab)}


def train_bpe(words: dict[tuple[int, ...], int], num_tokens: int) -> tuple[list[Pair], list[bytes]]:
    """Readable trainer: merge until the vocabulary has ``num_tokens`` tokens (or no pair is left).

    Returns ``(merges, vocab)``: the merged id pairs in order, and the bytes of every id.
    """
    check_words(words)
    check_int("num_tokens (256 byte tokens come first)", num_tokens, 256)
    vocab, index = _base_vocab()
    merges: list[Pair] = []
    while len(vocab) < num_tokens:
        counts = count_pairs(words)
        if not counts:
            break
        pair = best_pair(counts)
        new_id = _new_token(vocab, index, pair)
        merges.append(pair)
        merged: Counter = Counter()
        for word, n in words.items():
            merged[tuple(merge_pair(word, pair, new_id))] += n
        words = merged
    return merges, vocab


def train_bpe_fast(words: dict[tuple[int, ...], int], num_tokens: int) -> tuple[list[Pair], list[bytes]]:
    """Incremental trainer with the same result as :func:`train_bpe` (a test holds them equal)."""
    check_words(words)
    check_int("num_tokens (256 byte tokens come first)", num_tokens, 256)
    vocab, index = _base_vocab()
    merges: list[Pair] = []
    word_list = [list(w) for w in words]
    freqs = list(words.values())
    pair_counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)  # pair -> indices of words that (may) contain it
    for i, word in enumerate(word_list):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)

    def entry(pair):  # heapq is a min-heap: most frequent first, then smallest tie rank
        return (-pair_counts[pair], tie_rank(pair[0]), tie_rank(pair[1]), pair)

    heap = [entry(p) for p in pair_counts]
    heapq.heapify(heap)
    while len(vocab) < num_tokens and heap:
        neg_count, _, _, pair = heapq.heappop(heap)
        count = pair_counts.get(pair, 0)
        if count <= 0:
            continue
        if count != -neg_count:  # stale entry: the count changed since it was pushed
            heapq.heappush(heap, entry(pair))
            continue
        new_id = _new_token(vocab, index, pair)
        merges.append(pair)
        touched: set[Pair] = set()
        for i in sorted(where.pop(pair)):
            word = word_list[i]
            new_word = merge_pair(word, pair, new_id)
            if len(new_word) == len(word):
                continue  # this word no longer holds the pair
            n = freqs[i]
            for p in zip(word, word[1:]):
                pair_counts[p] -= n
            for p in zip(new_word, new_word[1:]):
                pair_counts[p] += n
                where[p].add(i)
                if new_id in p:
                    touched.add(p)
            word_list[i] = new_word
        for p in touched:
            if pair_counts[p] > 0:
                heapq.heappush(heap, entry(p))
    return merges, vocab
