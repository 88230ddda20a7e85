"""A learner's progress: the library's checkers run on the learner's answers, tabulated.

    python -m bookkit.progress dist/student/           # runs each notebook, then regrades (make progress)
    python -m bookkit.progress chapters/ --no-execute  # reads the saved PASS lines: a quick look only

By default each notebook runs top to bottom, and then one cell added at the end asks the registry
(``transformer_lib.exercises.get(name).run(answer)``) about every exercise of the chapter: the
same regrade as the hidden test of the graded course (:mod:`bookkit.course`). The exercise names
and answer names come from the book's own chapter (``chapters/NN-slug.ipynb``), not from the
learner's check cells, and the verdicts come back as display data tagged with a one-time nonce,
never as printed text: printing ``PASS [name]`` or editing a check cell changes nothing.
``error`` means the answer was never defined (a cell before it raised).

``--no-execute`` reads the ``PASS`` / ``NOT YET`` lines saved in the notebooks: it trusts the
notebook, which is fine for a learner's own quick look and useless for grading. Grade a class with
nbgrader (``make course``, book/course-guide.md).
"""
from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from .conventions import CHAPTERS, VERDICT, chapter_files, check_names, execute_notebook, is_check_cell
from .course import check_call, regrade_source

__all__ = ["notebook_progress", "progress_table", "chapter_checks", "regrade_cell"]

MIME = "application/x-bookkit-progress+json"


def chapter_checks(path: str | Path) -> list[tuple[str, str]]:
    """(exercise name, answer expression) for every check of a chapter, from the book's own copy
    of the chapter when there is one (a learner's edited check cell does not count)."""
    import nbformat
    path = Path(path)
    book = CHAPTERS / path.name
    nb = nbformat.read(str(book if book.exists() else path), as_version=4)
    return [check_call(c.source) for c in nb.cells if is_check_cell(c)]


def regrade_cell(checks: list[tuple[str, str]], nonce: str) -> str:
    """The cell run after the learner's notebook: every verdict from the registry, as display data."""
    lines = ["from IPython.display import display as _display",
             "from transformer_lib.exercises import get as _get_exercise",
             "_verdicts = {}"]
    for name, answer in checks:
        lines += ["try:",
                  f"    _verdicts[{name!r}] = 'passed' if {regrade_source(name, answer)} else 'not yet'",
                  "except Exception:  # the answer was never defined",
                  f"    _verdicts[{name!r}] = 'error'"]
    lines.append(f"_display({{{MIME!r}: {{'nonce': {nonce!r}, 'verdicts': _verdicts}}}}, raw=True)")
    return "\n".join(lines)


def _stream_text(nb) -> str:
    return "\n".join(out.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for out in c.get("outputs", []) if out.get("output_type") == "stream")


def notebook_progress(path: str | Path, execute: bool = True, timeout: int = 600) -> dict[str, str]:
    """{exercise name: 'passed' | 'not yet' | 'error'} for one notebook."""
    import nbformat
    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    if not execute:  # the saved outputs, as the notebook says
        names = [n for c in nb.cells if c.cell_type == "code" for n in check_names(c.source)]
        verdicts = {name: ("passed" if v == "PASS" else "not yet") for v, name in VERDICT.findall(_stream_text(nb))}
        return {name: verdicts.get(name, "error") for name in dict.fromkeys(names)}
    checks = chapter_checks(path)
    nonce = secrets.token_hex(16)
    nb.cells.append(nbformat.v4.new_code_cell(regrade_cell(checks, nonce)))
    # no need to precompute the widgets' static renderings here
    execute_notebook(nb, path.parent, timeout=timeout, allow_errors=True, env={"TLIB_STATIC_WIDGETS": "0"},
                     widgets=False)
    found = [out["data"][MIME] for out in nb.cells[-1].get("outputs", [])
             if out.get("output_type") == "display_data" and MIME in out.get("data", {})]
    verdicts = next((f["verdicts"] for f in found if f.get("nonce") == nonce), {})
    return {name: verdicts.get(name, "error") for name, _ in checks}


def progress_table(folder: str | Path, execute: bool = True) -> list[tuple[str, str, str]]:
    rows = []
    for path in chapter_files(folder):
        for name, status in notebook_progress(path, execute).items():
            rows.append((path.stem, name, status))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.progress")
    parser.add_argument("folder", help="folder with chapter notebooks (a learner's copy)")
    parser.add_argument("--no-execute", action="store_true",
                        help="read the saved PASS lines instead of running (trusts the notebook)")
    args = parser.parse_args(argv)
    rows = progress_table(args.folder, execute=not args.no_execute)
    if not rows:
        print(f"no exercises found in {args.folder}")
        return 1
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    print(f"{'chapter':<{w1}}  {'exercise':<{w2}}  status")
    print(f"{'-' * w1}  {'-' * w2}  -------")
    for chapter, name, status in rows:
        print(f"{chapter:<{w1}}  {name:<{w2}}  {status}")
    passed = sum(r[2] == "passed" for r in rows)
    print(f"\n{passed} of {len(rows)} exercises passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
