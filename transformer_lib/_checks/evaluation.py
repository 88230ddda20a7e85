"""Evaluation (chapter 30, transformer_lib.evaluation): multiple-choice items, per-item outcomes,
the normalisations of a choice's log-likelihood, n-gram sizes and confidences."""
from __future__ import annotations

import math
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


def _per_item(name: str, values, length: int | None, *, sequence_of: str, is_valid, invalid: str,
              item: str, per_item: str) -> list[float]:
    """A non-empty sequence (list, tuple, tensor, array) of numbers each accepted by ``is_valid``,
    returned as floats; ``length``, when given, is the number of items it must have."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of {sequence_of}, got {type(values).__name__}")
    out = []
    for v in (values.tolist() if hasattr(values, "tolist") else values):
        if not is_valid(v):
            raise ValueError(f"{name} must hold {invalid}, got {v!r}")
        out.append(float(v))
    if not out:
        raise ValueError(f"{name} must hold at least one {item}")
    if length is not None and len(out) != length:
        raise ValueError(f"{name} must have {per_item.format(length=length)}, got {len(out)}")
    return out


def check_outcomes(name: str, values, length: int | None = None) -> list[float]:
    """Per-item outcomes: a non-empty sequence of 0/1 (bools, ints or floats equal to 0 or 1);
    returned as floats. ``length``: the number of items it must have (a paired comparison)."""
    return _per_item(name, values, length, sequence_of="0/1 outcomes (one per item)",
                     is_valid=lambda v: isinstance(v, numbers.Real) and float(v) in (0.0, 1.0),
                     invalid="only 0/1 outcomes (right / wrong)", item="item",
                     per_item="one outcome per item of the other model ({length})")


def check_real_values(name: str, values, length: int | None = None) -> list[float]:
    """Per-item real numbers (confidences, scores): finite; returned as floats."""
    return _per_item(name, values, length, sequence_of="numbers",
                     is_valid=lambda v: (not isinstance(v, bool) and isinstance(v, numbers.Real)
                                         and math.isfinite(float(v))),
                     invalid="finite numbers", item="number", per_item="{length} values (one per item)")


def check_confidences(values, length: int | None = None) -> list[float]:
    """Probabilities in [0, 1], one per item."""
    out = check_real_values("confidence", values, length)
    if any(not 0.0 <= v <= 1.0 for v in out):
        raise ValueError("confidence must hold probabilities in [0, 1]")
    return out


def check_ngram_size(n) -> int:
    """The n of an n-gram: a positive integer."""
    return check_int("n", n, 1)
