"""Fine-tuning a classifier (chapter 20): token batches with labels, layer counts, training settings."""
from __future__ import annotations

import torch

from .scalars import check_int, check_number


def check_labelled_batch(tokens, attention_mask, labels, num_classes: int | None = None) -> None:
    """``tokens`` (B, L) integer ids, ``attention_mask`` (B, L) of 0/1, ``labels`` (B,) class ids.

    ``tokens`` may also be float states (B, L, D) when training starts above frozen layers."""
    for name, t in (("tokens", tokens), ("attention_mask", attention_mask), ("labels", labels)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tokens.dim() not in (2, 3) or tokens.shape[0] == 0:
        raise ValueError(f"tokens must be (B, L) ids or (B, L, D) states with B >= 1, got shape {tuple(tokens.shape)}")
    if attention_mask.shape != tokens.shape[:2]:
        raise ValueError(f"attention_mask must have shape {tuple(tokens.shape[:2])}, got {tuple(attention_mask.shape)}")
    if labels.shape != tokens.shape[:1]:
        raise ValueError(f"labels must have shape ({tokens.shape[0]},): one class per row, got {tuple(labels.shape)}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer class ids, got dtype {labels.dtype}")
    if num_classes is not None and labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must be class ids in [0, {num_classes - 1}], got values "
                         f"from {int(labels.min())} to {int(labels.max())}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()) or not bool(attention_mask.sum(-1).gt(0).all()):
        raise ValueError("attention_mask must be 0/1 with at least one real token (1) in every row")


def check_training_settings(lr, epochs, batch_size, seed) -> None:
    """A learning rate in (0, 1], epochs and batch_size >= 1, an integer seed >= 0."""
    check_number("lr", lr, 0.0, 1.0, low_open=True)
    check_int("epochs", epochs, 1, 1000)
    check_int("batch_size", batch_size, 1)
    check_int("seed", seed, 0)
