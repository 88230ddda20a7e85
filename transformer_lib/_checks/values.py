"""Generic values that are not numbers: strings, paths, callables (to merge with ``scalars``)."""
from __future__ import annotations

from pathlib import Path


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


def check_callable(name: str, value, what: str) -> None:
    """``value`` must be callable; ``what`` shows how it is called (``"encode(text) -> token ids"``)."""
    if not callable(value):
        raise TypeError(f"{name} must be a callable: {what}")


def check_instance(name: str, value, types, what: str) -> None:
    """``value`` must be an instance of ``types`` (a class the caller passes: ``_checks`` imports
    nothing above it); ``what`` names it for the reader (``"a BertEncoder (load_minilm().model)"``)."""
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
