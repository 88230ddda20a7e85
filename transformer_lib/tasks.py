"""Small synthetic data sets, generated on the fly (nothing is downloaded).

Token conventions shared by all tasks: ``PAD = 0``, ``BOS = 1``, ``EOS = 2``; content tokens
are ``FIRST_TOKEN .. vocab_size - 1``. Every function takes a ``torch.Generator`` so batches are
reproducible.
"""
from __future__ import annotations

import torch

__all__ = ["PAD", "BOS", "EOS", "FIRST_TOKEN", "random_tokens", "reversal_batch", "sorting_batch",
           "copy_batch", "shift_right", "recall_first_batch"]

PAD, BOS, EOS = 0, 1, 2
FIRST_TOKEN = 3


def random_tokens(batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None):
    """(B, L) content tokens drawn uniformly from FIRST_TOKEN .. vocab_size - 1."""
    if vocab_size <= FIRST_TOKEN:
        raise ValueError(f"vocab_size must exceed {FIRST_TOKEN} (PAD, BOS, EOS are reserved)")
    return torch.randint(FIRST_TOKEN, vocab_size, (batch_size, length), generator=generator)


def shift_right(target: torch.Tensor, bos: int = BOS) -> torch.Tensor:
    """Decoder input for teacher forcing: BOS followed by the target minus its last token."""
    start = torch.full_like(target[:, :1], bos)
    return torch.cat([start, target[:, :-1]], dim=1)  # (B, L)


def copy_batch(batch_size: int, length: int, vocab_size: int, generator=None):
    """(src, target) with target == src."""
    src = random_tokens(batch_size, length, vocab_size, generator)
    return src, src.clone()


def reversal_batch(batch_size: int, length: int, vocab_size: int, generator=None):
    """(src, target) with target = src reversed: the learned cross-attention is an anti-diagonal."""
    src = random_tokens(batch_size, length, vocab_size, generator)
    return src, src.flip(1)


def sorting_batch(batch_size: int, length: int, vocab_size: int, generator=None):
    """(src, target) with target = src sorted ascending."""
    src = random_tokens(batch_size, length, vocab_size, generator)
    return src, src.sort(dim=1).values


def recall_first_batch(batch_size: int, length: int, vocab_size: int, num_classes: int | None = None,
                       generator=None):
    """(tokens, label): the label is the class of the *first* token; the rest is distractor noise.

    The signal sits ``length - 1`` steps before the end, so a recurrent model must carry it
    through every step, while attention can read it directly.
    """
    num_classes = num_classes or (vocab_size - FIRST_TOKEN)
    tokens = random_tokens(batch_size, length, vocab_size, generator)
    label = torch.randint(0, num_classes, (batch_size,), generator=generator)
    tokens[:, 0] = FIRST_TOKEN + label
    return tokens, label
