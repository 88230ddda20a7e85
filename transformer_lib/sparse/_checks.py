"""Input checks for the sparse kernels: each public function calls them once, at its entry, and
hands checked values to private cores that check nothing (so no input is checked twice)."""
from __future__ import annotations

from typing import Sequence

import torch

from .._checks import check_positive


def positive_int(name: str, value) -> int:
    """``value`` if it is an int >= 1 (a bool is not), else a ValueError naming ``name``."""
    check_positive(name, value)
    return value


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """Self-attention shapes: q, k, v all (B, H, L, d) with the same B, H and L; returns (B, H, L, d_k)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, L, d_k), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError("sparse self-attention needs q, k, v with the same (B, H, L); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, L, d_k = q.shape
    if L < 1:
        raise ValueError("the sequence length L must be >= 1")
    return B, H, L, d_k


def check_key_mask(key_mask: torch.Tensor | None, B: int, L: int, device) -> torch.Tensor | None:
    """Accept (B, L) or the (B, 1, 1, L) of :func:`~transformer_lib.masks.padding_mask`; return (B, L)."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise ValueError(f"key_mask must be a boolean tensor with True = real token, got {got}")
    if key_mask.dim() == 4 and key_mask.shape[1:3] == (1, 1):
        key_mask = key_mask[:, 0, 0, :]  # (B, 1, 1, L) -> (B, L)
    if key_mask.dim() != 2 or key_mask.shape[1] != L or key_mask.shape[0] not in (1, B):
        raise ValueError(f"key_mask must have shape (B, L) = ({B}, {L}) or (B, 1, 1, L), "
                         f"got {tuple(key_mask.shape)}")
    return key_mask.to(device).expand(B, L)


def check_kernel(kernel: str, allowed: Sequence[str]) -> str:
    if kernel not in allowed:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, allowed))}, got {kernel!r}")
    return kernel


def check_attention_call(q, k, v, key_mask, **sizes: int):
    """The checks every sparse attention call shares: q, k, v; each named size >= 1; the key
    mask. Returns (B, H, L, key_mask as (B, L) or None)."""
    B, H, L, _ = check_qkv(q, k, v)
    for name, value in sizes.items():
        positive_int(name, value)
    return B, H, L, check_key_mask(key_mask, B, L, q.device)
