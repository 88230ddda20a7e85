"""Quantized weights and decoding (chapter 19, transformer_lib.quantization)."""
from __future__ import annotations

import torch



def check_quantization_args(w, bits, group_size, granularity: str = "group", any_bits: bool = False) -> None:
    """A float (N, K) weight matrix, ``bits`` 8 or 4 (2..8 with ``any_bits``), a ``group_size``
    that is an even integer >= 2 dividing K, and a granularity 'tensor', 'channel' or 'group'."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 2 or not w.is_floating_point() or w.numel() == 0:
        raise ValueError(f"w must be a non-empty 2-D float tensor (out_features, in_features), got {w.dtype} "
                         f"of shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("w must be finite (no NaN or inf): a scale computed from it would be too")
    for name, value in (("bits", bits), ("group_size", group_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    allowed = range(2, 9) if any_bits else (4, 8)
    if bits not in allowed:
        raise ValueError(f"bits must be {' or '.join(map(str, allowed)) if not any_bits else 'in 2..8'}, got {bits}")
    if not isinstance(granularity, str):
        raise TypeError(f"granularity must be a str, got {type(granularity).__name__}")
    if granularity not in ("tensor", "channel", "group"):
        raise ValueError(f"granularity must be 'tensor', 'channel' or 'group', got {granularity!r}")
    if granularity == "group" and (group_size < 2 or group_size % 2 or w.shape[1] % group_size):
        raise ValueError(f"group_size must be an even integer >= 2 that divides in_features = {w.shape[1]}, "
                         f"got {group_size}")


def check_matvec_input(x, in_features: int) -> None:
    """The input of a quantized linear layer: a float tensor whose last dimension is ``in_features``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.dim() == 0 or x.shape[-1] != in_features:
        raise ValueError(f"x must be a float tensor (..., {in_features}), got {x.dtype} of shape {tuple(x.shape)}")


def check_activations(activations) -> str:
    """How a quantized layer's input enters the kernel: 'float32' (as it is) or 'int8' (per-block codes)."""
    from .scalars import check_choice

    return check_choice("activations", activations, ("float32", "int8"))
