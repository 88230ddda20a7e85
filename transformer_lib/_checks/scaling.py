"""Scaling laws (transformer_lib.scaling): the runs a law is fitted to, and the models it counts."""
from __future__ import annotations

import numpy as np


def check_countable_config(config) -> None:
    """A decoder-only configuration whose training FLOPs the cost model counts: plain multi-head
    attention and a two-matrix FFN in every block (grouped-query, latent attention, SwiGLU and
    experts change the products and are refused by name)."""
    for name, allowed in (("attention", "mha"), ("num_experts", None), ("ffn", True)):
        if getattr(config, name) != allowed:
            raise ValueError(f"{name}: the FLOP count covers {name}={allowed!r} only, got {getattr(config, name)!r}")
    if config.activation == "swiglu":
        raise ValueError("activation: the FLOP count covers two-matrix FFNs (relu, gelu), got 'swiglu'")
    if config.num_kv_heads not in (None, config.num_heads):
        raise ValueError(f"num_kv_heads: the FLOP count covers num_kv_heads = num_heads only, got {config.num_kv_heads}")


def check_positive_array(name: str, values, length: int | None = None, length_name: str = "") -> np.ndarray:
    """A 1-D list or array of finite numbers > 0 (parameter counts, token counts, losses), of
    ``length`` when given (the same length as ``length_name``); returned as float64."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a list or array of numbers, got {type(values).__name__}")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must hold numbers only") from None
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must hold finite numbers > 0")
    if length is not None and len(arr) != length:
        raise ValueError(f"{name} must have one value per entry of {length_name} ({length}), got {len(arr)}")
    return arr


def check_grid(name: str, values) -> np.ndarray:
    """A non-empty 1-D list of finite starting values for one parameter of the fit."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a list of starting values, got {type(values).__name__}")
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or len(arr) == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a non-empty list of finite starting values")
    return arr
