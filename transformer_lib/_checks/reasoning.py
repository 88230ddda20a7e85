"""Reasoning with verifiable rewards (chapters 26-27, transformer_lib.reasoning): characters of
the arithmetic vocabulary, GRPO's rewards, log-probabilities, advantages and masks."""
from __future__ import annotations

import torch

from .scalars import check_int


def check_characters(text: str, vocab: str) -> None:
    """``text`` may only use the characters of ``vocab``."""
    bad = sorted(set(text) - set(vocab))
    if bad:
        raise ValueError(f"text may only use the characters {vocab!r}, got {bad}")


def check_group_rewards(rewards, group_size) -> None:
    """``rewards`` a 1-D float tensor (B,), ordered group by group: ``group_size >= 2`` divides B."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError(f"rewards must be a 1-D float tensor (B,), got {getattr(rewards, 'shape', type(rewards))}")
    check_int("group_size", group_size, 2)
    if rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(f"group_size={group_size} must divide the number of rewards ({rewards.numel()})")


def check_grpo_args(logprobs, old_logprobs, ref_logprobs, advantages, mask, beta) -> None:
    """``logprobs`` (B, T); ``old_logprobs``, ``ref_logprobs`` (may be None when ``beta == 0``) and
    a bool ``mask`` of the same shape with a token in every row; ``advantages`` (B,)."""
    if not isinstance(logprobs, torch.Tensor) or logprobs.dim() != 2:
        raise ValueError(f"logprobs must be a (B, T) tensor, got {getattr(logprobs, 'shape', type(logprobs))}")
    B, T = logprobs.shape
    for name, value in (("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs), ("mask", mask)):
        if name == "ref_logprobs" and value is None and beta == 0:
            continue
        if not isinstance(value, torch.Tensor) or value.shape != (B, T):
            raise ValueError(f"{name} must have the shape of logprobs {(B, T)}, got {getattr(value, 'shape', value)}")
    if not isinstance(advantages, torch.Tensor) or advantages.shape != (B,):
        raise ValueError(f"advantages must have shape (B,) = ({B},), got {getattr(advantages, 'shape', advantages)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be boolean, got {mask.dtype}")
    if not bool(mask.any(1).all()):
        raise ValueError(f"mask has an empty row (row {int((~mask.any(1)).nonzero()[0])}): every response needs a token")


def check_kl_reference(reference, beta) -> None:
    """A KL penalty (``beta != 0``) needs a reference model to measure it against."""
    if beta != 0 and reference is None:
        raise ValueError("reference must be a model when beta != 0 (the KL is measured against it)")
