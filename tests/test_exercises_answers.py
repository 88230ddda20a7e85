"""Every registered checker, generically, against the test data in ``tests/exercise_answers/``:
its reference solution and every alternative right answer (einsum, loops, NumPy, other input or
output types) pass, every wrong answer fails with a message, stubs report "not yet", crashes are
reported, and no check changes the reader's random state (torch, NumPy, ``random``), whatever the
answer does. The package itself holds no answers: no exercise exposes a solution, and no function
defined anywhere in ``transformer_lib.exercises`` passes any exercise.

A new chapter is covered as soon as its checker module ``transformer_lib/exercises/chNN_x.py``
and its answer module ``tests/exercise_answers/chNN_x.py`` exist.
"""
import ast
import dataclasses
import importlib
import inspect
import json
import pkgutil
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import transformer_lib.exercises as exercises_package
from exercise_answers import KEYS, all_answers, module_names, stored
from transformer_lib.exercises import REGISTRY, Exercise, ch02_self_cross, check, preserved_rng, to_int, to_number, to_numpy
from transformer_lib.exercises._core import NotYet

ANSWERS = all_answers()
NAMES = sorted(REGISTRY)
MIN_WRONG = 4  # each exercise had 2-5 wrong answers; issue 18 asked for at least two more each
PACKAGE = Path(exercises_package.__file__).parent


def _scramble_global_rngs():
    """Put every global generator in a state no checker would choose, and draw from it once."""
    torch.manual_seed(987_654)
    np.random.seed(4321)
    random.seed(77)
    torch.rand(3), np.random.rand(2), random.random()


def _snapshot():
    return torch.get_rng_state().clone(), np.random.get_state(), random.getstate()


def _same_state(a, b) -> bool:
    (t1, n1, p1), (t2, n2, p2) = a, b
    numpy_same = n1[0] == n2[0] and np.array_equal(n1[1], n2[1]) and tuple(n1[2:]) == tuple(n2[2:])
    return torch.equal(t1, t2) and numpy_same and p1 == p2


def _run_keeping_rng(name, answer):
    """Run the checker on ``answer``; fail the test if any global random state moved."""
    _scramble_global_rngs()
    before = _snapshot()
    result = REGISTRY[name].run(answer)
    assert _same_state(before, _snapshot()), f"{name}: the check changed the global random state"
    return result


# -- the test data covers the registry, exactly ------------------------------------------------

def test_every_checker_module_has_an_answer_module_and_the_other_way_round():
    checkers = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]) if m.name.startswith("ch"))
    assert checkers and checkers == module_names()


def test_every_registered_exercise_has_answers_and_every_answer_names_an_exercise():
    assert not set(REGISTRY) - set(ANSWERS), f"exercises without answers: {sorted(set(REGISTRY) - set(ANSWERS))}"
    assert not set(ANSWERS) - set(REGISTRY), f"answers for no exercise: {sorted(set(ANSWERS) - set(REGISTRY))}"


@pytest.mark.parametrize("module", module_names())
def test_each_answer_module_answers_the_exercises_its_checker_module_registers(module):
    registered = {name for name, ex in REGISTRY.items() if ex.checker.__module__.endswith("." + module)}
    answered = set(importlib.import_module(f"exercise_answers.{module}").ANSWERS)
    assert registered == answered


@pytest.mark.parametrize("name", NAMES)
def test_each_entry_has_a_solution_alternatives_and_wrong_answers(name):
    entry = ANSWERS[name]
    assert set(entry) == set(KEYS), f"{name}: keys {sorted(entry)}, expected {KEYS}"
    assert callable(entry["solution"]()), f"{name}: the solution is not a function"
    assert list(entry["alternatives"]()), f"{name} has no alternative right answer"
    assert len(list(entry["wrong"]())) >= MIN_WRONG, f"{name} has fewer than {MIN_WRONG} wrong answers"


# -- the checkers against the test data -------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_passes_and_keeps_the_rng(name):
    result = _run_keeping_rng(name, ANSWERS[name]["solution"]())
    assert result.passed, f"{name}: the reference solution fails: {result.message}"


@pytest.mark.parametrize("name", NAMES)
def test_alternative_right_answers_pass(name):
    for k, answer in enumerate(ANSWERS[name]["alternatives"]()):
        result = _run_keeping_rng(name, answer)
        assert result.passed, f"{name}: alternative right answer #{k} fails: {result.message}"


@pytest.mark.parametrize("name", NAMES)
def test_every_wrong_answer_fails_with_a_message_and_keeps_the_rng(name):
    for k, answer in enumerate(ANSWERS[name]["wrong"]()):
        result = _run_keeping_rng(name, answer)
        assert not result.passed, f"{name}: wrong answer #{k} passes"
        assert str(result).startswith(f"NOT YET [{name}]: ") and len(result.message) > 10, result.message


@pytest.mark.parametrize("name", NAMES)
def test_stubs_report_not_yet(name):
    for stub in (None, ...):
        result = REGISTRY[name].run(stub)
        assert not result.passed and "stub" in result.message

    def not_implemented(*args, **kwargs):
        raise NotImplementedError
    result = REGISTRY[name].run(not_implemented)
    assert not result.passed and "NotImplementedError" in result.message


def _crashes(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize("name", NAMES)
def test_a_crashing_answer_is_reported_not_raised(name):
    result = _run_keeping_rng(name, _crashes)
    assert not result.passed and "RuntimeError" in result.message and "boom" in result.message


# -- nothing a student imports returns a right answer ----------------------------------------------

def test_an_exercise_carries_no_solution_or_wrong_answers():
    assert {f.name for f in dataclasses.fields(Exercise)} == {"name", "checker", "hint", "call"}
    for ex in REGISTRY.values():
        for attribute in ("solution", "alternative_answers", "wrong_answers", "answers"):
            assert not hasattr(ex, attribute), f"{ex.name} exposes {attribute}"


def _exercise_modules():
    """transformer_lib.exercises and every transformer_lib module its checker modules import."""
    modules = {name: mod for name, mod in sys.modules.items()
               if name == "transformer_lib" or name.startswith("transformer_lib.")}
    return {name: mod for name, mod in modules.items() if getattr(mod, "__file__", None)}


def _answer_functions():
    """(exercise, function) for every named function the test data defines (not the library's)."""
    found = []
    for name, entry in ANSWERS.items():
        for answer in [entry["solution"](), *entry["alternatives"](), *entry["wrong"]()]:
            if inspect.isfunction(answer) and answer.__module__.startswith("exercise_answers"):
                found.append((name, answer))
    return found


def test_no_library_module_defines_a_function_named_like_a_test_answer():
    names = {fn.__name__ for _, fn in _answer_functions() if fn.__name__ != "<lambda>"}
    assert len(names) > 100, "the scan found too few named answers to mean anything"
    offenders = []
    for module_name, module in _exercise_modules().items():
        tree = ast.parse(Path(module.__file__).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)}
        offenders += [f"{module_name}.{n}" for n in sorted(defined & names)]
    assert not offenders, f"the package defines answers of the tests: {offenders}"


def _arity(fn) -> int | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def test_no_function_defined_in_the_exercises_package_passes_any_exercise():
    """The strongest form of "no file holds a solution": try every function and class the checker
    modules (and _core) define, with a matching number of arguments, as an answer to every
    exercise; none may pass."""
    candidates = []
    for module_name, module in _exercise_modules().items():
        if not module_name.startswith("transformer_lib.exercises"):
            continue
        for attr, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", "") == module_name:
                candidates.append((f"{module_name}.{attr}", value))
    assert len(candidates) > 50
    tried = 0
    for name in NAMES:
        want = _arity(ANSWERS[name]["solution"]())
        for label, fn in candidates:
            if fn in {ex.checker for ex in REGISTRY.values()} or _arity(fn) != want:
                continue
            tried += 1
            assert not REGISTRY[name].run(fn).passed, f"{label} passes {name}: the package holds its answer"
    assert tried > 0


# -- the stored expected values agree with the test data's solutions -------------------------------

@pytest.mark.parametrize("name", sorted(stored.INPUTS))
def test_stored_expected_values_equal_the_reference_solution_on_the_checker_inputs(name):
    saved = json.loads(stored.PATH.read_text())[name]
    fresh = stored.compute(name)
    assert len(saved) == len(fresh)
    # float32 results: another CPU's vector kernels (AVX2 or AVX-512, AMD or Intel) sum in another
    # order, a few float32 units (6e-8) of the sum's magnitude apart (2e-7 seen on unit-sized
    # values); 1e-6 still sits ten times inside the checkers' own tolerance (1e-5), so a stale file
    # is caught before a reader's right answer could be refused.
    for a, b in zip(saved, fresh):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, rtol=1e-6, atol=1e-6)


def test_the_stored_file_holds_numbers_only():
    def numbers_only(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) or (
            isinstance(x, list) and all(numbers_only(v) for v in x))
    data = json.loads(stored.PATH.read_text())
    assert set(data) == set(stored.INPUTS) <= set(REGISTRY)
    assert all(numbers_only(v) for v in data.values())


def test_an_answer_that_draws_random_numbers_leaves_no_trace():
    """A reader's function may call torch.randn or np.random itself: the check still restores."""
    def noisy(x):
        torch.randn(5), np.random.rand(3), random.random()
        torch.manual_seed(0)
        np.random.seed(0)
        return x.pow(2).mean(dim=-1, keepdim=True)
    assert _run_keeping_rng("intro.mean_of_squares", noisy).passed


def test_a_checker_sees_the_same_random_numbers_whatever_the_reader_did():
    draws = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        with preserved_rng():
            draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1])


# -- the three holes issue 18 found --------------------------------------------------------------

def test_cross_attention_scaled_by_sqrt_d_model_fails():
    """With d_k != d_model, dividing by sqrt(x_dec.shape[-1]) is no longer the right scale."""
    def by_d_model(x_dec, x_enc, w_q, w_k, w_v):
        q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
        w = torch.softmax(q @ k.transpose(-2, -1) / x_dec.shape[-1] ** 0.5, dim=-1)
        return w @ v, w
    cases = ch02_self_cross._cross_inputs()
    assert any(c[2].shape[0] != c[2].shape[1] for c in cases), "no case with d_k != d_model"
    result = check("self_cross.cross_attention", by_d_model, quiet=True)
    assert not result.passed and "weights" in result.message


def test_cross_mask_accepts_chapter_4_style_tensor_code():
    def tensor_style(n_dec, lengths, n_enc):
        return (torch.arange(n_enc)[None, :] < lengths[:, None])[:, None, None, :].expand(-1, 1, n_dec, -1)
    assert check("self_cross.cross_mask", tensor_style, quiet=True).passed


def test_sequential_steps_accepts_a_numpy_integer():
    from transformer_lib.cost import sequential_steps
    assert check("rnn.sequential_steps", lambda m, n, L: np.int64(sequential_steps(m, n, L)), quiet=True).passed
    assert check("rnn.sequential_steps", lambda m, n, L: float(sequential_steps(m, n, L)), quiet=True).passed
    assert not check("rnn.sequential_steps", lambda m, n, L: sequential_steps(m, n, L) + 0.5, quiet=True).passed


# -- the conversion helpers --------------------------------------------------------------------------

@pytest.mark.parametrize("value", [3, 3.0, np.int64(3), np.float32(3), torch.tensor(3), torch.tensor([3.0]),
                                   np.array([[3]])])
def test_to_int_and_to_number_accept_every_natural_type(value):
    assert to_int(value) == 3 and to_number(value) == 3.0


@pytest.mark.parametrize("value", ["3", None, [1, 2], torch.ones(2), object(), 2.5])
def test_to_int_rejects_what_is_not_one_whole_number(value):
    with pytest.raises(NotYet):
        to_int(value)


def test_to_numpy_accepts_nested_lists_tensors_and_half_precision():
    assert to_numpy([[1, 2], (3, 4)]).shape == (2, 2)
    assert to_numpy([torch.ones(3), np.zeros(3)]).shape == (2, 3)
    assert to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32
    assert to_numpy(np.bool_(True)).dtype == bool
    for bad in ([torch.ones(2), torch.ones(3)], "abc", {1: 2}, None):
        with pytest.raises(NotYet):
            to_numpy(bad)
