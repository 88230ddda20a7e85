"""Test data for the exercise checkers: every registered exercise's reference solution, right
answers written differently (einsum, loops, NumPy, other input or output types) and wrong answers.

One module per checker module, named like it (``ch01_attention.py`` holds the answers for
``transformer_lib/exercises/ch01_attention.py``), each defining::

    ANSWERS = {"exercise.name": {"solution": <callable returning the answer>,
                                 "alternatives": <callable returning a list of right answers>,
                                 "wrong": <callable returning a list of wrong answers>}, ...}

They live here, not in the package, so that nothing a student imports hands them an answer. The
registry-wide tests (``tests/test_exercises_answers.py``) find every ``chNN_*.py`` module here by
itself: a new chapter's checkers are covered as soon as its answer module exists.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

KEYS = ("solution", "alternatives", "wrong")


def module_names() -> list[str]:
    """The answer modules (``chNN_*``), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("ch"))


def all_answers() -> dict[str, dict]:
    """Every module's ANSWERS merged into one dict; an exercise named twice is an error."""
    merged: dict[str, dict] = {}
    for name in module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        for exercise, entry in module.ANSWERS.items():
            if exercise in merged:
                raise ValueError(f"{exercise!r} has answers in two modules (the second: {name})")
            merged[exercise] = entry
    return merged


def solution(name: str):
    return all_answers()[name]["solution"]()


def alternatives(name: str) -> list:
    return list(all_answers()[name]["alternatives"]())


def wrong_answers(name: str) -> list:
    return list(all_answers()[name]["wrong"]())
