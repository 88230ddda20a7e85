"""Circuits (chapter 24): prompt pairs, answer tokens, layers, positions and sets of heads."""
from __future__ import annotations

import torch

from .scalars import check_choice, check_int, check_tensor
from .tokens import check_token_ids


def check_decoder(model) -> None:
    """``model`` must be a decoder of the library: an ``nn.Module`` with ``.blocks``, ``.embed``
    and a final ``.norm`` (the reader's pre-norm GPT, SmolLM2, the same DecoderOnlyLM)."""
    import torch.nn as nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    missing = [a for a in ("blocks", "embed", "norm") if getattr(model, a, None) is None]
    if missing:
        raise ValueError(f"model must be a pre-norm decoder with .blocks, .embed and a final .norm; "
                         f"{type(model).__name__} has no {', '.join('.' + m for m in missing)}")


def check_answers(name: str, ids, batch: int, vocab_size: int) -> torch.Tensor:
    """One answer token id per prompt: an int, or a list / 1-D tensor of ``batch`` ints in the
    vocabulary. Returned as a (batch,) long tensor."""
    if isinstance(ids, bool):
        raise TypeError(f"{name} must be a token id or one id per prompt, got a bool")
    if isinstance(ids, int):
        ids = [ids] * batch
    t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(ids)
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        raise ValueError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    t = t.reshape(-1) if t.dim() == 0 else t
    if t.dim() != 1 or t.numel() != batch:
        raise ValueError(f"{name} must give one token id per prompt ({batch}), got shape {tuple(t.shape)}")
    if int(t.min()) < 0 or int(t.max()) >= vocab_size:
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(t.min())} to {int(t.max())}")
    return t.long()


def check_prompt_pair(clean, corrupted, vocab_size: int) -> None:
    """``clean`` and ``corrupted`` must be token ids of the same shape (B, L): patching moves an
    activation between the two runs position by position, so they must line up; and they must
    differ somewhere, or there is nothing to restore."""
    check_token_ids(clean, vocab_size, "clean")
    check_token_ids(corrupted, vocab_size, "corrupted")
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must have the "
                         "same shape (B, L): pick corruptions with as many tokens as the clean prompts")
    if bool((clean == corrupted).all()):
        raise ValueError("clean and corrupted must differ: with the same prompts there is nothing to restore")


def check_index_list(name: str, values, size: int) -> list[int]:
    """``None`` (all of ``0 .. size-1``) or a non-empty list of distinct ints in [-size, size)."""
    if values is None:
        return list(range(size))
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of integers, got {type(values).__name__}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        check_int(name, v, -size, size - 1)
    out = [v % size for v in values]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat an index, got {values!r}")
    return out


def check_heads(heads, num_layers: int, num_heads: int) -> list[tuple[int, int]]:
    """A non-empty list of distinct ``(layer, head)`` pairs that exist in the model."""
    if isinstance(heads, (str, bytes)) or not hasattr(heads, "__iter__"):
        raise TypeError(f"heads must be a list of (layer, head) pairs, got {type(heads).__name__}")
    heads = list(heads)
    if not heads:
        raise ValueError("heads must name at least one (layer, head) pair")
    out = []
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"heads must be (layer, head) pairs, got {pair!r}")
        check_int("heads (layer)", pair[0], 0, num_layers - 1)
        check_int("heads (head)", pair[1], 0, num_heads - 1)
        out.append((int(pair[0]), int(pair[1])))
    if len(set(out)) != len(out):
        raise ValueError(f"heads must not repeat a head, got {heads!r}")
    return out


def check_ablation(how: str) -> None:
    """How to remove a head: ``"mean"`` (its mean output over the reference prompts) or ``"zero"``."""
    check_choice("how", how, ("mean", "zero"))


def check_final_logits(logits) -> None:
    """Logits whose last position is read: a float tensor (B, L, V) or (B, V)."""
    check_tensor("logits", logits)
    if logits.dim() not in (2, 3) or not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be float (B, L, V) or (B, V), got {logits.dtype} {tuple(logits.shape)}")


def check_score_values(value, clean, corrupted) -> None:
    """Three metric values (numbers or tensors) to rescale, the clean and corrupted ones apart:
    their difference is the divisor."""
    for name, v in (("value", value), ("clean", clean), ("corrupted", corrupted)):
        if isinstance(v, bool) or not isinstance(v, (int, float, torch.Tensor)):
            raise TypeError(f"{name} must be a number or a tensor, got {type(v).__name__}")
    if bool(torch.as_tensor(clean - corrupted).abs().min() < 1e-6):
        raise ValueError("clean and corrupted must differ: with the same metric there is nothing to restore")


def check_head_sets(head_sets, num_layers: int, num_heads: int) -> list[list[tuple[int, int]]]:
    """A list of sets of heads (a circuit and its controls), each checked by :func:`check_heads`."""
    if not isinstance(head_sets, (list, tuple)):
        raise TypeError(f"head_sets must be a list of lists of (layer, head) pairs, got {type(head_sets).__name__}")
    return [check_heads(heads, num_layers, num_heads) for heads in head_sets]


def check_reference(reference, tokens, vocab_size: int) -> None:
    """The prompts whose mean activations replace a head: token ids with as many positions as
    ``tokens`` (the mean is taken per position)."""
    check_token_ids(reference, vocab_size, "reference")
    if reference.shape[1] != tokens.shape[1]:
        raise ValueError(f"reference must have as many positions as tokens ({tokens.shape[1]}), "
                         f"got {reference.shape[1]}")
