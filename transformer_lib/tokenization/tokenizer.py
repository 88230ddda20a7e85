"""The byte-level BPE tokenizer: train, encode, decode, special tokens (chapter 15).

Ids 0-255 are the bytes themselves, ids from 256 the merged tokens in the order they were
learned, and the special tokens (e.g. ``"<|endoftext|>"``) come last. Special tokens count
toward ``vocab_size`` (as in ``tokenizers``), are cut out of the text before anything else and
never take part in merges.

Two encoders, held equal by a test:

* ``encode(text)``, the readable one: per chunk, repeatedly merge the adjacent pair that was
  learned earliest, until no learned pair is left (a cache remembers chunks already seen);
* ``encode(text, fast=True)``: the same merges loaded into the ``tokenizers`` library (Rust).
"""
from __future__ import annotations

import json
from collections import Counter

import regex

from .._checks import check_bool, check_str_list
from .._checks.tokens import (check_bpe_vocab_size, check_bytes, check_decode_ids, check_id, check_merges,
                             check_special_tokens, check_vocab_id)
from .._checks import check_str
from .bpe import merge_pair, train_bpe, train_bpe_fast
from .pretokenize import split_chunks, to_utf8, unicode_to_bytes, visible

__all__ = ["BPETokenizer"]


class BPETokenizer:
    """A byte-level BPE tokenizer defined by its merges (and optional special tokens).

    Build one with :meth:`train`, or from a merge list: ``BPETokenizer(merges, special_tokens)``
    where ``merges`` is a list of ``(bytes, bytes)`` pairs in the order they were learned.
    """

    def __init__(self, merges=(), special_tokens=()):
        special_tokens = check_special_tokens(special_tokens)
        check_merges(merges)
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]  # id -> bytes
        index = {tok: i for i, tok in enumerate(self.vocab)}
        self._merges: list[tuple[bytes, bytes]] = []
        self._rank: dict[tuple[int, int], int] = {}  # id pair -> position in the merge list
        self._merged_id: dict[tuple[int, int], int] = {}  # id pair -> the id it becomes
        for left, right in merges:
            joined = left + right
            if joined not in index:
                index[joined] = len(self.vocab)
                self.vocab.append(joined)
            pair = (index[left], index[right])
            self._rank.setdefault(pair, len(self._merges))
            self._merged_id[pair] = index[joined]
            self._merges.append((left, right))
        self.special_tokens: dict[str, int] = {}
        for s in special_tokens:
            self.special_tokens[s] = len(self.vocab) + len(self.special_tokens)
        self._special_by_id = {i: s for s, i in self.special_tokens.items()}
        self._special_split = (regex.compile("(" + "|".join(regex.escape(s) for s in sorted(
            self.special_tokens, key=len, reverse=True)) + ")") if self.special_tokens else None)
        self._cache: dict[str, list[int]] = {}
        self._fast = None

    # -- training --------------------------------------------------------------------------

    @staticmethod
    def chunk_counts(text: str, special_tokens=()) -> dict[tuple[int, ...], int]:
        """The training "words": each distinct pre-tokenizer chunk as a tuple of byte ids, with
        its count. Special tokens are cut out first, so no merge can cross them."""
        to_utf8(text)
        special_tokens = check_str_list("special_tokens", special_tokens)
        pieces = [text]
        if special_tokens:
            pattern = "|".join(regex.escape(s) for s in sorted(special_tokens, key=len, reverse=True))
            pieces = regex.split(pattern, text)
        counts = Counter(chunk for piece in pieces for chunk in split_chunks(piece))
        return {tuple(chunk.encode("utf-8")): n for chunk, n in counts.items()}

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens=(), fast: bool = True) -> "BPETokenizer":
        """Learn merges on ``text`` until the vocabulary (256 bytes + merged tokens + special
        tokens) has ``vocab_size`` entries, or no pair is left to merge."""
        to_utf8(text)
        special_tokens = check_str_list("special_tokens", special_tokens)
        check_bool("fast", fast)
        check_bpe_vocab_size(vocab_size, len(special_tokens))
        words = cls.chunk_counts(text, special_tokens)
        trainer = train_bpe_fast if fast else train_bpe
        merges, vocab = trainer(words, vocab_size - len(special_tokens))
        return cls([(vocab[a], vocab[b]) for a, b in merges], special_tokens)

    # -- the vocabulary --------------------------------------------------------------------

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The learned merges as byte-string pairs, in the order they were learned."""
        return list(self._merges)

    def __len__(self) -> int:
        return len(self.vocab) + len(self.special_tokens)

    def __repr__(self) -> str:
        return f"BPETokenizer({len(self)} tokens: 256 bytes, {len(self._merges)} merges, {len(self.special_tokens)} special)"

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (a special token: its UTF-8 text)."""
        check_vocab_id(token_id, len(self))  # the special tokens' ids come last
        if token_id in self._special_by_id:
            return self._special_by_id[token_id].encode("utf-8")
        return self.vocab[token_id]

    def pieces(self, text: str) -> list[str]:
        """The tokens of ``text`` as strings (a token that ends inside a character shows as �)."""
        return [self.token_bytes(i).decode("utf-8", errors="replace") for i in self.encode(text)]

    # -- encoding and decoding -------------------------------------------------------------

    def encode_chunk(self, chunk: bytes) -> list[int]:
        """Readable BPE on one chunk: merge the earliest-learned pair present, until none is."""
        check_bytes("chunk", chunk, " (a chunk's UTF-8 encoding)")
        ids = list(chunk)
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: self._rank.get(p, float("inf")))
            if pair not in self._rank:
                break
            ids = merge_pair(ids, pair, self._merged_id[pair])
        return ids

    def encode(self, text: str, fast: bool = False) -> list[int]:
        """Token ids of ``text``; ``decode(encode(text)) == text`` for every valid string."""
        to_utf8(text)
        check_bool("fast", fast)
        if fast:
            return self.to_tokenizers().encode(text, add_special_tokens=False).ids
        ids: list[int] = []
        pieces = self._special_split.split(text) if self._special_split else [text]
        for piece in pieces:
            if piece in self.special_tokens:
                ids.append(self.special_tokens[piece])
                continue
            for chunk in split_chunks(piece):
                if chunk not in self._cache:
                    self._cache[chunk] = self.encode_chunk(chunk.encode("utf-8"))
                ids.extend(self._cache[chunk])
        return ids

    def decode(self, ids) -> str:
        """The text of a list of ids. Byte sequences that are not valid UTF-8 (a list cut in the
        middle of a character) decode to U+FFFD instead of raising."""
        check_decode_ids(ids)
        return b"".join(self.token_bytes(check_id(i)) for i in ids).decode("utf-8", errors="replace")

    # -- the fast path and saving ----------------------------------------------------------

    def to_tokenizers(self):
        """The same tokenizer as a ``tokenizers.Tokenizer`` (built once, then cached)."""
        if self._fast is None:
            try:
                from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
            except ImportError as err:  # pragma: no cover - depends on the installation
                raise ImportError("the fast path needs the 'tokenizers' package: pip install tokenizers") from err
            vocab = {visible(tok): i for i, tok in enumerate(self.vocab)}
            merges = [(visible(a), visible(b)) for a, b in self._merges]
            fast = Tokenizer(models.BPE(vocab=vocab, merges=merges))
            fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            fast.decoder = decoders.ByteLevel()
            fast.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in self.special_tokens])
            self._fast = fast
        return self._fast

    def to_json(self) -> str:
        """Merges and special tokens as JSON (tokens written with GPT-2's printable characters)."""
        return json.dumps({"merges": [[visible(a), visible(b)] for a, b in self._merges],
                           "special_tokens": list(self.special_tokens)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "BPETokenizer":
        """The tokenizer :meth:`to_json` wrote."""
        check_str("text", text, " (what to_json wrote)")
        try:
            data = json.loads(text)
            merges = [(unicode_to_bytes(a), unicode_to_bytes(b)) for a, b in data["merges"]]
            special = data.get("special_tokens", [])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"text is not a tokenizer written by to_json: {err}") from None
        return cls(merges, special)
