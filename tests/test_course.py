"""The graded course, end to end with real nbgrader: `make course` -> generate_assignment ->
submissions -> autograde -> feedback, on two chapters.

Submissions are built from the released notebook the way a student would change it: the
instructor's solutions (full marks), the untouched release (zero), releases that cheat (locked
check cells edited to pass, fake ``PASS`` lines printed or saved as outputs, ``check`` rebound in an
answer cell: zero), and a partial answer (exactly the solved exercises score). The expected scores
come from which answers the test wrote, never from the grader. The grading time per submission is
printed (the course guide quotes it).
"""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from bookkit import course  # noqa: E402
from bookkit.conventions import CHAPTERS, chapter_files, check_names  # noqa: E402

# two chapters with four exercises each; the partial answers solve the listed positions
PARTIAL = {"01-attention": {"solve": [0, 2], "wrong": {1: "def my_attention(q, k, v):\n"
                                                        "    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)\n"
                                                        "    return w @ v, w  # forgot the 1/sqrt(d_k)\n"}},
           "04-masking": {"solve": [0, 3], "wrong": {}}}
ASSIGNMENTS = list(PARTIAL)
CHEATS = {"01-attention": ["lockededit", "fakepass", "rebound"], "04-masking": ["fakepass"]}  # keeps the run short
MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)


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


# -- the submissions ---------------------------------------------------------------------------------

def solved(release, source, positions=None, wrong=None):
    nb = nbformat.from_dict(release)
    answers = instructor_answers(source)
    for n, cell in enumerate(answer_cells(nb)):
        if positions is None or n in positions:
            cell.source = answers[n]
        if wrong and n in wrong:
            cell.source = wrong[n]
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


def check_rebound(release, source):
    """Stubs left; every answer cell rebinds `check`, so the visible asserts after the import pass."""
    nb = nbformat.from_dict(release)
    for cell in answer_cells(nb):
        cell.source += "\n\ncheck = lambda name, answer, **kw: True\n"
    return nb


SUBMISSIONS = {  # student -> how the notebook is built from (release, source)
    "solutions": lambda rel, src: solved(rel, src),
    "untouched": lambda rel, src: nbformat.from_dict(rel),
    "lockededit": locked_cells_edited,
    "fakepass": fake_pass_printed,
    "rebound": check_rebound,
    "partial": None,  # per chapter, from PARTIAL
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course written by bookkit.course, both assignments released, submitted and autograded."""
    root = tmp_path_factory.mktemp("course")
    written = course.write_course(CHAPTERS, root, only=ASSIGNMENTS)
    assert [p.stem for p in written] == ASSIGNMENTS
    times = {}
    for name in ASSIGNMENTS:
        times[f"generate_assignment {name}"] = nbgrader(root, "generate_assignment", name, "--force")
        release = nbformat.read(str(root / "release" / name / f"{name}.ipynb"), as_version=4)
        source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
        students = [s for s in SUBMISSIONS if s in ("solutions", "untouched", "partial") or s in CHEATS[name]]
        for student in students:
            build = SUBMISSIONS[student]
            if student == "partial":
                nb = solved(release, source, PARTIAL[name]["solve"], PARTIAL[name]["wrong"])
            else:
                nb = build(release, source)
            out = root / "submitted" / student / name / f"{name}.ipynb"
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(out))
        seconds = nbgrader(root, "autograde", name)  # every student of the assignment in one run
        times[f"autograde {name}"] = seconds
        print(f"\nautograde {name}: {seconds:.1f} s for {len(students)} submissions, "
              f"{seconds / len(students):.1f} s per submission")
    return root, times


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
    root, _ = graded
    for name in ASSIGNMENTS:
        release = (root / "release" / name / f"{name}.ipynb").read_text()
        source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
        for answer in instructor_answers(source):
            body = answer.strip().split("\n")[-1].strip()  # the solution's last line (its return)
            assert body not in release
        assert "HIDDEN TESTS" not in release and "_get_exercise" not in release
        assert release.count(course.CODE_STUB) == len(answer_cells(source))


# -- grading ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_instructor_solutions_get_full_marks(graded, assignment):
    assert scores(graded[0], assignment, "solutions") == [course.POINTS] * 4


@pytest.mark.parametrize("assignment, student", [(a, s) for a in ASSIGNMENTS for s in ["untouched"] + CHEATS[a]])
def test_untouched_and_cheating_submissions_get_zero(graded, assignment, student):
    assert scores(graded[0], assignment, student) == [0] * 4


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_partial_answer_gets_exactly_the_solved_exercises(graded, assignment):
    expected = [course.POINTS if n in PARTIAL[assignment]["solve"] else 0 for n in range(4)]
    assert scores(graded[0], assignment, "partial") == expected


def test_autograded_check_cells_are_the_instructors(graded):
    root, _ = graded
    nb = nbformat.read(str(root / "autograded" / "lockededit" / "01-attention" / "01-attention.ipynb"), 4)
    assert all(c.source.lstrip().startswith(("assert check(", "from ")) for c in graded_cells(nb))
    assert all("assert True" not in c.source for c in graded_cells(nb))


def test_feedback_has_scores_and_no_hidden_tests(graded):
    root, times = graded
    for name in ASSIGNMENTS:
        times[f"generate_feedback {name}"] = nbgrader(root, "generate_feedback", name)
        students = [("solutions", 4), ("partial", 2)] + [(cheat, 0) for cheat in CHEATS[name]]
        for student, total in students:  # the cheats' failing asserts are in hidden code too
            page = (root / "feedback" / student / name / f"{name}.html").read_text()
            text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code as a student reads it
            assert f"Score: {float(total)} / 4.0" in text
            assert "HIDDEN TESTS" not in text and "_get_exercise" not in text
            assert "assert check(" in text  # the visible tests stay
            assert total == 4 or "AssertionError" in text  # a failed check says so


def test_grades_export_to_csv(graded):
    root, _ = graded
    nbgrader(root, "export", "--to", str(root / "grades.csv"))
    rows = (root / "grades.csv").read_text().strip().split("\n")
    header = rows[0].split(",")
    table = {(r.split(",")[0], r.split(",")[3]): float(r.split(",")[header.index("score")]) for r in rows[1:]}
    assert table[("01-attention", "solutions")] == 4.0
    assert table[("04-masking", "partial")] == 2.0
    assert table[("04-masking", "fakepass")] == 0.0


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
