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


def check_head_args(states, attention_mask, weight, bias) -> None:
    """Float ``states`` (B, L, D), ``weight`` (C, D) and ``bias`` (C,); ``attention_mask`` (B, L)."""
    for name, t in (("states", states), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a float torch.Tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if states.dim() != 3 or weight.dim() != 2 or weight.shape[1] != states.shape[-1] or bias.shape != weight.shape[:1]:
        raise ValueError(f"states must be (B, L, D), weight (C, D) and bias (C,), got {tuple(states.shape)}, "
                         f"{tuple(weight.shape)} and {tuple(bias.shape)}")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != states.shape[:2]:
        raise ValueError(f"attention_mask must be (B, L) = {tuple(states.shape[:2])}, "
                         f"got {tuple(getattr(attention_mask, 'shape', ()))}")


def check_start_layer(inputs, start_layer, num_layers: int) -> None:
    """Token ids (N, L) without ``start_layer``, or frozen states (N, L, D) with one in [0, num_layers]."""
    if start_layer is not None:
        check_int("start_layer", start_layer, 0, num_layers)
    if (start_layer is None) != (inputs.dim() == 2):
        raise ValueError("inputs must be token ids (N, L) without start_layer, or the frozen_states "
                         f"(N, L, D) with it; got shape {tuple(inputs.shape)} and start_layer={start_layer}")


def check_class_scores(logits, labels) -> None:
    """``logits`` (N, C) and one label per row, ``labels`` (N,)."""
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (N, C) and labels (N,), got {tuple(logits.shape)} and {tuple(labels.shape)}")


def check_rank_pair(a, b) -> None:
    """Two 1-D tensors of the same length >= 3 (a rank correlation of fewer says nothing)."""
    if a.dim() != 1 or a.shape != b.shape or a.numel() < 3:
        raise ValueError(f"a and b must be 1-D of the same length >= 3, got {tuple(a.shape)} and {tuple(b.shape)}")


def check_embedding_pair(before, after) -> None:
    """Two embedding matrices (N, D) of the same sentences, N >= 3."""
    if before.dim() != 2 or before.shape != after.shape or before.shape[0] < 3:
        raise ValueError(f"before and after must be (N, D) of the same shape, N >= 3, got "
                         f"{tuple(before.shape)} and {tuple(after.shape)}")
