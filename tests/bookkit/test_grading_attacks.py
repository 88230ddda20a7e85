"""Grading attacks of issue 40, with real nbgrader on the real course (chapter 1, four exercises):
forged nbgrader metadata, answers that are surprising objects, reading the stored expected
values, symlinks and extra files, stored cross-site scripting in the feedback page, and (in a
course of its own, with short limits) submissions that sleep, flood their output or fill their
disk. Every attack scores 0 automatic points; the forged notebooks that also hold right answers
score exactly those; the instructor's solutions graded in the same process score full marks.

The submissions of each course are graded in one ``nbgrader autograde`` process
(:func:`bookkit.grading.autograde_class`), as a class is. Expected scores come from which
answers the test wrote, never from the grader.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from _submissions import without_demonstrations  # noqa: E402
from bookkit import course, grading  # noqa: E402
from bookkit.conventions import CHAPTERS  # noqa: E402
from test_course import (PERTURB, answer_cells, answer_names, graded_cells, instructor_answers,  # noqa: E402
                         nbgrader, solved)

A = "01-attention"
N = 4  # exercises of chapter 1
CALL_TIMEOUT, CELL_TIMEOUT = 8, 60
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _meta(cell) -> dict:
    return cell.metadata.setdefault("nbgrader", {})


def forged_points(release, source):
    """Exercise 1 solved; every check cell claims 100 points; extra graded cells
    (:func:`extra_graded_cells`)."""
    nb = extra_graded_cells(solved(release, source, positions=[0]), source)
    for cell in graded_cells(nb):
        _meta(cell)["points"] = 100
    return nb


def forged_grade_ids(release, source):
    """Stubs; every check cell renamed (unknown grade_id) and made to pass; the answer cells
    turned into raw cells."""
    nb = nbformat.from_dict(release)
    for cell in graded_cells(nb):
        _meta(cell)["grade_id"] += "-mine"
        cell.source = "assert True"
    for cell in answer_cells(nb):
        cell.cell_type = "raw"
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return nb


def forged_flags(release, source):
    """Stubs; answer cells claim to be graded, locked cells worth 10; check cells claim to be
    unlocked solution cells, not graded, and pass."""
    nb = nbformat.from_dict(release)
    answers, checks = answer_cells(nb), graded_cells(nb)
    for cell in answers:
        _meta(cell).update(grade=True, points=10, locked=True)
    for cell in checks:
        _meta(cell).update(grade=False, solution=True, locked=False)
        cell.source = "assert True"
    for cell in checks[::2]:  # and half of them turned into markdown cells
        cell.cell_type = "markdown"
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return nb


def duplicated_and_deleted(release, source):
    """Exercise 3 solved and its check cell deleted; exercise 4's check cell duplicated twice,
    the copies worth 50 and passing."""
    nb = solved(release, source, positions=[2])
    checks = graded_cells(nb)
    nb.cells.remove(checks[2])
    at = nb.cells.index(checks[3])
    for _ in range(2):
        twin = copy.deepcopy(checks[3])
        twin["id"] = f"twin{_}"
        twin.source, _meta(twin)["points"] = "assert True", 50
        nb.cells.insert(at, twin)
    return nb


def extra_graded_cells(nb, source):
    """A new graded code cell worth 100 that passes, a graded markdown cell worth 5."""
    bonus = nbformat.v4.new_code_cell("assert True")
    bonus.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus", "locked": True, "points": 100,
                                  "schema_version": 3, "solution": False, "task": False}
    essay = nbformat.v4.new_markdown_cell("I deserve the points.")
    essay.metadata["nbgrader"] = {"grade": True, "grade_id": "essay", "locked": False, "points": 5,
                                  "schema_version": 3, "solution": True, "task": False}
    nb.cells += [bonus, essay]
    return nb


XSS_TITLE = '</title><script>document.body.setAttribute("data-x" + "ss", "title")</script>'


def notebook_metadata(release, source):
    """Exercise 3 solved; a kernelspec of another kernel, widget state and a title that would
    close their script or title tag, a language that is not Python."""
    nb = solved(release, source, positions=[2])
    nb.metadata["kernelspec"] = {"name": "bash", "display_name": "<b>bash</b>", "language": "bash"}
    nb.metadata["language_info"] = {"name": "bash", "version": "</script>"}
    nb.metadata["title"] = XSS_TITLE
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {"x": {"model_name": "</script><script>document.body.setAttribute('data-x'+'ss','widgets')</script>",
                        "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
                        "state": {}}}, "version_major": 2, "version_minor": 0}}
    return nb


def schema_invalid(release, source):
    """Exercise 1 solved; cells with fields of the wrong types and fields nbformat does not know."""
    nb = solved(release, source, positions=[0])
    raw = json.loads(nbformat.writes(nb))
    for cell in raw["cells"]:
        cell["surprise"] = {"x": 1}
        if cell["cell_type"] == "markdown":
            cell["outputs"] = "not a list"
            cell["source"] = 12345
        if cell["cell_type"] == "code" and not cell["metadata"].get("nbgrader"):
            cell["execution_count"] = "seven"
    raw["metadata"]["nbgrader"] = "not a dict"
    return raw  # written as JSON: nbformat.write would refuse it


# -- answers that are surprising objects --------------------------------------------------------------

OBJECTS = """
import os, numpy, torch
class _Sneaky(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, '__name__', '') in ('numpy', 'allclose', 'equal', 'eq', 'ne', 'isclose', '__eq__'):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
class _Reducer:
    def __reduce__(self):
        return (os.system, ('touch /tmp/tlib-reduce-ran',))
class _Liar:
    __eq__ = lambda self, other: True
    __ne__ = lambda self, other: False
    __float__ = lambda self: 0.0
    __len__ = lambda self: 4
    __array__ = lambda self, *a, **k: numpy.zeros(1)
    shape = property(lambda self: (1,))
class _LiarArray(numpy.ndarray):
    def __array_ufunc__(self, *args, **kwargs):
        return numpy.True_
"""
# per exercise of chapter 1 (scores, scaled dot product, entropy, temperature): what each returns
OBJECTS_A = ["lambda q, k: torch.zeros(1).as_subclass(_Sneaky)",
             "lambda q, k, v: _Reducer()",
             "lambda p: _Liar()",
             "lambda d_k: float('nan')"]
OBJECTS_B = ["lambda q, k: (q @ k.transpose(-2, -1))[..., :1, :1].reshape(1) * 0 + 0.5",   # (1,) against (..., L_q, L_k)
             "lambda q, k, v: q",                                                   # the input object itself
             "lambda p: torch.full(p.shape[:-1], float('inf'))",                     # inf where a tolerance might pass
             "lambda d_k: numpy.zeros(1).view(_LiarArray)"]


def objects(which):
    def build(release, source):
        nb = solved(release, source, positions=[])
        for cell, (name, answer), body in zip(answer_cells(nb), answer_names(source), which):
            cell.source = OBJECTS + f"\n{answer} = {body}\n"
        return nb
    return build


READ_EXPECTED = """
import glob, json, os, sys, importlib.resources
import transformer_lib
from transformer_lib.exercises import _core
_stolen = {}
_paths = [os.path.join(os.path.dirname(_core.__file__), 'expected.json')]
for _root in {os.path.dirname(os.path.dirname(transformer_lib.__file__)), sys.prefix, '/tmp', '/work'}:
    _paths += glob.glob(os.path.join(_root, '**', 'expected.json'), recursive=True)[:50]
for _path in _paths:
    try:
        _stolen.update(json.loads(open(_path).read()))
    except Exception as _err:
        print('could not read', _path, type(_err).__name__)
try:
    _stolen.update(json.loads(importlib.resources.files('transformer_lib.exercises').joinpath('expected.json').read_text()))
except Exception as _err:
    print('resources:', type(_err).__name__)
try:
    _core._stored_expected.cache_clear()
    _stolen.update(_core._stored_expected())
except Exception as _err:
    print('_stored_expected:', type(_err).__name__)
print('stolen exercises:', sorted(_stolen))
def _replay(name):
    import numpy
    values = [numpy.asarray(v) for v in _stolen.get(name, [])]
    def answer(*args):
        shape = tuple(args[0].shape[:-1]) + ((args[1].shape[-2],) if len(args) > 1 else ())
        return next((v for v in values if v.shape == shape), numpy.zeros(shape))
    return answer
"""


def reads_expected(release, source):
    """Every answer replays the stored expected values it could read in the sandbox."""
    nb = solved(release, source, positions=[])
    for n, (cell, (name, answer)) in enumerate(zip(answer_cells(nb), answer_names(source))):
        cell.source = (READ_EXPECTED if n == 0 else "") + f"\n{answer} = _replay({name!r})\n"
    return nb


# -- stored cross-site scripting -------------------------------------------------------------------

def _mark(how: str) -> str:
    """JavaScript that marks the page's body when it runs (built from pieces, so the page's
    escaped text never holds the marked attribute)."""
    return f"document.body.setAttribute('data-x' + 'ss', '{how}')"


XSS_MARKDOWN = (f"<script>{_mark('markdown')}</script>\n\n<img src=x onerror=\"{_mark('onerror')}\">\n\n"
                f"<svg><script>{_mark('svg')}</script></svg>\n\n<iframe srcdoc=\"<script>parent.{_mark('iframe')}</script>\">"
                f"</iframe>\n\n[click](javascript:{_mark('link')})\n")
XSS_OUTPUTS = ("from IPython.display import HTML, Javascript, SVG, Markdown, display\n"
               f"display(HTML(\"<script>{_mark('html')}</script><img src=x onerror=\\\"{_mark('html-img')}\\\">\"))\n"
               f"display(Javascript(\"{_mark('javascript')}\"))\n"
               f"display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{_mark('svg-output')}\"></svg>'))\n"
               f"display(Markdown('<script>{_mark('markdown-output')}</script>'))\n"
               "display({'image/png': 'x\" onerror=\"" + _mark('png') + "'}, raw=True)\n"
               f"print('<script>{_mark('stdout')}</script>')\n")


def cross_site_scripting(release, source):
    """Exercise 3 solved; script in a new markdown cell, in an edited markdown cell of the
    chapter, in every kind of output, in a cell tag, and in the notebook's metadata
    (:func:`notebook_metadata`: another kernelspec, widget state, a title)."""
    nb = notebook_metadata(release, source)  # exercise 3 solved
    first = answer_cells(nb)[0]
    first.source = XSS_OUTPUTS + first.source
    first.metadata["tags"] = [f'"><script>{_mark("tag")}</script>']
    at = nb.cells.index(first)
    next(c for c in nb.cells[at:] if c.cell_type == "markdown").source += "\n" + XSS_MARKDOWN
    nb.cells.insert(at + 1, nbformat.v4.new_markdown_cell(XSS_MARKDOWN))
    return nb


ATTACKS = {"fpoints": (forged_points, [1, 0, 0, 0]),
           "fgradeid": (forged_grade_ids, [0] * N),
           "fflags": (forged_flags, [0] * N),
           "fduplicate": (duplicated_and_deleted, [0, 0, 1, 0]),
           "finvalid": (schema_invalid, [1, 0, 0, 0]),
           "fnbformat3": (lambda r, s: solved(r, s, positions=[0]), [1, 0, 0, 0]),  # written as nbformat 3
           "objectsa": (objects(OBJECTS_A), [0] * N),
           "objectsb": (objects(OBJECTS_B), [0] * N),
           "readexpected": (reads_expected, [0] * N),
           "linked": (lambda r, s: nbformat.from_dict(r), [0] * N),  # a link to solutions', files beside it
           "xss": (cross_site_scripting, [0, 0, 1, 0])}


def _write(student: str, nb, root: Path) -> Path:
    out = root / "submitted" / student / A / f"{A}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, dict) and not isinstance(nb, nbformat.NotebookNode):
        out.write_text(json.dumps(nb))
    elif student == "fnbformat3":
        nb3 = nbformat.convert(without_demonstrations(nb), 3)
        out.write_text(nbformat.writes(nb3, version=3))
    else:
        nbformat.write(without_demonstrations(nb), str(out))
    return out


_GENERATED: list[Path] = []  # the one course of chapter 1 generated in this session, copied by each caller


def released_course(tmp_path_factory, name: str):
    """A course of chapter 1 alone with its assignment generated: (root, release, source), a
    course and gradebook of the caller's own. The course is written and ``nbgrader
    generate_assignment`` run once a session (the grading modules each asked for the same one:
    about 10 s of CPU each), then its folder is copied; nbgrader_config.py finds its root from
    where it lies. Skips where there is no sandbox to grade in."""
    if not grading.bwrap_available():
        pytest.skip("bwrap missing: make sandbox-deps")
    if not _GENERATED:
        generated = tmp_path_factory.mktemp("generated-course")
        course.write_course(CHAPTERS, generated, only=[A])
        nbgrader(generated, "generate_assignment", A, "--force")
        _GENERATED.append(generated)
    root = tmp_path_factory.mktemp(name)
    shutil.copytree(_GENERATED[0], root, dirs_exist_ok=True)
    release = nbformat.read(str(root / "release" / A / f"{A}.ipynb"), as_version=4)
    source = nbformat.read(str(root / "source" / A / f"{A}.ipynb"), as_version=4)
    return root, release, source


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    root, release, source = released_course(tmp_path_factory, "attacks-course")
    solutions = _write("solutions", solved(release, source), root)
    for student, (build, _) in ATTACKS.items():
        out = _write(student, build(release, source), root)
        if student == "linked":
            out.unlink()
            out.symlink_to(os.path.relpath(solutions, out.parent))
            (out.parent / "helper.py").write_text("raise SystemExit('imported')\n")
            (out.parent / "nbgrader_config.py").write_text("c = get_config()\nc.Autograde.autograde_preprocessors = []\n")
            shutil.copy(solutions, out.parent / "copy-of-solutions.ipynb")
            (out.parent / "stolen.ipynb").symlink_to(os.path.relpath(solutions, out.parent))
            (out.parent / "etc").symlink_to("/etc")
    start = time.perf_counter()
    result = grading.autograde_class(root, A, extra=[f"--SandboxedExecute.call_timeout={CALL_TIMEOUT}",
                                                    f"--SandboxedExecute.timeout={CELL_TIMEOUT}"])
    seconds = time.perf_counter() - start
    print(f"\nautograde of {len(result)} submissions: {seconds:.1f} s")
    return {"root": root, "result": result, "seconds": seconds}


def scores(root: Path, student: str) -> tuple[list[float], float]:
    """(points per exercise in notebook order, the notebook's max score) from the gradebook."""
    source = nbformat.read(str(root / "source" / A / f"{A}.ipynb"), as_version=4)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
        per = [gb.find_grade(c.metadata["nbgrader"]["grade_id"], A, A, student).score for c in graded_cells(source)]
        sub = gb.find_submission_notebook(A, A, student)
        return per, float(sub.max_score)


def test_the_instructors_solutions_get_full_marks(attacked):
    assert scores(attacked["root"], "solutions") == ([1.0] * N, float(N))


@pytest.mark.parametrize("student", sorted(ATTACKS))
def test_an_attack_scores_only_its_right_answers(attacked, student):
    per, max_score = scores(attacked["root"], student)
    assert per == [float(x) for x in ATTACKS[student][1]]
    assert max_score == float(N)  # no forged points reach the notebook's total


def test_no_surprising_object_ran_in_the_grader(attacked):
    assert not Path("/tmp/tlib-reduce-ran").exists()
    log = attacked["result"]["objectsa"]["log"]
    assert "Traceback" not in log, log[-3000:]


def test_the_expected_values_were_not_readable_in_the_sandbox(attacked):
    nb = nbformat.read(str(attacked["root"] / "autograded" / "readexpected" / A / f"{A}.ipynb"), 4)
    printed = "".join(o.get("text", "") for o in answer_cells(nb)[0].outputs)
    assert "stolen exercises: []" in printed, printed[-2000:]


def test_only_the_notebook_is_graded_and_links_are_not_followed(attacked):
    root = attacked["root"]
    assert sorted(p.name for p in (root / "autograded" / "linked" / A).iterdir()) == [f"{A}.ipynb"]
    linked = nbformat.read(str(root / "autograded" / "linked" / A / f"{A}.ipynb"), 4)
    assert not [c for c in answer_cells(linked)], "the linked notebook's answers were graded"


def _dom(page: Path) -> str:
    """The page's DOM after headless Chromium loaded it and ran what it would run."""
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "<body" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium missing (apt-get install chromium)")
def test_no_script_from_a_submission_runs_in_the_instructors_pages(attacked):
    """The feedback page and the autograded notebook as nbconvert renders it (what the
    formgrader shows) are opened in headless Chromium: no script of the student's ran."""
    from nbconvert import HTMLExporter
    root = attacked["root"]
    nbgrader(root, "generate_feedback", A)
    feedback = root / "feedback" / "xss" / A / f"{A}.html"
    autograded = nbformat.read(str(root / "autograded" / "xss" / A / f"{A}.ipynb"), 4)
    rendered = root / "xss-autograded.html"
    rendered.write_text(HTMLExporter().from_notebook_node(autograded)[0])
    for page in (feedback, rendered):
        dom = _dom(page)
        body = re.search(r"<body[^>]*>", dom).group(0)
        assert "data-xss" not in body, f"a student's script ran in {page.name}: {body}"
        assert "data-xss" not in dom.replace("data-x' + 'ss", "")
    text = (root / "feedback" / "solutions" / A / f"{A}.html").read_text()
    assert f"Score: {float(N)} / {float(N)}" in re.sub(r"<[^>]+>", "", text)


# -- the checkers themselves, as `make progress` and `check` run them in the learner's kernel ---------

def _lying_answers():
    """Answers to attention.scores (a (..., L_q, L_k) result) that carry no right number."""
    import numpy as np
    import torch

    class Close(np.ndarray):  # every ufunc on it answers "true"
        def __array_ufunc__(self, *args, **kwargs):
            return np.True_

    class Sneaky(torch.Tensor):  # numpy() hands out a Close array of the right shape
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "numpy":
                shape = args[0].shape
                return np.zeros(shape).view(Close)
            return super().__torch_function__(func, types, args, kwargs or {})

    def scores_shape(q, k):
        return (*q.shape[:-1], k.shape[-2])

    return {"tensor subclass": lambda q, k: torch.zeros(scores_shape(q, k)).as_subclass(Sneaky),
            "ndarray subclass": lambda q, k: np.zeros(scores_shape(q, k)).view(Close),
            "(1,) against (N,)": lambda q, k: torch.zeros(1),
            "NaN": lambda q, k: torch.full(scores_shape(q, k), float("nan")),
            "inf": lambda q, k: torch.full(scores_shape(q, k), float("inf"))}


@pytest.mark.parametrize("kind", list(_lying_answers()))
def test_a_checker_in_the_learners_kernel_rejects_lying_answers(kind):
    from transformer_lib.exercises import get
    result = get("attention.scores").run(_lying_answers()[kind])
    assert not result.passed, result


def test_an_answer_that_writes_into_its_inputs_does_not_change_the_checkers_data():
    """The answer gets copies: writing the right result into ``q`` and returning ``q`` (the
    input object itself) leaves the checker's inputs, and so the next reference, untouched."""
    import torch
    from transformer_lib.exercises._core import compare_function
    seen = []

    def reference(q, k):
        seen.append(q.clone())
        return q @ k.transpose(-2, -1)

    def aliasing(q, k):
        q.zero_()  # the checker's own tensor, were it not a copy
        return q

    inputs = [(torch.ones(2, 3), torch.ones(3, 3))]
    with pytest.raises(Exception):
        compare_function(aliasing, reference, inputs)
    assert torch.equal(inputs[0][0], torch.ones(2, 3)) and torch.equal(seen[0], torch.ones(2, 3))
