"""The shipped corpora and checkpoint (transformer_lib.data): folders of chapters, paragraph splits."""
from __future__ import annotations

from pathlib import Path

from .scalars import check_int
from .scalars import check_path, check_str


def check_chapters_dir(chapters_dir) -> Path:
    """An existing folder (a str or Path) holding the chapters' Markdown."""
    path = check_path("chapters_dir", chapters_dir)
    if not path.is_dir():
        raise ValueError(f"chapters_dir must be a folder of chapters, got {str(chapters_dir)!r}")
    return path


def check_paragraph_split(text, val_every, paragraphs: int | None = None) -> None:
    """``text`` a str, ``val_every`` an integer >= 2 and, once counted, at least ``val_every``
    paragraphs (else the validation part would be empty)."""
    check_str("text", text)
    check_int("val_every", val_every, 2)
    if paragraphs is not None and paragraphs < val_every:
        raise ValueError(f"text has {paragraphs} paragraphs: fewer than val_every={val_every}, "
                         "so the validation part would be empty")


def check_checkpoint_path(path) -> Path:
    """An existing checkpoint file (a str or Path)."""
    path = check_path("path", path, "a path to a checkpoint")
    if not path.exists():
        raise ValueError(f"no checkpoint at {path}: run `python benchmarks/train_gpt.py` to make it")
    return path
