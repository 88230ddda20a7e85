"""Student and instructor copies of the chapters.

    python -m transformer_lib.teaching student chapters/ dist/student
    python -m transformer_lib.teaching instructor chapters/ dist/instructor

A student copy of a chapter notebook has no solution cells (tag ``solution``), no outputs on the
exercise stubs (tag ``exercise``) or on the check cells, and every other output kept, so a
student reads the same figures as the book but has to write the answers. Run top to bottom, it
executes without error: each checker reports "NOT YET" on the stub. The instructor copy is the
full executed notebook plus its MyST source.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

__all__ = ["student_notebook", "write_student", "write_instructor", "is_check_cell", "chapter_notebooks"]

CHECK_CALL = re.compile(r"""\bcheck\(\s*["'][\w.]+["']""")


def chapter_notebooks(folder: str | Path) -> list[Path]:
    """The chapter notebooks ``NN-slug.ipynb`` of a folder, in order."""
    return sorted(Path(folder).glob("[0-9][0-9]-*.ipynb"))


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.search(cell.source))


def _clear(cell) -> None:
    cell.outputs = []
    cell.execution_count = None


def student_notebook(nb):
    """Return a student copy of ``nb`` (a nbformat notebook); ``nb`` is left unchanged."""
    import copy
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution" in tags:
            continue
        if cell.cell_type == "code" and ("exercise" in tags or is_check_cell(cell)):
            _clear(cell)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)  # a standalone notebook: no paired .md in the student folder
    return nb


def write_student(src: str | Path, dest: str | Path) -> list[Path]:
    import nbformat
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for path in chapter_notebooks(src):
        nb = student_notebook(nbformat.read(str(path), as_version=4))
        out = dest / path.name
        nbformat.write(nb, str(out))
        written.append(out)
    return written


def write_instructor(src: str | Path, dest: str | Path) -> list[Path]:
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for path in chapter_notebooks(src):
        for f in (path, path.with_suffix(".md")):
            if f.exists():
                shutil.copy2(f, dest / f.name)
                written.append(dest / f.name)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer_lib.teaching")
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
