"""A learner's progress: run every checker in a copy of the notebooks and tabulate the verdicts.

    python -m bookkit.progress dist/student/           # executes each notebook
    python -m bookkit.progress chapters/ --no-execute  # reads the saved outputs only

Each check cell prints ``PASS [name]`` or ``NOT YET [name]``; an exercise whose check cell never
ran (an earlier cell raised) is reported as ``error``. Instructors can run this on a student's
folder to grade; students run it to see what is left.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .conventions import VERDICT, chapter_files, check_names, execute_notebook

__all__ = ["notebook_progress", "progress_table"]


def _stream_text(nb) -> str:
    return "\n".join(out.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for out in c.get("outputs", []) if out.get("output_type") == "stream")


def notebook_progress(path: str | Path, execute: bool = True, timeout: int = 600) -> dict[str, str]:
    """{exercise name: 'passed' | 'not yet' | 'error'} for one notebook."""
    import nbformat
    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    names = [n for c in nb.cells if c.cell_type == "code" for n in check_names(c.source)]
    if execute:  # no need to precompute the widgets' static renderings here
        execute_notebook(nb, path.parent, timeout=timeout, allow_errors=True, env={"TLIB_STATIC_WIDGETS": "0"})
    verdicts = {name: ("passed" if v == "PASS" else "not yet") for v, name in VERDICT.findall(_stream_text(nb))}
    return {name: verdicts.get(name, "error") for name in dict.fromkeys(names)}


def progress_table(folder: str | Path, execute: bool = True) -> list[tuple[str, str, str]]:
    rows = []
    for path in chapter_files(folder):
        for name, status in notebook_progress(path, execute).items():
            rows.append((path.stem, name, status))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.progress")
    parser.add_argument("folder", help="folder with chapter notebooks (a learner's copy)")
    parser.add_argument("--no-execute", action="store_true", help="read saved outputs instead of running")
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
