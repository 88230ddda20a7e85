"""Figures (transformer_lib.plotting): alt-text descriptions, weight maps, masks, tick labels."""
from __future__ import annotations

import numpy as np

from .scalars import check_int


def check_description(description) -> None:
    """A figure's alt text: a str of at least four words saying what the figure shows."""
    if not isinstance(description, str):
        raise TypeError(f"description must be a str (a sentence saying what the figure shows), got "
                        f"{type(description).__name__}")
    if len(description.split()) < 4:
        raise ValueError("description must be a sentence saying what the figure shows (at least four words), "
                         f"got {description!r}")


def check_labels(name: str, labels, size: int) -> None:
    """Tick labels: None, or one string per row/column (a bare string would be one per character)."""
    if labels is None:
        return
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
        raise TypeError(f"{name} must be a list of str, one per row or column, got {type(labels).__name__}")
    if len(labels) != size:
        raise ValueError(f"{name} must have one label per row or column ({size}), got {len(labels)}")


def check_weight_map(w: np.ndarray, x_labels, y_labels) -> None:
    """A weight map (L_q, L_k) of numbers, non-empty, with labels that fit its columns and rows."""
    if w.ndim != 2 or w.size == 0:
        raise ValueError(f"weights must be 2-D (L_q, L_k) and non-empty, got shape {w.shape}")
    if not np.issubdtype(w.dtype, np.number) and w.dtype != bool:
        raise ValueError(f"weights must be numbers, got dtype {w.dtype}")
    check_labels("x_labels", x_labels, w.shape[1])
    check_labels("y_labels", y_labels, w.shape[0])


def check_mask_map(m: np.ndarray, labels) -> None:
    """A mask to draw: (L_q, L_k), non-empty, boolean or 0/1; square when ``labels`` name both axes."""
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"mask must be 2-D (L_q, L_k) and non-empty, got shape {m.shape}")
    if m.dtype != bool and not (np.issubdtype(m.dtype, np.number) and np.isin(m, (0, 1)).all()):
        raise ValueError(f"mask must be boolean (True = may attend) or 0/1, got dtype {m.dtype}")
    if labels is not None and m.shape[0] != m.shape[1]:
        raise ValueError(f"labels name both axes, so the mask must be square, got shape {m.shape}")
    check_labels("labels", labels, m.shape[1])


def check_map_grid(maps, titles, ncols) -> int:
    """A non-empty list of maps, ``ncols >= 1`` and one title per map when given; returns the count."""
    if isinstance(maps, (str, bytes)) or not hasattr(maps, "__len__"):
        raise TypeError(f"maps must be a list of (L_q, L_k) maps, got {type(maps).__name__}")
    n = len(maps)
    if n == 0:
        raise ValueError("maps must hold at least one map")
    check_int("ncols", ncols)
    if titles is not None and len(titles) != n:
        raise ValueError(f"titles must have one title per map ({n}), got {len(titles)}")
    return n
