"""The graded course, end to end with real nbgrader: `make course` -> generate_assignment ->
submissions -> autograde (sandboxed, bookkit/grading.py) -> feedback -> export, on chapters 1 and 15.

Submissions are built from the released notebook the way a student would change it: the
instructor's solutions (full marks), the untouched release (zero), a partial answer (exactly the
solved exercises score) and attacks that must all score zero: edited check cells, fake ``PASS``
lines, ``check`` rebound, ``Exercise.run`` replaced, ``numpy.allclose``/``torch.allclose``/
``torch.equal`` patched beside a wrong answer of the right shape, the registry asked for the
solution, a fake ``transformer_lib/`` beside the notebook, code that reads the course source,
another student's submission and the repository's chapters and writes the gradebook, ipykernel
patched to report success, a process forked to outlive the cell, an endless loop (in the first
answer: the call's time limit stops it and the kernel answers the next calls), a memory bomb, an
object equal to everything, ``builtins`` overridden, and a kernel that ends itself. The
expected scores come from which answers the test wrote, never from the grader. Each chapter is
graded in a course of its own (its own gradebook), the two side by side.
"""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from _submissions import without_demonstrations  # noqa: E402
from bookkit import course, grading  # noqa: E402
from bookkit.conventions import CHAPTERS, chapter_files, check_names  # noqa: E402

# chapter 1 has four exercises, chapter 15 three; a partial answer solves the listed positions and
# gets a wrong answer of the right shape at the others
PARTIAL = {"01-attention": [0, 2], "15-tokenization": [1]}
ASSIGNMENTS = list(PARTIAL)
EXERCISES = {"01-attention": 4, "15-tokenization": 3}
ISSUE_ATTACKS = ["runpatch", "allclose", "askref", "fakepkg", "escape"]  # the five of issue 33
MORE_ATTACKS = ["lockededit", "fakepass", "rebound", "kernelpatch", "orphan", "loop", "membomb",
                "alwayseq", "builtins", "exitkernel"]
ATTACKS = {"01-attention": ISSUE_ATTACKS + MORE_ATTACKS, "15-tokenization": ISSUE_ATTACKS}
# The instructor's solutions and the untouched release run every cell of the chapter (its figures,
# widgets and pretrained model: the assignment as a class submits it). Every other submission also
# deletes the chapter's demonstration cells (``without_demonstrations``): a graded cell is decided
# by the checker outside the kernel, so those cells cannot change a grade, and running them in two
# dozen more kernels cost most of this test's time. ``partial`` is the control of that form: its
# solved exercises score there, so a zero of an attack is not a notebook that cannot score.
WHOLE_CHAPTER = {"solutions", "untouched"}
MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)
ORPHAN = f"tlib-orphan-{uuid.uuid4().hex[:8]}"  # in the command line of the process that tries to stay
CALL_TIMEOUT = 8   # seconds per call of a student's function in this test (the course's default: 60)
CELL_TIMEOUT = 60  # seconds per cell of the chapter in this test (the course's default: 300)
requires_bwrap = pytest.mark.skipif(not grading.bwrap_available(), reason="bwrap missing: make sandbox-deps")


def nbgrader(course_dir: Path, *args: str) -> float:
    """Run one nbgrader command in the course directory; return its wall time in seconds."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               NBGRADER_EXCHANGE=str(course_dir / "exchange"))  # nbgrader runs `alembic` from PATH
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course_dir, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return time.perf_counter() - start


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def answer_cells(nb):
    return [c for c in nb.cells if _meta(c).get("solution")]


def graded_cells(nb):
    return [c for c in nb.cells if _meta(c).get("grade")]


def instructor_answers(source_nb) -> list[str]:
    return [MARKERS.sub("", c.source) for c in answer_cells(source_nb)]


def answer_names(nb) -> list[tuple[str, str]]:
    """(exercise, answer expression) of each graded cell, in order."""
    return [course.check_call(c.source.replace("assert check(", "check(", 1)) for c in graded_cells(nb)]


# -- the submissions ---------------------------------------------------------------------------------

# a wrong answer of the right shape: the instructor's answer with 1 added to every number it returns
PERTURB = """
def _perturbed(x):
    import numpy, torch
    if isinstance(x, torch.Tensor):
        return ~x if x.dtype == torch.bool else x + 1
    if isinstance(x, numpy.ndarray):
        return ~x if x.dtype == bool else x + 1
    if isinstance(x, (bool, numpy.bool_)):
        return not x
    if isinstance(x, (int, float, numpy.number)):
        return x + 1
    if isinstance(x, (list, tuple)):
        return type(x)(_perturbed(i) for i in x)
    if isinstance(x, dict):
        return {k: _perturbed(v) for k, v in x.items()}
    return x

def _wrong(answer):
    if callable(answer):
        return lambda *args, **kwargs: _perturbed(answer(*args, **kwargs))
    return _perturbed(answer)
"""


def solved(release, source, positions=None, wrong_elsewhere=False):
    """The release with the instructor's answers at ``positions`` (all when None); elsewhere the
    stub, or (``wrong_elsewhere``) the instructor's answer made wrong."""
    nb = nbformat.from_dict(release)
    answers, names = instructor_answers(source), answer_names(source)
    for n, cell in enumerate(answer_cells(nb)):
        if positions is None or n in positions:
            cell.source = answers[n]
        elif wrong_elsewhere:
            cell.source = PERTURB + answers[n] + f"\n{names[n][1]} = _wrong({names[n][1]})\n"
    return nb


def with_lines(release, source, first="", each="", wrong=False, at=None):
    """The release with ``first`` added to the first answer cell and ``each`` (formatted with
    ``{name}``, ``{answer}``) after every answer (only the answers at positions ``at`` when
    given); ``wrong``: right-shaped wrong answers, else stubs."""
    nb = solved(release, source, positions=[], wrong_elsewhere=wrong)
    for n, (cell, (name, answer)) in enumerate(zip(answer_cells(nb), answer_names(source))):
        after = each.format(name=name, answer=answer) if at is None or n in at else ""
        cell.source = (first + "\n" if n == 0 else "") + cell.source + "\n" + after
    return nb


def locked_cells_edited(release, source):
    """Every check cell replaced by a printed PASS and an assert that cannot fail."""
    nb = nbformat.from_dict(release)
    for cell in graded_cells(nb):
        (name,) = check_names(cell.source)
        cell.source = f'print("PASS [{name}]: all test inputs match.")\nassert True'
    return nb


def fake_pass_printed(release, source):
    """Stubs left, PASS lines printed from the answer cells and saved as the check cells' outputs."""
    nb = nbformat.from_dict(release)
    for answer, cell in zip(answer_cells(nb), graded_cells(nb)):
        (name,) = check_names(cell.source)
        line = f"PASS [{name}]: all test inputs match.\n"
        answer.source += f"\nprint({line.strip()!r})"
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line)]
        cell.execution_count = 1
    return nb


PATCH_RUN = ("from transformer_lib.exercises import Exercise, Result\n"
             "Exercise.run = lambda self, answer: Result(self.name, True, 'all test inputs match.')\n")
PATCH_COMPARE = ("import numpy, torch\nnumpy.allclose = lambda *a, **k: True\nnumpy.array_equal = lambda *a, **k: True\n"
                 "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n")
ASK_REFERENCE = "from transformer_lib.exercises import get as _get\n{answer} = _get({name!r}).solution()\n"
KERNEL_PATCH = ("import ipykernel.ipkernel\n"
                "async def _always_ok(self, code, silent, *args, **kwargs):\n"
                "    print('PASS: all test inputs match.')\n"
                "    return {'status': 'ok', 'execution_count': self.execution_count, 'payload': [],"
                " 'user_expressions': {}}\n"
                "ipykernel.ipkernel.IPythonKernel.do_execute = _always_ok\n")
ORPHAN_CODE = ("import subprocess\n"
               f"subprocess.Popen(['/bin/sh', '-c', 'sleep 120 # {ORPHAN}'], start_new_session=True)\n"
               f"subprocess.Popen(['setsid', '/bin/sh', '-c', 'sleep 120 # {ORPHAN}'])\n")
ALWAYS_EQUAL = ("class _Always:\n"
                "    __eq__ = lambda self, other: True\n    __ne__ = lambda self, other: False\n"
                "    __bool__ = lambda self: True\n    __len__ = lambda self: 4\n"
                "    __getattr__ = lambda self, name: self\n    __call__ = lambda self, *a, **k: self\n"
                "    __iter__ = lambda self: iter([self, self])\n    __getitem__ = lambda self, i: self\n"
                "    __float__ = lambda self: 1.0\n    __int__ = lambda self: 1\n    __index__ = lambda self: 1\n")
BUILTINS = ("import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.abs = lambda x: 0\n"
            "builtins.max = lambda *a, **k: 0\nbuiltins.all = lambda *a: True\n")
MEMORY_BOMB = "try:\n    _hog = bytearray(64 * 2**30)\nexcept MemoryError:\n    print('no memory for that')\n"


def escape(root: Path) -> str:
    """Read the course source, every other submission, the repository's chapters and root's
    home; run the functions found there; print what was read; write the gradebook and a file
    beside it."""
    patterns = ["../../../source/*/*.ipynb", f"{root}/source/*/*.ipynb", f"{root}/submitted/*/*/*.ipynb",
                f"{root}/autograded/*/*/*.ipynb", f"{CHAPTERS}/*.md", "/root/*"]
    targets = [(str(root / "gradebook.db"), "wb"), (str(root / "PWNED"), "w")]
    return (f"import glob, nbformat\n_stolen = []\nfor _pattern in {patterns!r}:\n"
            "    for _path in glob.glob(_pattern):\n"
            "        try:\n            _stolen.append(open(_path).read())\n        except Exception:\n            pass\n"
            "for _text in _stolen:\n    print(_text[:20000])\n"
            "    try:\n        for _cell in nbformat.reads(_text, 4).cells:\n"
            "            if 'def ' in _cell.source:\n                exec(_cell.source)\n"
            "    except Exception:\n        pass\n"
            f"for _target, _mode in {targets!r}:\n"
            "    try:\n        open(_target, _mode).write(b'pwned' if 'b' in _mode else 'pwned')\n"
            "    except Exception as _err:\n        print('could not write', type(_err).__name__)\n")


def fake_package(out_dir: Path) -> None:
    """A ``transformer_lib`` beside the untouched notebook whose ``check`` always passes."""
    pkg = out_dir / "transformer_lib" / "exercises"
    pkg.mkdir(parents=True)
    (out_dir / "transformer_lib" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(
        "class Result:\n    passed = True\n    def __bool__(self):\n        return True\n"
        "class _Exercise:\n    def run(self, answer):\n        return Result()\n"
        "def get(name):\n    return _Exercise()\n"
        "def check(name, answer, **kw):\n    print(f'PASS [{name}]: all test inputs match.')\n    return Result()\n")


def build(student: str, assignment: str, release, source, root: Path):
    """The notebook ``student`` submits for ``assignment``: the whole chapter for the students in
    WHOLE_CHAPTER, else without the chapter's demonstration cells."""
    nb = _build(student, assignment, release, source, root)
    return nb if student in WHOLE_CHAPTER else without_demonstrations(nb)


def _build(student: str, assignment: str, release, source, root: Path):
    if student == "solutions":
        return solved(release, source)
    if student in ("untouched", "fakepkg"):  # fakepkg: the files beside it are added by the fixture
        return nbformat.from_dict(release)
    if student == "partial":
        return solved(release, source, PARTIAL[assignment], wrong_elsewhere=True)
    if student == "lockededit":
        return locked_cells_edited(release, source)
    if student == "fakepass":
        return fake_pass_printed(release, source)
    lines = {"rebound": dict(each="check = lambda name, answer, **kw: True\n"),
             "runpatch": dict(first=PATCH_RUN),
             "allclose": dict(first=PATCH_COMPARE, wrong=True),
             "askref": dict(each=ASK_REFERENCE),
             "escape": dict(first=escape(root)),
             "kernelpatch": dict(first=KERNEL_PATCH),
             "orphan": dict(first=ORPHAN_CODE),
             "loop": dict(each="{answer} = lambda *a, **k: any(False for _ in iter(int, 1))\n", at=[0]),
             "membomb": dict(first=MEMORY_BOMB, each="{answer} = lambda *a, **k: bytearray(64 * 2**30)\n"),
             "alwayseq": dict(first=ALWAYS_EQUAL, each="{answer} = _Always()\n"),
             "builtins": dict(first=BUILTINS, wrong=True),
             "exitkernel": dict(first="import os\nos._exit(0)\n")}
    return with_lines(release, source, **lines[student])


def students_of(assignment: str) -> list[str]:
    return ["solutions", "untouched", "partial"] + ATTACKS[assignment]


def _orphans() -> list[int]:
    """Processes whose command line carries this run's orphan marker."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if ORPHAN.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def _grade_assignment(root: Path, name: str) -> dict:
    """Release ``name`` in the course at ``root``, write every submission of it and autograde them
    (bookkit.grading.autograde_class: one nbgrader autograde process for the class, each next
    kernel started while one submission runs)."""
    times = {f"generate_assignment {name}": nbgrader(root, "generate_assignment", name, "--force")}
    release = nbformat.read(str(root / "release" / name / f"{name}.ipynb"), as_version=4)
    source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
    for student in students_of(name):
        out = root / "submitted" / student / name / f"{name}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(build(student, name, release, source, root), str(out))
        if student == "fakepkg":
            fake_package(out.parent)
    inode = (root / "gradebook.db").stat().st_ino
    start = time.perf_counter()
    result = grading.autograde_class(root, name, extra=[f"--SandboxedExecute.call_timeout={CALL_TIMEOUT}",
                                                       f"--SandboxedExecute.timeout={CELL_TIMEOUT}",
                                                       "--SandboxedExecute.prestart=1"])
    times[f"autograde {name}"] = time.perf_counter() - start
    print(f"\nautograde {name}: {times[f'autograde {name}']:.1f} s for {len(result)} submissions")
    return {"times": times, "logs": {s: r["log"] for s, r in result.items()}, "gradebook_inode": inode}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course written by bookkit.course, once per assignment (each course holds both
    chapters' sources, so the escape attempt has other chapters' solutions to look for, and its
    own gradebook), released, submitted and autograded. The two courses are graded side by side:
    two nbgrader processes, never two writers of one SQLite gradebook."""
    from concurrent.futures import ThreadPoolExecutor
    if not grading.bwrap_available():
        pytest.skip("bwrap missing: make sandbox-deps")
    roots = {name: tmp_path_factory.mktemp(f"course-{name}") for name in ASSIGNMENTS}
    for root in roots.values():
        written = course.write_course(CHAPTERS, root, only=ASSIGNMENTS)
        assert [p.stem for p in written] == ASSIGNMENTS
    with ThreadPoolExecutor(max_workers=len(ASSIGNMENTS)) as pool:
        done = dict(zip(ASSIGNMENTS, pool.map(_grade_assignment, roots.values(), ASSIGNMENTS)))
    orphans = _orphans()
    for pid in orphans:  # started through this test's submissions: stopped by their ids
        os.kill(pid, 9)
    return {"roots": roots, "times": {k: v for d in done.values() for k, v in d["times"].items()},
            "logs": {name: d["logs"] for name, d in done.items()}, "orphans": orphans,
            "gradebook_inode": {name: d["gradebook_inode"] for name, d in done.items()}}


def scores(root: Path, assignment: str, student: str) -> list[float]:
    """Points per exercise, in notebook order, from nbgrader's gradebook."""
    source = nbformat.read(str(root / "source" / assignment / f"{assignment}.ipynb"), as_version=4)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
        return [gb.find_grade(_meta(c)["grade_id"], assignment, assignment, student).score
                for c in graded_cells(source)]



# -- the source notebooks ------------------------------------------------------------------------------

def test_every_chapter_with_exercises_becomes_an_assignment(tmp_path):
    from transformer_lib.exercises import REGISTRY
    written = course.write_course(CHAPTERS, tmp_path)
    graded = {}
    for path in written:
        nb = nbformat.read(str(path), as_version=4)
        for cell in graded_cells(nb):
            (name,) = check_names(cell.source)
            graded[name] = _meta(cell)["points"]
            assert _meta(cell)["locked"] and cell.source.lstrip().startswith(("assert check(", "from "))
        assert len(answer_cells(nb)) == len(graded_cells(nb))
        assert not any("solution" in c.metadata.get("tags", []) or "exercise" in c.metadata.get("tags", [])
                       for c in nb.cells)
    in_chapters = {n for path in chapter_files(CHAPTERS)
                   for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"
                   for n in check_names(c.source)}
    assert set(graded) == in_chapters, "every exercise checked in a chapter is a graded cell"
    assert set(graded) <= set(REGISTRY)
    assert all(p == course.POINTS for p in graded.values())
    config = (tmp_path / "nbgrader_config.py").read_text()
    assert "c.CourseDirectory.course_id" in config and "ClearHiddenTests" in config


def test_a_solution_cell_keeps_the_def_line_and_the_stub_hint():
    stub = "def f(x):\n    # YOUR CODE HERE: double it\n    ...\n"
    solution = "def f(x):\n    # twice\n    return 2 * x  # (B, L)\n"
    assert course.solution_source(stub, solution) == (
        "def f(x):\n    # YOUR CODE HERE: double it\n    ### BEGIN SOLUTION\n    # twice\n"
        "    return 2 * x  # (B, L)\n    ### END SOLUTION")
    with pytest.raises(ValueError, match="exactly one exercise"):
        course.graded_source("x = 1")


def test_release_has_stubs_and_no_solutions_or_hidden_tests(graded):
    for name, root in graded["roots"].items():
        release = (root / "release" / name / f"{name}.ipynb").read_text()
        source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
        for answer in instructor_answers(source):
            body = answer.strip().split("\n")[-1].strip()  # the solution's last line (its return)
            assert body not in release
        assert "HIDDEN TESTS" not in release and "_get_exercise" not in release
        assert release.count(course.CODE_STUB) == len(answer_cells(source))


def test_a_graded_cell_is_the_same_in_source_and_release(graded):
    """No hidden part: the released check cell is the source's, so its checksum matches."""
    for name, root in graded["roots"].items():
        source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
        release = nbformat.read(str(root / "release" / name / f"{name}.ipynb"), as_version=4)
        assert [c.source for c in graded_cells(source)] == [c.source for c in graded_cells(release)]


# -- grading ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_instructor_solutions_get_full_marks_without_checksum_warnings(graded, assignment):
    assert scores(graded["roots"][assignment], assignment, "solutions") == [course.POINTS] * EXERCISES[assignment]
    for student in ("solutions", "untouched", "partial"):
        assert "has changed" not in graded["logs"][assignment][student]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_partial_answer_gets_exactly_the_solved_exercises(graded, assignment):
    expected = [course.POINTS if n in PARTIAL[assignment] else 0 for n in range(EXERCISES[assignment])]
    assert scores(graded["roots"][assignment], assignment, "partial") == expected


def _solutions_still_in_the_package() -> bool:
    from transformer_lib.exercises import REGISTRY
    return any(getattr(e, "solution", None) for e in REGISTRY.values())


@pytest.mark.parametrize("assignment, student", [(a, s) for a in ASSIGNMENTS for s in ["untouched"] + ATTACKS[a]])
def test_untouched_and_every_attack_get_zero(graded, assignment, student, request):
    if student == "askref" and _solutions_still_in_the_package():
        request.applymarker(pytest.mark.xfail(strict=True, reason="the registry still ships solutions"))
    assert scores(graded["roots"][assignment], assignment, student) == [0] * EXERCISES[assignment]


def test_autograded_check_cells_are_the_instructors_and_files_beside_are_dropped(graded):
    roots = graded["roots"]
    nb = nbformat.read(str(roots["01-attention"] / "autograded" / "lockededit" / "01-attention" / "01-attention.ipynb"), 4)
    assert all(c.source.lstrip().startswith(("assert check(", "from ")) for c in graded_cells(nb))
    assert all("assert True" not in c.source for c in graded_cells(nb))
    for name, root in roots.items():
        assert [p.name for p in (root / "autograded" / "fakepkg" / name).iterdir()] == [f"{name}.ipynb"]


def test_the_sandbox_kept_the_course_and_the_machine_safe(graded):
    """The escape attempt read nothing and wrote nothing; no forked process outlived grading."""
    for name, root in graded["roots"].items():
        assert not (root / "PWNED").exists()
        assert (root / "gradebook.db").stat().st_ino == graded["gradebook_inode"][name]
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
            assert {s.id for s in gb.students} == set(students_of(name))
    root = graded["roots"]["01-attention"]
    escaped = nbformat.read(str(root / "autograded" / "escape" / "01-attention" / "01-attention.ipynb"), 4)
    first = answer_cells(escaped)[0]
    printed = "".join(o.get("text", "") for o in first.outputs)
    assert "could not write" in printed  # the attack ran, and its writes failed
    assert graded["orphans"] == [], "a process started by a submission outlived its grading"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_has_scores_verdicts_and_no_solution(graded, assignment):
    root, times = graded["roots"][assignment], graded["times"]
    times[f"generate_feedback {assignment}"] = nbgrader(root, "generate_feedback", assignment)
    source = nbformat.read(str(root / "source" / assignment / f"{assignment}.ipynb"), as_version=4)
    secret = [line.strip() for answer in instructor_answers(source) for line in answer.split("\n")
              if line.strip().startswith("return ")]
    n = EXERCISES[assignment]
    totals = {"solutions": n, "partial": len(PARTIAL[assignment]), "untouched": 0, **{a: 0 for a in ATTACKS[assignment]}}
    for student, total in totals.items():
        page = (root / "feedback" / student / assignment / f"{assignment}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code as a student reads it
        assert f"Score: {float(total)} / {float(n)}" in text
        assert "HIDDEN TESTS" not in text and "_get_exercise" not in text
        assert "assert check(" in text  # the check cells stay
        verdicts = re.findall(r"(PASS|NOT YET) \[", text)
        assert len(verdicts) >= n if student not in ("exitkernel", "kernelpatch") else True
        if student != "solutions":  # the instructor's returns reach no other student's page
            leaked = [line for line in secret if line in text and line not in (root / "submitted" / student /
                      assignment / f"{assignment}.ipynb").read_text()]
            assert not leaked, f"{student}'s feedback shows solution lines {leaked}"
        assert total == n or "NOT YET [" in text  # a failed check says so
        if student == "loop":  # the endless loop was stopped by the call's time limit, and the
            # kernel answered the next exercise's calls (its stub's NotImplementedError)
            assert f"took longer than {CALL_TIMEOUT} s" in text and "NotImplementedError" in text


def test_grades_export_to_csv(graded):
    table = {}
    for root in graded["roots"].values():
        nbgrader(root, "export", "--to", str(root / "grades.csv"))
        rows = (root / "grades.csv").read_text().strip().split("\n")
        header = rows[0].split(",")
        table.update({(r.split(",")[0], r.split(",")[3]): float(r.split(",")[header.index("score")])
                      for r in rows[1:]})
    assert table[("01-attention", "solutions")] == 4.0
    assert table[("15-tokenization", "solutions")] == 3.0
    assert table[("15-tokenization", "partial")] == 1.0
    assert table[("01-attention", "runpatch")] == 0.0


# -- the sandbox and the data it lets back ------------------------------------------------------

def test_decode_takes_data_only():
    import numpy as np
    import torch
    assert grading.decode(["tuple", [["int", 3], ["tensor", torch.ones(2)]]])[0] == 3
    assert grading.decode(["ndarray", torch.zeros(2)]).dtype == np.float32
    assert grading.decode(["dict", [[["tuple", [["int", 1], ["int", 2]]], ["int", 5]]]]) == {(1, 2): 5}
    for bad in [["int", True], ["float", "1"], ["tensor", np.ones(2)], ["function"], ["dict", [[1, 2, 3]]],
                "x", [], ["eval", "1"]]:
        with pytest.raises(grading.KernelError):
            grading.decode(bad)
    with pytest.raises(grading.KernelError, match="nests too deeply"):
        node = ["none"]
        for _ in range(40):
            node = ["list", [node]]
        grading.decode(node)


def test_read_result_refuses_links_and_objects(tmp_path):
    import pickle
    import torch
    good = tmp_path / "good.pt"
    torch.save(["ok", ["int", 1]], good)
    assert grading.read_result(str(good)) == ["ok", ["int", 1]]
    link = tmp_path / "link.pt"
    link.symlink_to(good)
    with pytest.raises(grading.KernelError, match="no result"):
        grading.read_result(str(link))
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(Path("/"), protocol=2))  # any object that is not plain data
    with pytest.raises(grading.KernelError, match="cannot be read as data"):
        grading.read_result(str(evil))


@requires_bwrap
def test_the_sandbox_has_no_network_course_or_root_rights(tmp_path):
    (tmp_path / "io").mkdir()
    probe = ("import os, socket, json\nres = {'uid': os.getuid(), 'cwd': os.getcwd(), 'home': os.listdir('/tmp')}\n"
             f"res['repo'] = sorted(os.listdir({str(CHAPTERS.parent)!r}))\n"
             "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1); res['net'] = True\n"
             "except OSError:\n    res['net'] = False\n"
             f"try:\n    open({str(CHAPTERS / 'x')!r}, 'w'); res['write'] = True\nexcept OSError:\n    res['write'] = False\n"
             f"open({str(tmp_path / 'io' / 'out.json')!r}, 'w').write(json.dumps(res))\n")
    cmd = grading.sandbox_command([sys.executable, "-c", probe], writable=[str(tmp_path / "io")],
                                  env=grading.kernel_environment())
    subprocess.run(cmd, check=True, timeout=120)
    import json
    res = json.loads((tmp_path / "io" / "out.json").read_text())
    assert res["uid"] == grading.NOBODY and res["cwd"] == "/tmp/home"
    assert res["net"] is False and res["write"] is False
    assert "chapters" not in res["repo"] and "tests" not in res["repo"]  # only the library and the venv
    with pytest.raises(ValueError, match="memory_bytes"):
        grading.sandbox_command(["x"], writable=[], memory_bytes=0)


WIDGET_CELL = ("import ipywidgets as W\n"
               "def _show(x):\n    print('x is', x)\n"
               "display(W.VBox([W.IntSlider(3), W.interactive_output(_show, {'x': W.IntSlider(3)})]))\n")


def _run_widget_cell(monkeypatch, executor) -> tuple[list[str], str]:
    """Run WIDGET_CELL (an ``interactive_output``, the kind every ``explore`` makes) through
    ``executor``; return the types of the messages the grader sent the kernel, and the cell's stdout."""
    from jupyter_client.channels import ZMQSocketChannel
    sent, send = [], ZMQSocketChannel.send

    def recording(channel, msg):
        sent.append(msg["header"]["msg_type"])
        return send(channel, msg)

    monkeypatch.setattr(ZMQSocketChannel, "send", recording)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WIDGET_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor.preprocess(nb, {})
    cell = nb.cells[0]
    assert not [o for o in cell.outputs if o.get("output_type") == "error"], cell.outputs
    return sent, "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


@requires_bwrap
def test_the_grader_sends_the_kernel_nothing_during_a_widget_cell(monkeypatch):
    """The lost reply at chapter 1's explore cells: nbclient's Output-widget mimic sent the
    widget's state to the kernel on the shell socket while the same client polled that socket for
    the cell's reply. SandboxedExecute mimics no widget: the only shell message of the cell is its
    execute_request, and what the widget printed is the cell's own output."""
    sent, printed = _run_widget_cell(monkeypatch, grading.SandboxedExecute(timeout=120, prestart=0))
    assert "comm_msg" not in sent, sent
    assert sent.count("execute_request") == 1, sent
    assert "x is 3" in printed


# -- make progress: the same regrade, for a learner --------------------------------------------------

def test_progress_regrades_and_ignores_printed_pass_lines(tmp_path):
    """`make progress` on a student copy of chapter 0: a check cell edited to print PASS (and a
    saved PASS output) reads "not yet"; the real answer reads "passed"."""
    from bookkit import copies, progress
    from bookkit.conventions import is_check_cell
    full = nbformat.read(str(CHAPTERS / "00-how-to-use.ipynb"), as_version=4)
    solution = next(c.source for c in full.cells if "solution" in c.metadata.get("tags", []))
    cheat = copies.student_notebook(full)
    for cell in cheat.cells:
        if is_check_cell(cell):
            cell.source = ('from transformer_lib.exercises import check\n'
                           'print("PASS [intro.mean_of_squares]: all test inputs match.")')
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="PASS [intro.mean_of_squares]\n")]
    (tmp_path / "cheat").mkdir()
    nbformat.write(cheat, str(tmp_path / "cheat" / "00-how-to-use.ipynb"))
    assert progress.notebook_progress(tmp_path / "cheat" / "00-how-to-use.ipynb") == {"intro.mean_of_squares": "not yet"}

    solved = copies.student_notebook(full)
    next(c for c in solved.cells if "exercise" in c.metadata.get("tags", [])).source = solution
    (tmp_path / "solved").mkdir()
    nbformat.write(solved, str(tmp_path / "solved" / "00-how-to-use.ipynb"))
    assert progress.notebook_progress(tmp_path / "solved" / "00-how-to-use.ipynb") == {"intro.mean_of_squares": "passed"}
