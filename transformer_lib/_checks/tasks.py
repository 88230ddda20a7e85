"""Synthetic data sets (transformer_lib.tasks): generators, vocabularies, token batches to join."""
from __future__ import annotations

import torch


def check_task_vocab(vocab_size, first_token: int) -> None:
    """A vocabulary with at least one content token above the reserved ids ``0 .. first_token - 1``."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= first_token:
        raise ValueError(f"vocab_size must be an integer > {first_token} (PAD, BOS, EOS are reserved), got {vocab_size!r}")


def check_src_target(src: torch.Tensor, target: torch.Tensor) -> None:
    """Two (B, L) batches of integer ids of one dtype and one batch size, to be joined row by row."""
    if src.dtype != target.dtype or src.is_floating_point():
        raise ValueError(f"src and target must hold integer token ids of one dtype, got {src.dtype} and {target.dtype}")
    if src.shape[0] != target.shape[0]:
        raise ValueError(f"src and target must be (B, L) with the same B, got {tuple(src.shape)} "
                         f"and {tuple(target.shape)}")


def check_one_token(name: str, ids) -> None:
    """A prompt's word (``name``) must encode to exactly one token."""
    if len(ids) != 1:
        raise ValueError(f"prompts: the name {name!r} must be one token, got {len(ids)}")


def check_equal_lengths(rows) -> None:
    """Prompts to stack into one batch must all have the same number of tokens."""
    if len({len(t) for t in rows}) != 1:
        raise ValueError("prompts must all have the same number of tokens (one-token names, places, things)")
