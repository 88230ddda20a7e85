"""The generic rules: numbers, flags, strings, paths, callables and the shape of a tensor (counts,
sizes, rates, temperatures, choices among names, tensors and their feature sizes)."""
from __future__ import annotations

import numbers
from pathlib import Path

import torch


def check_int(name: str, value, low: int = 1, high: int | None = None) -> int:
    """``value`` must be an integer (a Python or NumPy integer, not a bool) in ``[low, high]``;
    returned as an int. The one rule for every count, size and index. A non-number is a
    TypeError; a bool, a fraction or a value out of range a ValueError (2.5 trees, or True layers,
    are values a caller meant as numbers). A symbolic size while ``torch.export`` traces (a
    ``torch.SymInt``, such as a prompt's length) passes as it is: its range is the exporter's to
    check, so an exported model keeps the checks of its forward."""
    if isinstance(value, torch.SymInt):
        return value
    if not isinstance(value, numbers.Number):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or \
            (high is not None and value > high):
        if high is not None:
            what = f"an integer in [{low}, {high}]"
        else:
            what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def check_probability(name: str, value) -> None:
    """``value`` must be a real number in [0, 1] (a dropout rate, a top-p mass, ...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def check_number(name: str, value, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """``value`` must be a finite real number (Python or NumPy, not a bool) within the bounds
    (``low_open`` / ``high_open`` exclude the end); returned as a float. The one rule for every
    real argument (a rate, a temperature, an epsilon: ``check_number("eps", eps, 0,
    low_open=True)``). NaN and inf are refused: they would compare False with every bound and
    pass a check written as ``if x < low``. A non-number is a TypeError, a number out of bounds a
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    too_low = low is not None and (v <= low if low_open else v < low)
    too_high = high is not None and (v >= high if high_open else v > high)
    if v != v or abs(v) == float("inf") or too_low or too_high:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else (f"< {high}" if high_open else f"<= {high}")
        what = " and ".join(s for s in (lo, hi) if s)
        raise ValueError(f"{name} must be a finite number{' ' + what if what else ''}, got {value!r}")
    return v


def check_bool(name: str, value) -> None:
    """``value`` must be True or False (a string such as ``"no"`` would be truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_choice(name: str, value, allowed) -> str:
    """``value`` must be one of ``allowed`` (a kernel name, a task, a model family)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(map(repr, allowed))}, got {type(value).__name__}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_str_list(name: str, value) -> tuple[str, ...]:
    """A list or tuple of strings (special tokens, labels); returned as a tuple. A bare string is a
    TypeError: iterating over ``"<eos>"`` would give five one-character strings."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of str, got {type(value).__name__} {value!r}")
    for s in value:
        if not isinstance(s, str):
            raise TypeError(f"each entry of {name} must be a str, got {type(s).__name__} {s!r}")
    return tuple(value)


def check_divisible(name: str, value: int, by: int, by_name: str = "", why: str = "") -> None:
    """``value`` (a size already checked an integer) must be a multiple of ``by``, the argument
    ``by_name`` if it is one: heads that split a width, a width split over ranks, pairs (``by=2``,
    for sin/cos or RoPE: "must be even"). ``why`` ends the message."""
    if value % by:
        if by == 2 and not by_name:
            raise ValueError(f"{name} must be even{why}, got {value}")
        raise ValueError(f"{name} = {value} must be divisible by {f'{by_name} ({by})' if by_name else by}{why}")


def check_generator(name: str, value) -> None:
    """None or a ``torch.Generator`` (a seed passed where a generator belongs is a TypeError)."""
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(value).__name__}")


def check_folder(name: str, path) -> None:
    """The folder a file is to be written into (``path``'s parent) must exist."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise ValueError(f"{name}: folder {str(folder)!r} does not exist")


def check_callable(name: str, value, what: str | None = None) -> None:
    """``value`` must be callable (a function to time, trace or run on every rank); ``what``, if
    given, shows how it is called (``"encode(text) -> token ids"``)."""
    if not callable(value):
        how = f": {what}" if what else ""
        raise TypeError(f"{name} must be a callable{how}, got {type(value).__name__}")


def check_str(name: str, value, what: str = "") -> str:
    """``value`` must be a str (``what``, e.g. ``" (a chapter's MyST source)"``, says which);
    anything else is a TypeError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{what}, got {type(value).__name__}")
    return value


def check_path(name: str, value, what: str = "a path") -> Path:
    """``value`` must be a str or ``pathlib.Path``; returned as a Path. Anything else is a TypeError."""
    if not isinstance(value, (str, Path)):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return Path(value)


def check_instance(name: str, value, types, what: str) -> None:
    """``value`` must be an instance of ``types`` (a class the caller passes: ``_checks`` imports
    nothing above it); ``what`` names it for the reader (``"a BertEncoder (load_minilm().model)"``)."""
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")


def check_tensor(name: str, value, what: str = "a torch.Tensor") -> torch.Tensor:
    """``value`` must be a ``torch.Tensor`` (a list or an array is a TypeError); ``what`` names the
    kind the message asks for ("a boolean torch.Tensor", "a torch.Tensor (B, L_k)")."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def check_features(name: str, x, size: int | None = None, dims: int | None = None, min_dims: int = 1) -> None:
    """The input of a layer built for ``size`` features: a tensor (..., size), with exactly ``dims``
    dimensions when given (at least ``min_dims``). The message shows the layout expected, (B, L, D)
    for ``dims=3`` and (..., D) otherwise, and the last dim. Only the (static) shape is read, so it holds while
    ``torch.export`` traces."""
    check_tensor(name, x)
    if x.dim() < min_dims or (dims is not None and x.dim() != dims) or (size is not None and x.shape[-1] != size):
        last = "D" if size is None else size
        layout = f"(B, L, {last})" if dims == 3 else f"(..., {last})"
        expected = "" if size is None else f" (expected last dim {size})"
        raise ValueError(f"{name} must be {layout}{expected}, got shape {tuple(x.shape)}")


def check_same_batch(name: str, batch: int, other_name: str, other: int) -> None:
    """Two tensors that are read row by row together (a target and its memory, a query and its
    keys) must have the same batch size."""
    if batch != other:
        raise ValueError(f"batch sizes differ: {name} {batch} vs {other_name} {other}")
