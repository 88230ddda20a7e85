"""The expected values some checkers compare with, computed from the tests' reference solutions.

Where the library has no public function for an exercise's answer, its checker compares with
numbers stored in ``transformer_lib/exercises/expected.json`` (numbers only, no code). This module
says which exercises those are and on which inputs (the checker modules' own input builders),
recomputes the numbers from the solutions in this folder, and rewrites the file::

    .venv/bin/python tests/exercise_answers/stored.py

``tests/test_exercises_answers.py`` fails when the stored numbers and the solutions disagree.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from transformer_lib.exercises import ch00_intro, ch01_attention, ch07_layernorm, chA_random_forests
from transformer_lib.exercises._core import preserved_rng, to_numpy

PATH = Path(ch00_intro.__file__).with_name("expected.json")

INPUTS = {  # exercise -> the inputs its checker calls the answer with, in order
    "intro.mean_of_squares": ch00_intro._inputs,
    "attention.scores": lambda: ch01_attention._qkv_inputs(with_values=False),
    "attention.entropy": ch01_attention._entropy_inputs,
    "layernorm.pre_ln": ch07_layernorm._pre_ln_cases,
    "forests.oob_fraction": lambda: [(n,) for n in chA_random_forests._OOB_SIZES],
}


def compute(name: str) -> list[np.ndarray]:
    """The tests' reference solution of ``name`` on its checker's inputs (built as the checker builds them)."""
    if __package__:
        from . import solution
    else:  # run as a script
        sys.path.insert(0, str(Path(__file__).parents[1]))
        from exercise_answers import solution
    answer = solution(name)
    with preserved_rng():
        return [to_numpy(answer(*args)).astype(np.float64) for args in INPUTS[name]()]


def write() -> None:
    data = {name: [np.round(values, 9).tolist() for values in compute(name)] for name in sorted(INPUTS)}
    PATH.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    write()
    print(f"wrote {PATH}")
