"""An nbgrader course from the chapters: every chapter an assignment, every check a graded cell.

    python -m bookkit.course chapters dist/course            # source notebooks + nbgrader_config.py
    python -m bookkit.course chapters dist/course --release  # ... and `nbgrader generate_assignment`

``make progress`` runs the checkers in the learner's own kernel, so it tells a learner what is
left; it cannot stop a learner who edits a check cell. A course that counts the marks uses nbgrader,
which keeps its own copy of every locked cell. This module writes the nbgrader *source* notebooks
mechanically from the chapter conventions (:mod:`bookkit.conventions`); the checkers in
``transformer_lib.exercises`` stay the only judge of what is right:

- the ``exercise`` stub and its ``solution`` cell merge into one nbgrader solution cell: the
  ``def`` line and the stub's ``# YOUR CODE HERE`` comment are kept, the solution's body sits
  between ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (the release has
  ``raise NotImplementedError()`` there, which the checker reports as "not yet");
- each check cell ``check("name", answer)`` becomes a locked, autograded cell
  ``assert check("name", answer)`` worth ``points`` points, with no hidden part: the release's
  cell is the source's, so an honest submission's checksums match and nbgrader warns only about
  real edits.

The course's ``nbgrader_config.py`` replaces nbgrader's ``Execute`` with
:class:`bookkit.grading.SandboxedExecute`: the notebook runs in a sandboxed kernel and a graded
cell is decided by the trusted checker in the autograder's process, never by code in the
student's kernel (see :mod:`bookkit.grading` for what that stops and what it does not).
"""
from __future__ import annotations

import argparse
import ast
import copy
import re
import subprocess
import sys
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from bookkit.conventions import (EXERCISE, KERNELSPEC, SOLUTION, chapter_files, check_names,
                                 is_check_cell, tags_of)

__all__ = ["COURSE_ID", "POINTS", "GradedCellTracebacks", "grade_id", "check_call", "regrade_source",
           "solution_source", "graded_source", "source_notebook", "write_course", "nbgrader_config", "release"]

COURSE_ID = "transformers-interactively"
POINTS = 1                                   # per exercise: every checked exercise counts the same
EXCHANGE = "/srv/nbgrader/exchange"          # nbgrader's default; NBGRADER_EXCHANGE overrides it
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = "raise NotImplementedError()"    # what the release has between the markers
CHECK_STATEMENT = re.compile(r"^(\s*)check\(", re.M)


def grade_id(name: str, suffix: str = "") -> str:
    """nbgrader's id for an exercise's cells: ``attention.scores`` -> ``attention-scores``."""
    return name.replace(".", "-") + (f"-{suffix}" if suffix else "")


def _nbgrader(gid: str, *, solution: bool, grade: bool, points: int = 0) -> dict:
    meta = {"grade": grade, "grade_id": gid, "locked": not solution, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _only_function(source: str) -> ast.FunctionDef | None:
    """The cell's single top-level function, or None when the cell holds anything else."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if len(body) == 1 and isinstance(body[0], ast.FunctionDef):
        return body[0]
    return None


def _split(source: str, fn: ast.FunctionDef) -> tuple[list[str], list[str]]:
    """(header lines up to the ``def ...:`` line, body lines). Comments between the header and the
    first statement belong to the body."""
    lines = source.rstrip("\n").split("\n")
    first = fn.body[0].lineno - 1
    if fn.body[0].col_offset == 0 or first == fn.lineno - 1:  # `def f(): return x` on one line
        raise ValueError(f"write the function {fn.name!r} with its body on its own lines")
    end = first
    while end > fn.lineno - 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return lines[:end], lines[end:]


def solution_source(stub: str, solution: str) -> str:
    """One nbgrader solution cell from an ``exercise`` stub and its ``solution`` cell.

    A single function keeps its ``def`` line and the stub's comments; its body goes between the
    solution markers. Any other solution cell is wrapped whole."""
    fn = _only_function(solution)
    if fn is None:
        hints = [l for l in stub.split("\n") if l.lstrip().startswith("#")]
        return "\n".join(hints + [BEGIN, solution.rstrip("\n"), END])
    header, body = _split(solution, fn)
    first_line = next(l for l in body if l.strip())
    indent = re.match(r"\s*", first_line).group(0)
    stub_fn = _only_function(stub)
    hints = []
    if stub_fn is not None:
        _, stub_body = _split(stub, stub_fn)
        hints = [l for l in stub_body if l.lstrip().startswith("#")]
    return "\n".join(header + hints + [indent + BEGIN] + body + [indent + END])


def check_call(check_cell: str) -> tuple[str, str]:
    """(exercise name, answer expression) of a check cell ``check("name", answer)``."""
    names = check_names(check_cell)
    if len(names) != 1:
        raise ValueError(f"a check cell must check exactly one exercise, found {names or 'none'}")
    calls = [node for node in ast.walk(ast.parse(check_cell)) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) == "check"]
    if len(calls) != 1 or len(calls[0].args) != 2:
        raise ValueError(f"expected one call check({names[0]!r}, answer) in {check_cell!r}")
    return names[0], ast.get_source_segment(check_cell, calls[0].args[1])


def regrade_source(name: str, answer: str) -> str:
    """An expression, True only when the registry's checker passes ``answer`` (no printed text)."""
    return f"_get_exercise({name!r}).run({answer}).passed is True"


def graded_source(check_cell: str) -> str:
    """``check("name", answer)`` -> ``assert check("name", answer)``: what a student sees and runs.
    The autograder does not run it; it reads the exercise and the answer expression from it."""
    check_call(check_cell)  # exactly one exercise, one answer
    visible = CHECK_STATEMENT.sub(r"\1assert check(", check_cell.rstrip("\n"))
    if visible == check_cell.rstrip("\n"):
        raise ValueError(f"the check call must be a statement of its own: {check_cell!r}")
    return visible


def source_notebook(nb, points: int = POINTS):
    """nbgrader source notebook of a chapter (a nbformat notebook); ``nb`` is left unchanged."""
    nb = copy.deepcopy(nb)
    cells, stub, solution = [], None, None
    for cell in nb.cells:
        tags = tags_of(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if EXERCISE in tags:
            stub = cell.source
            continue
        if SOLUTION in tags:
            solution = cell
            continue
        if is_check_cell(cell):
            (name,) = check_names(cell.source)
            if solution is None:
                raise ValueError(f"check {name!r} has no solution cell before it")
            solution.source = solution_source(stub or "", solution.source)
            solution.metadata["nbgrader"] = _nbgrader(grade_id(name, "answer"), solution=True, grade=False)
            solution.metadata["tags"] = [t for t in tags_of(solution) if t not in (SOLUTION, "hide-input")]
            cell.source = graded_source(cell.source)
            cell.metadata["nbgrader"] = _nbgrader(grade_id(name), solution=False, grade=True, points=points)
            cells += [solution, cell]
            stub = solution = None
            continue
        cells.append(cell)
    if solution is not None:
        raise ValueError("a solution cell has no check cell after it")
    nb.cells = cells
    for key in ("jupytext", "widgets"):
        nb.metadata.pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return nb


class GradedCellTracebacks(Preprocessor):
    """Feedback: an error in a graded cell shows its type and message only.

    ``ClearHiddenTests`` removes the hidden lines from the cell's source, but a failing assert's
    traceback quotes the lines around it, hidden ones included. The checker's printed verdict
    (``NOT YET [name]: what differs. Hint: ...``) stays: that is the feedback that helps."""

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")]
        return cell, resources


def nbgrader_config(course_id: str = COURSE_ID) -> str:
    """The course's ``nbgrader_config.py``."""
    return f'''"""nbgrader configuration of the course, written by `make course` (bookkit/course.py)."""
import os
import sys

c = get_config()  # noqa: F821  (defined by nbgrader when it loads this file)

c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# one exchange per machine (nbgrader's default); a test or a hub sets NBGRADER_EXCHANGE
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", {EXCHANGE!r})
# the released stub: the checker reports "your function still raises NotImplementedError"
c.ClearSolutions.code_stub = {{"python": {CODE_STUB!r}}}
# feedback without the hidden tests (nbgrader shows them unless told otherwise), nor the
# tracebacks that would quote them
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "bookkit.course.GradedCellTracebacks",
    "bookkit.grading.SafeOutputs",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# the submission's cells and metadata are rebuilt from the gradebook before nbgrader's own
# checks (bookkit.grading.TrustedCells): forged nbgrader metadata neither scores nor stops grading
c.Autograde.sanitize_preprocessors = [
    "bookkit.grading.TrustedCells",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# autograde takes only the notebooks of a submission (no folder beside them is copied), and
# runs them with bookkit.grading.SandboxedExecute instead of nbgrader's Execute: a kernel in a
# bubblewrap sandbox, graded cells decided by the trusted checker in this process
c.CourseDirectory.include = ["*.ipynb"]
if sys.argv[1:2] == ["autograde"]:
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*"]
c.Autograde.autograde_preprocessors = [
    "bookkit.grading.SandboxedExecute",
    "bookkit.grading.SafeOutputs",       # no student HTML or script in the formgrader's pages
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.SandboxedExecute.timeout = 300        # a chapter's cell: a chapter runs in <= 60 s on two cores
c.SandboxedExecute.call_timeout = 60    # one call of a student's function by a checker
c.SandboxedExecute.notebook_timeout = 600  # a whole submission, cells and checks: bounds a class's time
c.SandboxedExecute.memory_bytes = {4 * 2**30}  # address space of the sandboxed kernel
c.SandboxedExecute.cpu_seconds = 900
c.SandboxedExecute.max_processes = 128  # processes and threads of one kernel: a fork bomb stops there
c.SandboxedExecute.prestart = 1         # the next kernel starts while this one runs
# the sandboxed kernel's environment is bookkit.grading.kernel_environment() (CPU, one thread,
# PYTHONSAFEPATH=1); these are for the generate_assignment/feedback steps run here
os.environ.setdefault("TLIB_DEVICE", "cpu")
os.environ.setdefault("TLIB_STATIC_WIDGETS", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
'''


def write_course(chapters: str | Path, dest: str | Path, course_id: str = COURSE_ID,
                 points: int = POINTS, only: list[str] | None = None) -> list[Path]:
    """Write ``dest/nbgrader_config.py`` and ``dest/source/NN-slug/NN-slug.ipynb`` per chapter."""
    import nbformat
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "nbgrader_config.py").write_text(nbgrader_config(course_id))
    written = []
    for path in chapter_files(chapters):
        if only and path.stem not in only:
            continue
        nb = source_notebook(nbformat.read(str(path), as_version=4), points)
        if not any("nbgrader" in c.metadata for c in nb.cells):
            continue  # a chapter without exercises is no assignment
        out = dest / "source" / path.stem / path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(out))
        written.append(out)
    return written


def release(course: str | Path, assignments: list[str]) -> None:
    """``nbgrader generate_assignment`` for each assignment (writes ``release/`` and the gradebook)."""
    import os
    # nbgrader runs `alembic` (its database migrations) from PATH: the venv's own
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in assignments:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"],
                       cwd=course, env=env, check=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.course")
    parser.add_argument("chapters", help="folder with the executed chapter notebooks (chapters/)")
    parser.add_argument("dest", help="the course directory, e.g. dist/course")
    parser.add_argument("--course-id", default=COURSE_ID)
    parser.add_argument("--points", type=int, default=POINTS, help="points per exercise")
    parser.add_argument("--release", action="store_true", help="also run nbgrader generate_assignment")
    parser.add_argument("--only", nargs="*", help="chapter stems to include (default: all)")
    args = parser.parse_args(argv)
    written = write_course(args.chapters, args.dest, args.course_id, args.points, args.only)
    print(f"wrote {len(written)} assignments and nbgrader_config.py to {args.dest}")
    if args.release:
        release(args.dest, [p.stem for p in written])
    return 0


if __name__ == "__main__":
    sys.exit(main())
