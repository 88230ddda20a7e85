"""Contamination: has the model seen the test? (chapter 30, "Contamination").

A model evaluated on text it was trained on is graded on memory, not skill. The usual check is
textual: cut both the evaluation items and the training corpus into word n-grams and look for
shared ones. GPT-3 (Brown et al. 2020) called an item dirty if any of its 13-grams occurs in the
training data; later reports use a share of overlapping n-grams (Llama 2 counts tokens covered
by matches of 10 tokens or more). Both are here: :func:`overlap` is the share of an item's
n-grams found in the corpus, and an item is flagged when it reaches a threshold.

Words are lower-cased runs of letters and digits (punctuation and spacing ignored), so a
reformatted copy is still caught; a paraphrase is not, and no n-gram check can catch it.
"""
from __future__ import annotations

import re

from .._checks import check_number, check_str
from .._checks.evaluation import check_ngram_size

__all__ = ["words", "ngrams", "ngram_index", "overlap", "contaminated"]


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (runs of letters and digits)."""
    check_str("text", text)
    return re.findall(r"[a-z0-9]+", text.lower())


def ngrams(tokens, n: int) -> list[tuple]:
    """Every run of ``n`` consecutive tokens (none if there are fewer than ``n``)."""
    check_ngram_size(n)
    tokens = list(tokens)
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def ngram_index(corpus: str, n: int) -> frozenset:
    """The set of word n-grams of a training corpus: built once, looked up per item."""
    return frozenset(ngrams(words(corpus), n))


def overlap(text: str, index: frozenset, n: int) -> float:
    """The share of ``text``'s word n-grams that occur in ``index`` (0 for a text shorter than n words)."""
    if not isinstance(index, (set, frozenset)):
        raise TypeError(f"index must be a set of n-grams (ngram_index), got {type(index).__name__}")
    grams = ngrams(words(text), n)
    if not grams:
        return 0.0
    if index and len(next(iter(index))) != n:
        raise ValueError(f"n: the index holds {len(next(iter(index)))}-grams, got n={n}")
    return sum(g in index for g in grams) / len(grams)


def contaminated(texts, corpus: str, n: int = 13, threshold: float = 0.0) -> list[bool]:
    """For each text, whether its n-gram overlap with ``corpus`` exceeds ``threshold`` (the
    default 0.0 is GPT-3's rule: any shared 13-gram makes an item dirty)."""
    check_number("threshold", threshold, 0, 1)
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of str (one per evaluation item)")
    index = ngram_index(corpus, n)
    return [overlap(t, index, n) > threshold for t in texts]
