"""Text to bytes, and the pre-tokenizer split (chapter 15, "Bytes, then chunks").

Byte-level BPE starts from the UTF-8 bytes of the text, so every string has a spelling in the
256 base tokens and nothing is ever "unknown". Before merging, the text is cut into chunks with
GPT-2's regular expression: a word with its leading space, a run of digits, a run of punctuation,
whitespace. Merges never cross a chunk boundary, so " the" can become a token but "e t" cannot.

The byte-to-character table is GPT-2's: it gives each byte a printable character (a space is
"Ġ", a newline "Ċ") so a token can be shown and written to a JSON vocabulary. The ``tokenizers``
library numbers its 256 base tokens in the order of these characters; :func:`tie_rank` uses that
order so that our trainer breaks ties between equally frequent pairs the way it does.
"""
from __future__ import annotations

import regex

from .._checks import check_text
from .._checks.tokens import check_byte_chars, check_bytes

__all__ = ["GPT2_SPLIT_PATTERN", "split_chunks", "to_utf8", "bytes_to_unicode", "unicode_to_bytes",
           "visible", "BYTE_TIE_RANK"]

# GPT-2's pre-tokenizer (Radford et al., 2019): contractions, letters with an optional leading
# space, digits, other symbols, and whitespace (a run of spaces keeps its last space for the
# word that follows: that is the (?!\S)).
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SPLIT = regex.compile(GPT2_SPLIT_PATTERN)


def to_utf8(text: str, what: str = "text") -> bytes:
    """The UTF-8 bytes of ``text``; a ValueError for a non-string or a lone surrogate (the rule
    lives in :func:`transformer_lib._checks.check_text`, shared by every text entry point)."""
    return check_text(text, what)


def split_chunks(text: str) -> list[str]:
    """Cut ``text`` into pre-tokenizer chunks; ``"".join(split_chunks(t)) == t`` always."""
    check_text(text)
    return _SPLIT.findall(text)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table byte -> printable character: printable Latin-1 bytes map to themselves,
    the other 68 (control bytes, space, ...) to the characters U+0100 onwards."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_B2U = bytes_to_unicode()
_U2B = {c: b for b, c in _B2U.items()}

# Rank of each byte in the order of its printable character: the order in which the tokenizers
# library numbers its base tokens (so byte 32, the space, "Ġ", comes after every letter).
BYTE_TIE_RANK = [0] * 256
for _rank, (_byte, _char) in enumerate(sorted(_B2U.items(), key=lambda item: item[1])):
    BYTE_TIE_RANK[_byte] = _rank


def visible(token: bytes) -> str:
    """A token's bytes as printable GPT-2 characters (space -> Ġ, newline -> Ċ)."""
    check_bytes("token", token)
    return "".join(_B2U[b] for b in token)


def unicode_to_bytes(chars: str) -> bytes:
    """Inverse of :func:`visible`."""
    check_byte_chars(chars, _U2B)
    return bytes(_U2B[c] for c in chars)
