"""Student and instructor copies of the chapters.

    python -m bookkit.copies student chapters/ dist/student
    python -m bookkit.copies instructor chapters/ dist/instructor

A student copy of a chapter notebook has no solution cells (tag ``solution``), no outputs on the
exercise stubs (tag ``exercise``) or on the check cells, and every other output kept, so a
student reads the same figures as the book but has to write the answers. Run top to bottom, it
executes without error: each checker reports "NOT YET" on the stub. The instructor copy is the
full executed notebook plus its MyST source.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .conventions import EXERCISE, SOLUTION, chapter_files, is_check_cell, tags_of

__all__ = ["student_notebook", "write_student", "write_instructor"]


def _clear(cell) -> None:
    cell.outputs = []
    cell.execution_count = None


def student_notebook(nb):
    """Return a student copy of ``nb`` (a nbformat notebook); ``nb`` is left unchanged."""
    import copy
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        tags = tags_of(cell)
        if SOLUTION in tags:
            continue
        if cell.cell_type == "code" and (EXERCISE in tags or is_check_cell(cell)):
            _clear(cell)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)  # a standalone notebook: no paired .md in the student folder
    return nb


def _student_copy(path: Path, dest: Path) -> list[Path]:
    import nbformat
    nbformat.write(student_notebook(nbformat.read(str(path), as_version=4)), str(dest / path.name))
    return [dest / path.name]


def _instructor_copy(path: Path, dest: Path) -> list[Path]:
    sources = [f for f in (path, path.with_suffix(".md")) if f.exists()]
    for f in sources:
        shutil.copy2(f, dest / f.name)
    return [dest / f.name for f in sources]


def _write_copies(src: str | Path, dest: str | Path, copy_one) -> list[Path]:
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    return [out for path in chapter_files(src) for out in copy_one(path, dest)]


def write_student(src: str | Path, dest: str | Path) -> list[Path]:
    """Student copies of every chapter notebook in ``src``, written to ``dest``."""
    return _write_copies(src, dest, _student_copy)


def write_instructor(src: str | Path, dest: str | Path) -> list[Path]:
    """The executed notebooks and their MyST sources, copied to ``dest``."""
    return _write_copies(src, dest, _instructor_copy)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.copies")
    parser.add_argument("kind", choices=["student", "instructor"])
    parser.add_argument("src", help="folder with the chapter notebooks (chapters/)")
    parser.add_argument("dest", help="output folder, e.g. dist/student")
    args = parser.parse_args(argv)
    if args.kind == "student":
        written = write_student(args.src, args.dest)
    else:
        written = write_instructor(args.src, args.dest)
    print(f"wrote {len(written)} files to {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
