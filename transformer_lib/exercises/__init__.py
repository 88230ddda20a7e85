"""Auto-checked exercises.

Every exercise has a name (``"chapter.exercise"``) and a checker that runs the reader's answer
on several inputs and compares it with the library's own functions (or, where the library has
none, with a property the right answer must have or with stored numbers). The package holds no
solutions: the tests keep them, with the wrong answers each checker must reject, in
``tests/exercise_answers/``. Call it from a notebook as::

    from transformer_lib.exercises import check
    check("attention.scores", my_scores)

It prints ``PASS [name]: ...`` or ``NOT YET [name]: <what differs>. Hint: ...``; it never prints
the expected answer. A stub (``...``, ``None``, or a function raising ``NotImplementedError``)
reports "not yet" instead of crashing, so student copies of the notebooks run top to bottom.

Checkers live in one module per chapter (``chNN_*.py`` beside this file) and register themselves
with :func:`exercise`; importing this package imports them all.
"""
from ._core import (REGISTRY, Exercise, NotYet, Result, check, compare_arrays, compare_function,
                    compare_value, exercise, get, list_exercises, preserved_rng, require_function, to_int,
                    to_number, to_numpy)
from . import _registry_loader  # noqa: F401  (imports every chNN_*.py so their checkers register)

__all__ = ["check", "exercise", "NotYet", "Result", "Exercise", "REGISTRY", "get", "list_exercises",
           "compare_function", "compare_arrays", "compare_value", "preserved_rng", "require_function",
           "to_numpy", "to_number", "to_int"]
