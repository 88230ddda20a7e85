"""Decoding (chapter 17, transformer_lib.sampling and .logit_filters): strategies, seeds, prompts
against a decoder's vocabulary and context, lists of strategies and continuations."""
from __future__ import annotations

import torch

from .scalars import check_int, check_number
from .tokens import check_token_ids


def check_temperature(temperature) -> float:
    """A temperature that divides logits: a finite number > 0 (0 is greedy, which takes the argmax
    instead of dividing by it)."""
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0:
        raise ValueError("temperature must be > 0 here (0 means greedy: take the argmax), got 0")
    return check_number("temperature", temperature, 0, low_open=True)


def check_strategy(temperature, top_k, top_p, repetition_penalty) -> None:
    """A decoding strategy: ``temperature >= 0``, ``repetition_penalty > 0``, ``top_k`` a positive
    integer and ``top_p`` in (0, 1] when given."""
    check_number("temperature", temperature, 0)
    check_number("repetition_penalty", repetition_penalty, 0, low_open=True)
    if top_k is not None:
        check_int("top_k", top_k)
    if top_p is not None:
        check_number("top_p", top_p, 0, 1, low_open=True)


def check_seed(seed, generator) -> None:
    """At most one source of randomness: a ``seed`` (an integer >= 0) or a ``generator``."""
    if seed is not None and generator is not None:
        raise ValueError("pass seed or generator, not both")
    if seed is not None:
        check_int("seed", seed, 0)


def check_decoder_ids(model, tokens, name: str) -> None:
    """``tokens`` (B, L) must be ids of ``model``'s vocabulary (the rows of its token table
    ``embed``); for a decoder without one, at least non-negative."""
    table = getattr(model, "embed", None)
    check_token_ids(tokens, table.num_embeddings if isinstance(table, torch.nn.Embedding) else None, name)


def check_prompt_rows(tokens) -> None:
    """A batch of prompts (B, L) with at least one token per row."""
    if tokens.shape[1] == 0:
        raise ValueError("tokens must hold at least one token per row (the prompt)")


def check_fits(model, length: int, max_new_tokens: int, context: int | None) -> None:
    """Refuse, before the first forward pass, a generation that would read past a position table:
    a learned or sinusoidal table (``model.pos.max_len``) has no row for a later position. The
    model reads the prompt and every new token but the last: ``length + max_new_tokens - 1``
    positions. A ``context`` window (at most the table) slides instead."""
    table = getattr(getattr(model, "pos", None), "max_len", None)
    if table is None:
        return
    if context is not None:
        check_int("context", context, 1, table)
    elif length + max_new_tokens - 1 > table:
        raise ValueError(f"a prompt of {length} tokens and max_new_tokens = {max_new_tokens} need "
                         f"{length + max_new_tokens - 1} positions, past the model's context of {table} "
                         f"(its position table): shorten the prompt, lower max_new_tokens, or pass "
                         f"context={table} to slide a window over the last {table} tokens")


def check_strategies(strategies, keys: tuple[str, ...]) -> list[dict]:
    """A non-empty list of dicts of decoding keywords (each key one of ``keys``), each a valid
    strategy; returned as new dicts with ``temperature`` (0) and ``repetition_penalty`` (1) filled in."""
    if isinstance(strategies, dict) or not list(strategies):
        raise ValueError("strategies must be a non-empty list of dicts of generate_ids' keywords")
    strategies = [dict(s) for s in strategies]
    for s in strategies:
        unknown = set(s) - set(keys)
        if unknown:
            raise ValueError(f"strategies: unknown keyword(s) {sorted(unknown)}; expected some of {keys}")
        s.setdefault("temperature", 0.0)
        s.setdefault("repetition_penalty", 1.0)
        check_strategy(s["temperature"], s.get("top_k"), s.get("top_p"), s["repetition_penalty"])
        check_seed(s.get("seed"), None)
    return strategies


def check_continuations(continuations) -> list[list[int]]:
    """Continuations of one prompt: a list of id lists, or a (B, n) tensor, none empty; returned as lists."""
    rows = continuations.tolist() if isinstance(continuations, torch.Tensor) else [list(c) for c in continuations]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("continuations must hold at least one non-empty continuation")
    return rows
