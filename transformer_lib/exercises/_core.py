"""The machinery behind :func:`check`: a registry of checkers and comparison helpers."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import numbers
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

__all__ = ["REGISTRY", "Exercise", "NotYet", "Result", "check", "exercise", "get", "list_exercises",
           "compare_function", "compare_arrays", "compare_number_cases", "compare_value", "expected_values",
           "module_with", "preserved_rng", "require_function", "seed_cpu", "to_numpy", "to_number", "to_int"]


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
    """A registered exercise: its name, its checker and a hint shown with a "not yet".

    ``checker(answer)`` returns a short success message or raises :class:`NotYet`. It calls the
    answer with data (tensors, arrays, numbers, strings, bytes, lists and dicts of them) or, where
    the exercise is about one, a library object (a layer, a model, ``cost.Level`` records), and computes what it expects from the library's public functions, from a property the right
    answer must have, or from numbers stored in ``expected.json``: no exercise carries its solution,
    so nothing a student imports hands them an answer. The reference solutions, right answers
    written differently and the wrong answers every checker must reject are test data, in
    ``tests/exercise_answers/``.

    :meth:`run` calls the checker inside :func:`preserved_rng`: a check never changes the reader's
    next random numbers (torch, NumPy, ``random``), and the checker sees the same seeds every time.
    """
    name: str
    checker: Callable[[Any], str | None]
    hint: str = ""
    call: str = ""  # the call the answer must support, e.g. "step(running_max, running_sum, scores)"

    def run(self, answer) -> Result:
        if _is_stub(answer):
            return Result(self.name, False, "replace the stub with your answer, then run this cell again.")
        try:
            require_function(answer, self.call)  # every exercise asks for a function
            with preserved_rng():
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


def exercise(name: str, hint: str = "", call: str = ""):
    """Decorator registering ``checker`` under ``name``; ``call`` names the function the reader
    writes (shown when the answer is not a function at all)."""
    def register(checker):
        if name in REGISTRY:
            raise ValueError(f"exercise {name!r} is registered twice")
        REGISTRY[name] = Exercise(name, checker, hint, call)
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
    if not quiet:
        print(result)
    return result


def require_function(answer, call: str = "") -> None:
    """NotYet unless ``answer`` is callable (:meth:`Exercise.run` asks it of every answer).

    ``call`` names the expected call, e.g. ``"step(running_max, running_sum, scores)"``."""
    if not callable(answer):
        raise NotYet(f"expected a function{' ' + call if call else ''}, got {type(answer).__name__}")


def expected_values(name: str) -> list[np.ndarray]:
    """The stored expected outputs of exercise ``name``, one array per test input, in order.

    Where the library has no public function for an exercise's answer (a warm-up formula, the
    scores before the softmax), the checker compares with numbers, never with a function: they
    were computed once from the tests' reference solution on the checker's own inputs and are
    kept in ``expected.json`` beside this file (``tests/test_exercises_answers.py`` recomputes
    them and fails when they drift)."""
    return [np.asarray(v, dtype=np.float64) for v in _stored_expected()[name]]


@functools.lru_cache(maxsize=1)
def _stored_expected() -> dict[str, list]:
    return json.loads((Path(__file__).with_name("expected.json")).read_text())


def _is_stub(answer) -> bool:
    return answer is None or answer is Ellipsis


# -- the reader's random numbers ---------------------------------------------------------------

def seed_cpu(seed: int) -> None:
    """Seed the CPU generators a checker may draw from (torch's default CPU generator, NumPy's
    legacy global one, ``random``). Unlike ``torch.manual_seed`` it leaves CUDA and MPS alone:
    seeding an uninitialised CUDA queues a seed for later that no restore could take back."""
    torch.default_generator.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


@contextlib.contextmanager
def preserved_rng(seed: int | None = 0):
    """Run a block without changing the caller's random state, then put it back exactly.

    Saves and restores torch's CPU generator (and every CUDA device's, when CUDA is initialised),
    NumPy's global generator and Python's ``random``; inside, all are seeded with ``seed`` (None:
    left as they are), so a checker draws the same numbers whatever the reader did before.
    """
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    try:
        if seed is not None:
            seed_cpu(seed)
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def module_with(cls: type[torch.nn.Module], *args, weights: dict[str, torch.Tensor], **kwargs) -> torch.nn.Module:
    """A library module built with ``cls(*args, **kwargs)`` whose parameters are set to ``weights``
    (``{"q_proj.weight": w, ...}``), in eval mode. Its random init runs in a forked RNG, so building
    one never changes the reader's random numbers."""
    with torch.random.fork_rng(devices=[]):
        module = cls(*args, **kwargs)
    with torch.no_grad():
        for name, value in weights.items():
            module.get_parameter(name).copy_(value)
    return module.eval()


# -- converting answers: every natural type is accepted -----------------------------------------

def to_numpy(x, what: str = "your result") -> np.ndarray:
    """A NumPy array from a tensor (any device, any float type), a NumPy array or scalar, a Python
    number, or (nested) lists and tuples of any of these. Anything else raises NotYet."""
    if x is None:
        raise NotYet(f"{what} is None: did you forget to return it?")
    if isinstance(x, torch.Tensor):
        # a subclass's __torch_function__ would decide what detach, cpu and numpy return (an
        # array that compares close to anything): its data is read as a plain tensor instead
        with torch._C.DisableTorchFunctionSubclass():
            t = torch.Tensor.as_subclass(x, torch.Tensor).detach().cpu()
            if t.is_complex():
                raise NotYet(f"{what} is complex; expected real numbers")
            if t.dtype in (torch.float16, torch.bfloat16):
                t = t.float()  # NumPy has no bfloat16
            return np.array(t.numpy(), copy=True)  # the checker's own copy, never the answer's memory
    if isinstance(x, (list, tuple)):
        parts = [to_numpy(item, what) for item in x]
        if len({p.shape for p in parts}) > 1:
            raise NotYet(f"{what} is a list whose items have different shapes")
        return np.array(parts) if parts else np.zeros(0)
    if isinstance(x, (np.ndarray, np.generic)):
        # a plain array (no subclass's __array_ufunc__ or __eq__), copied: the answer keeps no handle on it
        arr = np.array(np.ndarray.view(x, np.ndarray) if isinstance(x, np.ndarray) else x, copy=True, subok=False)
        if arr.dtype == object or np.iscomplexobj(arr):
            raise NotYet(f"{what} should hold real numbers, got an array of {arr.dtype}")
        return arr
    if isinstance(x, (bool, int, float)) and type(x) in (bool, int, float):
        return np.asarray(x)
    if isinstance(x, numbers.Number):  # a subclass of a number: its value, not its methods
        arr = np.asarray(float(x) if isinstance(x, numbers.Real) else complex(x))
        if arr.dtype == object or np.iscomplexobj(arr):
            raise NotYet(f"{what} should hold real numbers, got an array of {arr.dtype}")
        return arr
    raise NotYet(f"{what} should be a tensor, a NumPy array, a number or a list of numbers, "
                 f"got {type(x).__name__}")


def to_number(x, what: str = "your value") -> float:
    """A float from a Python or NumPy number or a one-element tensor or array; else NotYet."""
    if isinstance(x, (str, bytes)) or x is None:
        raise NotYet(f"{what} should be a number, got {type(x).__name__}")
    if isinstance(x, numbers.Real) and not isinstance(x, (np.ndarray, torch.Tensor)):
        value = float(x)
        if type(value) is not float:  # a __float__ that returns a float subclass
            raise NotYet(f"{what} should be a number, got {type(x).__name__}")
        return float.__float__(value)
    try:
        arr = to_numpy(x, what)
    except NotYet:
        raise NotYet(f"{what} should be a number, got {type(x).__name__}") from None
    if arr.size != 1:
        raise NotYet(f"{what} should be one number, got {arr.size} values (shape {tuple(arr.shape)})")
    return float(arr.reshape(()))


def to_int(x, what: str = "your count") -> int:
    """An int from any number :func:`to_number` accepts whose value is whole (7, 7.0, np.int64(7),
    torch.tensor(7)); NotYet for 7.5 or non-numbers."""
    value = to_number(x, what)
    if not math.isfinite(value) or not value.is_integer():
        raise NotYet(f"{what} should be a whole number, got {value:g}")
    return int(value)


# -- comparison helpers used by the checkers ---------------------------------------------------

def compare_arrays(got, expected, what: str = "your result", atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Raise NotYet describing the first difference (shape, dtype kind, values) — never the values.

    ``got`` may be any type :func:`to_numpy` accepts (tensor, array, list, number)."""
    g, e = to_numpy(got, what), to_numpy(expected, "the reference")
    if e.ndim == 0 and g.size == 1:
        g = g.reshape(())  # one number asked for: [x], [[x]] or a 1-element tensor is fine
    if g.shape != e.shape:
        raise NotYet(f"{what} has shape {tuple(g.shape)}, expected shape {tuple(e.shape)}")
    if e.dtype == bool and g.dtype != bool:
        raise NotYet(f"{what} should be a boolean tensor (True = may attend), got dtype {g.dtype}")
    if e.dtype == bool:
        wrong = int((g != e).sum())
        if wrong:
            raise NotYet(f"{what} differs in {wrong} of {e.size} entries")
        return
    if g.dtype == bool and e.dtype != bool:
        g = g.astype(e.dtype)  # True/False where 1/0 was asked for: compare the numbers
    if not np.issubdtype(g.dtype, np.number) and g.dtype != bool:
        raise NotYet(f"{what} should hold numbers, got dtype {g.dtype}")
    if not np.all(np.isfinite(g)):
        raise NotYet(f"{what} contains NaN or inf")
    if not np.allclose(g, e, atol=atol, rtol=rtol):
        diff = float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
        raise NotYet(f"{what} differs: largest absolute difference {diff:.3g} (tolerance {atol:g})")


def compare_function(answer: Callable, reference: Callable | Sequence, inputs: Iterable[tuple],
                     what: str = "output", atol: float = 1e-5, describe: Callable[[tuple], str] | None = None) -> str:
    """Run ``answer(*args)`` on every input and compare it with ``reference(*args)`` (a library
    function) or with ``reference[i]`` (stored expected values, one per input, from
    :func:`expected_values`); raise NotYet on the first mismatch."""
    require_function(answer)
    n = 0
    for args in inputs:
        expected = reference(*args) if callable(reference) else reference[n]
        expected = to_numpy(expected, "the reference")  # the checker's copy, before the answer runs
        n += 1
        label = describe(args) if describe else f"test input #{n}"
        compare_arrays(answer(*_copies(args)), expected, what=f"{what} for {label}", atol=atol)
    return f"matches the library on all {n} test inputs."


def compare_number_cases(answer: Callable, cases: Sequence[tuple | dict], reference: Callable, *,
                         what: str, wrong: Callable[..., str], summary: str, rtol: float = 0.0,
                         atol: float = 0.0) -> str:
    """Call ``answer`` on every case and compare the one number it returns with ``reference`` on the
    same case; raise NotYet on the first that differs; else return "right on all N " + ``summary``
    (``summary``: what the N cases are, e.g. "batches, ties included.").

    A case is a tuple of positional arguments or a dict of keyword arguments; the answer gets copies
    (:func:`_copies`). ``what`` names the answer in :func:`to_number`'s messages ("your loss").
    The numbers agree when ``np.isclose(got, want, rtol=rtol, atol=atol)`` (the defaults: equal
    exactly); NaN and inf never agree with a finite reference. ``wrong(n, got, want, *case)`` (or
    ``**case``) writes the NotYet message of case ``n`` (from 1): what the case is and whether the
    answer is too high or too low, never the expected value unless the exercise means to show it."""
    require_function(answer)
    for n, case in enumerate(cases, 1):
        args, kwargs = ((), case) if isinstance(case, dict) else (case, {})
        want = to_number(reference(*args, **kwargs), "the reference")
        copied = dict(zip(kwargs, _copies(tuple(kwargs.values()))))
        got = to_number(answer(*_copies(args), **copied), what)
        if not np.isclose(got, want, rtol=rtol, atol=atol):
            raise NotYet(wrong(n, got, want, *args, **kwargs))
    return f"right on all {len(cases)} {summary}"


def _copies(args: tuple) -> tuple:
    """The test inputs as the answer gets them: tensors, arrays and lists copied, so that an answer
    that writes into its inputs or returns one of them holds none of the checker's own data."""
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a.copy() if isinstance(a, (np.ndarray, list))
                 else a for a in args)


def compare_value(answer, expected: float, what: str = "your value", rtol: float = 1e-3, atol: float = 0.0) -> str:
    """Numeric answer check that says 'too high' / 'too low' but not the value."""
    value = to_number(answer, what)
    if math.isnan(value):
        raise NotYet(f"{what} is NaN")
    if abs(value - expected) > max(atol, rtol * abs(expected)):
        raise NotYet(f"{what} is too {'high' if value > expected else 'low'}")
    return f"{what} is right."
