"""Evaluation (chapter 30, transformer_lib.evaluation): multiple-choice items, per-item outcomes,
the normalisations of a choice's log-likelihood, n-gram sizes and confidences."""
from __future__ import annotations

import numbers

from .scalars import check_int


def check_choice_item(context, choices, gold) -> None:
    """One multiple-choice question: a non-empty ``context`` string, at least two distinct
    non-empty choice strings, and ``gold`` the index of the right one."""
    if not isinstance(context, str):
        raise TypeError(f"context must be a str, got {type(context).__name__}")
    if not context:
        raise ValueError("context must be a non-empty string (the question the choices continue)")
    if isinstance(choices, str) or not isinstance(choices, (list, tuple)):
        raise TypeError(f"choices must be a list or tuple of str, got {type(choices).__name__}")
    if len(choices) < 2 or any(not isinstance(c, str) or not c for c in choices):
        raise ValueError(f"choices must hold at least two non-empty strings, got {choices!r}")
    if len(set(choices)) != len(choices):
        raise ValueError(f"choices must be distinct, got {choices!r}")
    check_int("gold", gold, 0, len(choices) - 1)


def check_encode(encode) -> None:
    """``encode``: a callable from text to a list of token ids (a tokenizer's encode method)."""
    if not callable(encode):
        raise TypeError(f"encode must be a callable text -> list of token ids, got {type(encode).__name__}")


def check_outcomes(name: str, values, length: int | None = None) -> list[float]:
    """Per-item outcomes: a non-empty sequence of 0/1 (bools, ints or floats equal to 0 or 1);
    returned as floats. ``length``: the number of items it must have (a paired comparison)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of 0/1 outcomes (one per item), got {type(values).__name__}")
    out = []
    for v in (values.tolist() if hasattr(values, "tolist") else values):
        if not isinstance(v, numbers.Real) or float(v) not in (0.0, 1.0):
            raise ValueError(f"{name} must hold only 0/1 outcomes (right / wrong), got {v!r}")
        out.append(float(v))
    if not out:
        raise ValueError(f"{name} must hold at least one item")
    if length is not None and len(out) != length:
        raise ValueError(f"{name} must have one outcome per item of the other model ({length}), got {len(out)}")
    return out


def check_real_values(name: str, values, length: int | None = None) -> list[float]:
    """Per-item real numbers (confidences, scores): finite; returned as floats."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    out = []
    for v in (values.tolist() if hasattr(values, "tolist") else values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v or abs(float(v)) == float("inf"):
            raise ValueError(f"{name} must hold finite numbers, got {v!r}")
        out.append(float(v))
    if not out:
        raise ValueError(f"{name} must hold at least one number")
    if length is not None and len(out) != length:
        raise ValueError(f"{name} must have {length} values (one per item), got {len(out)}")
    return out


def check_confidences(values, length: int | None = None) -> list[float]:
    """Probabilities in [0, 1], one per item."""
    out = check_real_values("confidence", values, length)
    if any(not 0.0 <= v <= 1.0 for v in out):
        raise ValueError("confidence must hold probabilities in [0, 1]")
    return out


def check_ngram_size(n) -> int:
    """The n of an n-gram: a positive integer."""
    return check_int("n", n, 1)
