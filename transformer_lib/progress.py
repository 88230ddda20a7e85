"""A learner's progress: run every checker in a copy of the notebooks and tabulate the verdicts.

    python -m transformer_lib.progress dist/student/           # executes each notebook
    python -m transformer_lib.progress chapters/ --no-execute  # reads the saved outputs only

Each check cell prints ``PASS [name]`` or ``NOT YET [name]``; an exercise whose check cell never
ran (an earlier cell raised) is reported as ``error``. Instructors can run this on a student's
folder to grade; students run it to see what is left.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

__all__ = ["notebook_progress", "progress_table"]

VERDICT = re.compile(r"^(PASS|NOT YET) \[([\w.]+)\]", re.M)
CHECK_NAME = re.compile(r"""\bcheck\(\s*["']([\w.]+)["']""")


def _stream_text(nb) -> str:
    return "\n".join(out.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for out in c.get("outputs", []) if out.get("output_type") == "stream")


def notebook_progress(path: str | Path, execute: bool = True, timeout: int = 600) -> dict[str, str]:
    """{exercise name: 'passed' | 'not yet' | 'error'} for one notebook."""
    import nbformat
    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    names = [n for c in nb.cells if c.cell_type == "code" for n in CHECK_NAME.findall(c.source)]
    if execute:
        from nbclient import NotebookClient
        env_backup = os.environ.get("TLIB_STATIC_WIDGETS")
        os.environ["TLIB_STATIC_WIDGETS"] = "0"  # no need to precompute static widgets here
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            if env_backup is None:
                os.environ.pop("TLIB_STATIC_WIDGETS", None)
            else:
                os.environ["TLIB_STATIC_WIDGETS"] = env_backup
    verdicts = {name: ("passed" if v == "PASS" else "not yet") for v, name in VERDICT.findall(_stream_text(nb))}
    return {name: verdicts.get(name, "error") for name in dict.fromkeys(names)}


def progress_table(folder: str | Path, execute: bool = True) -> list[tuple[str, str, str]]:
    rows = []
    for path in sorted(Path(folder).glob("[0-9][0-9]-*.ipynb")):
        for name, status in notebook_progress(path, execute).items():
            rows.append((path.stem, name, status))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer_lib.progress")
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
