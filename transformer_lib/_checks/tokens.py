"""Token ids, prompts, logits, positions and text: what a model, a tokenizer or a sampler takes."""
from __future__ import annotations

import operator

import torch

from .scalars import check_str_list


def check_id_dtype(name: str, tokens: torch.Tensor) -> None:
    """``tokens`` must hold integer ids: a float id is refused rather than truncated (3.7 is not a
    token), and bools and complex numbers are no ids either."""
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")


def check_tokens(tokens: torch.Tensor, name: str = "tokens") -> None:
    """A batch of token ids must be (B, L)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be (B, L), got shape {shape}")


def check_token_ids(tokens, vocab_size: int | None, name: str = "tokens") -> None:
    """``tokens`` must be an integer (B, L) tensor of ids in ``[0, vocab_size)`` (``>= 0`` where the
    vocabulary is not known: ``vocab_size=None``).

    Float ids are refused rather than truncated (3.7 is not a token), and an id outside the table
    is named here instead of failing deep inside ``nn.Embedding``'s index lookup.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids (B, L), got {type(tokens).__name__}")
    check_id_dtype(name, tokens)
    if tokens.dim() != 2:
        raise ValueError(f"{name} must be (B, L), got shape {tuple(tokens.shape)}")
    if torch.compiler.is_exporting():
        return  # the ids are not known while torch.export traces: the exported graph's user checks them
    if tokens.numel() and vocab_size is None and int(tokens.min()) < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {int(tokens.min())}")
    if tokens.numel() and vocab_size is not None and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(tokens.min())} "
                         f"to {int(tokens.max())}")


def check_prompt_ids(prompt_ids, vocab_size: int | None = None, name: str = "prompt_ids") -> None:
    """A prompt for generation: a non-empty 1-D sequence of integer ids (list or tensor), each in
    ``[0, vocab_size)`` when the vocabulary is known. A 2-D prompt is refused, not flattened."""
    ids = prompt_ids if isinstance(prompt_ids, torch.Tensor) else torch.as_tensor(prompt_ids)
    check_id_dtype(name, ids)
    if ids.dim() != 1:
        raise ValueError(f"{name} must be one 1-D sequence of token ids, got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError(f"{name} must hold at least one token")
    if vocab_size is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(ids.min())} to {int(ids.max())}")


def check_id_list(name: str, ids, vocab_size: int) -> torch.Tensor:
    """Token ids already seen (1-D, any length, integers in ``[0, vocab_size)``); returned as a long
    tensor. An id of -1 would otherwise index the last vocabulary entry."""
    t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(list(ids))
    if t.numel() == 0:
        return t.reshape(0).long()
    check_id_dtype(name, t)
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if int(t.min()) < 0 or int(t.max()) >= vocab_size:
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(t.min())} to {int(t.max())}")
    return t.long()


def check_logits(logits, name: str = "logits") -> None:
    """Next-token logits: a floating tensor (V,) or (B, V) with no NaN (``-inf`` marks a removed
    token; ``+inf`` is refused too). NaN would otherwise become a plausible token: argmax picks it,
    and ``torch.multinomial`` fails with a message that names nothing the caller passed."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (V,) or (B, V), got {type(logits).__name__}")
    if logits.dim() not in (1, 2) or not logits.is_floating_point():
        raise ValueError(f"{name} must be a float tensor (V,) or (B, V), got {logits.dtype} of shape "
                         f"{tuple(logits.shape)}")
    if logits.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one vocabulary entry, got shape {tuple(logits.shape)}")
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise ValueError(f"{name} contain NaN or +inf; the model's output is broken, no token can be chosen")
    if torch.isneginf(logits).all(dim=-1).any():
        raise ValueError(f"every entry of a row of {name} is -inf: no token is left to choose")


def check_positions(positions: torch.Tensor, name: str = "positions") -> None:
    """Positions must be an integer tensor (a fractional position would be silently rounded
    elsewhere; negative ones are relative offsets, which RoPE defines)."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer positions, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {positions.dtype}")


def check_text(text, what: str = "text") -> bytes:
    """``text`` must be a str of valid Unicode; return its UTF-8 bytes.

    Python strings may hold lone surrogates (U+D800..U+DFFF, e.g. from ``"\\ud83d"``), which have
    no UTF-8 encoding: no tokenizer can round-trip them, so every text entry point refuses them here.
    """
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a str, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start]
        raise ValueError(f"{what} contains a lone surrogate U+{ord(bad):04X} at index {err.start}; "
                         "only valid Unicode (no unpaired surrogates) can be encoded as UTF-8") from None


def check_chat_messages(messages) -> list[dict]:
    """Chat messages: a non-empty list of ``{'role': 'system'|'user'|'assistant', 'content': str}``."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise ValueError(f"each message must be a dict with role 'system', 'user' or 'assistant' and a "
                             f"string content, got {m!r}")
    return list(messages)


# -- the BPE tokenizer (chapter 15, transformer_lib.tokenization) ----------------------------------

def check_id(i) -> int:
    """One token id: an int, a NumPy integer or a one-element integer tensor, as an int."""
    if isinstance(i, bool):
        raise ValueError(f"ids must hold integer token ids, got {i!r}")
    try:
        return operator.index(i)
    except TypeError:
        raise ValueError(f"ids must hold integer token ids, got {i!r}") from None


def check_decode_ids(ids) -> None:
    """Ids to decode: an iterable of ids (a list, tuple or 1-D tensor), not a string."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids must be a list (or 1-D tensor) of token ids, got {type(ids).__name__}")
    if hasattr(ids, "dim") and ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")


def check_vocab_id(token_id, size: int) -> None:
    """A tokenizer's id: an int in ``[0, size)``."""
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise TypeError(f"token_id must be an int, got {type(token_id).__name__} {token_id!r}")
    if not 0 <= token_id < size:
        raise ValueError(f"token ids must be ints in [0, {size}), got {token_id!r}")


def check_bytes(name: str, value, what: str = "") -> None:
    """``value`` must be bytes (or a bytearray); ``what`` says which (``" (a chunk's UTF-8 encoding)"``)."""
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{name} must be bytes{what}, got {type(value).__name__}")


def check_byte_chars(chars, known) -> None:
    """A str of GPT-2's printable byte characters (each one in ``known``)."""
    if not isinstance(chars, str):
        raise TypeError(f"chars must be a str of GPT-2 byte characters, got {type(chars).__name__}")
    unknown = sorted({c for c in chars if c not in known})
    if unknown:
        raise ValueError(f"chars holds characters that stand for no byte: {unknown[:5]!r}")


def check_merges(merges) -> None:
    """A merge list: a list or tuple of ``(bytes, bytes)`` pairs, each half made by the bytes or an
    earlier merge."""
    if isinstance(merges, (str, bytes, dict)) or not isinstance(merges, (list, tuple)):
        raise TypeError(f"merges must be a list of (bytes, bytes) pairs, got {type(merges).__name__}")
    for merge in merges:
        if not (isinstance(merge, (tuple, list)) and len(merge) == 2
                and all(isinstance(half, bytes) for half in merge)):
            raise ValueError(f"each merge must be a pair of bytes objects, e.g. (b'h', b'e'), got {merge!r}")
    made = {bytes([b]) for b in range(256)}
    for left, right in merges:
        if left not in made or right not in made:
            raise ValueError(f"merge {(left, right)!r} uses a token that no earlier merge made")
        made.add(left + right)


def check_special_tokens(special_tokens) -> tuple[str, ...]:
    """Special tokens: a list of distinct non-empty strings of valid Unicode; returned as a tuple."""
    special_tokens = check_str_list("special_tokens", special_tokens)
    for i, s in enumerate(special_tokens):
        check_text(s, "a special token")
        if not s or s in special_tokens[:i]:
            raise ValueError(f"special tokens must be distinct non-empty strings, got {s!r}")
    return special_tokens


def check_bpe_vocab_size(vocab_size, special: int) -> None:
    """A vocabulary of at least the 256 bytes and the ``special`` tokens."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 256 + special:
        raise ValueError(f"vocab_size must be an int >= 256 + {special} special tokens "
                         f"(the byte alphabet comes first), got {vocab_size!r}")


def check_merge_args(ids, pair) -> None:
    """``ids`` a list or tuple of token ids and ``pair`` two of them."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
        raise TypeError(f"ids must be a list of token ids, got {type(ids).__name__}")
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise ValueError(f"pair must be a tuple of two token ids, got {pair!r}")


def check_pair_counts(counts) -> None:
    """Pair counts to pick the best merge from: at least one pair."""
    if not counts:
        raise ValueError("counts is empty: no pair is left to merge")


def check_words(words, limit: int | None = 256) -> None:
    """Words: a dict {tuple of token ids: count >= 1} (what ``BPETokenizer.chunk_counts`` gives);
    a trainer starts from byte ids (< ``limit`` = 256), a count of pairs takes any ids >= 0."""
    if not isinstance(words, dict):
        raise TypeError(f"words must be a dict {{tuple of byte ids: count}}, got {type(words).__name__}")
    for word, n in words.items():
        if not isinstance(word, tuple) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                  and (limit is None or i < limit) for i in word):
            where = "byte ids in [0, 256)" if limit else "token ids >= 0"
            raise ValueError(f"words' keys must be tuples of {where}, got {word!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"words' counts must be integers >= 1, got {n!r} for {word!r}")
