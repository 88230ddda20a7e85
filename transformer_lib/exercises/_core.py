"""The machinery behind :func:`check`: a registry of checkers and comparison helpers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

__all__ = ["REGISTRY", "Exercise", "NotYet", "Result", "check", "exercise", "get", "list_exercises",
           "compare_function", "compare_arrays", "compare_value"]


class NotYet(Exception):
    """Raised by a checker when the answer is not right yet; the message says what differs."""


@dataclass
class Result:
    """Outcome of one check. ``bool(result)`` is True when it passed."""
    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'NOT YET'} [{self.name}]: {self.message}"

    def _ipython_display_(self) -> None:
        """Show nothing as a cell's value: :func:`check` has already printed the verdict."""


@dataclass
class Exercise:
    """A registered exercise.

    ``checker(answer)`` returns a short success message or raises :class:`NotYet`.
    ``wrong_answers`` builds answers that must fail (used by the tests to prove the checker bites).
    """
    name: str
    checker: Callable[[Any], str | None]
    hint: str = ""
    wrong_answers: Callable[[], Sequence[Any]] = field(default=lambda: [])

    def run(self, answer) -> Result:
        if _is_stub(answer):
            return Result(self.name, False, "replace the stub with your answer, then run this cell again.")
        try:
            message = self.checker(answer) or "all test inputs match."
        except NotYet as err:
            hint = f" Hint: {self.hint}" if self.hint else ""
            return Result(self.name, False, f"{err}.{hint}".replace("..", "."))
        except NotImplementedError:
            return Result(self.name, False, "your function still raises NotImplementedError: fill it in.")
        except Exception as err:  # the reader's code crashed: say so, do not crash the notebook
            return Result(self.name, False, f"your answer raised {type(err).__name__}: {err}")
        return Result(self.name, True, message)


REGISTRY: dict[str, Exercise] = {}
HISTORY: list[Result] = []


def exercise(name: str, hint: str = "", wrong_answers: Callable[[], Sequence[Any]] | None = None):
    """Decorator registering ``checker`` under ``name``."""
    def register(checker):
        if name in REGISTRY:
            raise ValueError(f"exercise {name!r} is registered twice")
        REGISTRY[name] = Exercise(name, checker, hint, wrong_answers or (lambda: []))
        return checker
    return register


def get(name: str) -> Exercise:
    if name not in REGISTRY:
        raise ValueError(f"no exercise named {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def list_exercises(prefix: str = "") -> list[str]:
    return sorted(n for n in REGISTRY if n.startswith(prefix))


def check(name: str, answer, *, quiet: bool = False) -> Result:
    """Check ``answer`` for exercise ``name``; print the verdict and return it as a :class:`Result`."""
    result = get(name).run(answer)
    HISTORY.append(result)
    if not quiet:
        print(result)
    return result


def _is_stub(answer) -> bool:
    return answer is None or answer is Ellipsis


# -- comparison helpers used by the checkers ---------------------------------------------------

def _to_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def compare_arrays(got, expected, what: str = "your result", atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Raise NotYet describing the first difference (shape, dtype kind, values) — never the values."""
    if got is None:
        raise NotYet(f"{what} is None: did you forget to return it?")
    g, e = _to_numpy(got), _to_numpy(expected)
    if g.shape != e.shape:
        raise NotYet(f"{what} has shape {tuple(g.shape)}, expected shape {tuple(e.shape)}")
    if e.dtype == bool and g.dtype != bool:
        raise NotYet(f"{what} should be a boolean tensor (True = may attend), got dtype {g.dtype}")
    if e.dtype == bool:
        wrong = int((g != e).sum())
        if wrong:
            raise NotYet(f"{what} differs in {wrong} of {e.size} entries")
        return
    if not np.all(np.isfinite(g)):
        raise NotYet(f"{what} contains NaN or inf")
    if not np.allclose(g, e, atol=atol, rtol=rtol):
        diff = float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
        raise NotYet(f"{what} differs: largest absolute difference {diff:.3g} (tolerance {atol:g})")


def compare_function(answer: Callable, reference: Callable, inputs: Iterable[tuple], what: str = "output",
                     atol: float = 1e-5, describe: Callable[[tuple], str] | None = None) -> str:
    """Run ``answer(*args)`` and ``reference(*args)`` on every input; raise NotYet on the first mismatch."""
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    n = 0
    for args in inputs:
        n += 1
        label = describe(args) if describe else f"test input #{n}"
        expected = reference(*args)
        got = answer(*args)
        try:
            compare_arrays(got, expected, what=f"{what} for {label}", atol=atol)
        except NotYet:
            raise
    return f"matches the library on all {n} test inputs."


def compare_value(answer, expected: float, what: str = "your value", rtol: float = 1e-3, atol: float = 0.0) -> str:
    """Numeric answer check that says 'too high' / 'too low' but not the value."""
    try:
        value = float(answer)
    except (TypeError, ValueError):
        raise NotYet(f"{what} should be a number, got {type(answer).__name__}") from None
    if abs(value - expected) > max(atol, rtol * abs(expected)):
        raise NotYet(f"{what} is too {'high' if value > expected else 'low'}")
    return f"{what} is right."
