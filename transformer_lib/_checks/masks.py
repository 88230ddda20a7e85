"""Boolean attention masks (transformer_lib.masks): lengths, masks to combine or translate, block
layouts."""
from __future__ import annotations

import torch

from .scalars import check_int, check_tensor


def check_bool_mask(name: str, mask, what: str = "a boolean torch.Tensor", dims: int | None = None) -> None:
    """``mask`` must be a boolean tensor in the library's convention (True = may attend), with
    ``dims`` dimensions when given. Not a tensor is a TypeError, any other dtype a ValueError."""
    check_tensor(name, mask, what)
    if dims is not None and (mask.dim() != dims or mask.dtype != torch.bool):
        raise ValueError(f"{name} must be a {dims}-D boolean mask (True = may attend), got shape "
                         f"{tuple(mask.shape)}, dtype {mask.dtype}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be boolean (True = may attend), got dtype {mask.dtype}")


def check_bool_masks(masks) -> None:
    """Masks to AND together: each None or a boolean tensor, their shapes broadcasting together."""
    for m in masks:
        if m is not None:
            check_bool_mask("masks", m, "boolean tensors or None")
    shapes = [tuple(m.shape) for m in masks if m is not None]
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from None


def check_torch_mask(name: str, mask, dims: int | None = None) -> None:
    """A mask in ``nn.MultiheadAttention``'s convention: boolean (True = blocked) or additive float
    (0 keeps, -inf blocks), without NaN (neither, and it would silently become "blocked")."""
    check_tensor(name, mask, "a torch.Tensor" if dims != 2 else "a torch.Tensor (B, L_k)")
    if dims is not None and mask.dim() != dims:
        raise ValueError(f"{name} must be (B, L_k), got shape {tuple(mask.shape)}")
    if mask.is_floating_point() and torch.isnan(mask).any():
        raise ValueError(f"{name} holds NaN: an additive mask is 0 (keep) or -inf (block)")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(f"{name} must be a boolean or float (additive) mask, got dtype {mask.dtype}")


def check_sequence_lengths(lengths, max_len, device=None) -> tuple[torch.Tensor, int]:
    """True sequence lengths (a list, range or 1-D integer tensor, at least one, each >= 0) and
    ``max_len`` (None: the longest; else an integer >= every length). Returns (lengths as a
    tensor on ``device``, max_len)."""
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, (torch.Tensor, list, tuple, range)):
        raise TypeError(f"lengths must be a list or 1-D tensor of integers, got {type(lengths).__name__}")
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"lengths must be 1-D (one length per sequence, at least one), got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
    if (lengths < 0).any():
        raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
    if max_len is None:
        return lengths, int(lengths.max())
    check_int("max_len", max_len, 0)
    if (lengths > max_len).any():
        raise ValueError(f"lengths: a length exceeds max_len={max_len}: {lengths.tolist()}")
    return lengths, max_len


def check_bigbird_blocks(num_blocks, window_blocks, global_blocks, random_blocks, seed) -> None:
    """BigBird's block counts: >= 1 blocks and window, >= 0 global and random blocks, no more
    global blocks than blocks, a seed >= 0."""
    check_int("num_blocks", num_blocks)
    check_int("window_blocks", window_blocks)
    check_int("global_blocks", global_blocks, 0)
    check_int("random_blocks", random_blocks, 0)
    check_int("seed", seed, 0)
    if global_blocks > num_blocks:
        raise ValueError(f"global_blocks={global_blocks} exceeds num_blocks={num_blocks}")


def check_layout_to_mask(layout, block_size, L) -> None:
    """A square boolean (nb, nb) block layout, a block size >= 1 and ``L`` None or in
    [1, nb * block_size] (the token mask is cut to it)."""
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool or layout.dim() != 2 \
            or layout.shape[0] != layout.shape[1]:
        got = f"{layout.dtype} {tuple(layout.shape)}" if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise ValueError(f"layout must be a square boolean (nb, nb) tensor, got {got}")
    check_int("block_size", block_size)
    if L is not None and not (isinstance(L, int) and 1 <= L <= layout.shape[0] * block_size):
        raise ValueError(f"L must lie in [1, {layout.shape[0] * block_size}] for this layout, got {L!r}")
