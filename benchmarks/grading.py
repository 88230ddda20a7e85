"""How long grading a class takes: nbgrader autograde of chapter 1, sandboxed (bookkit/grading.py).

    .venv/bin/python benchmarks/grading.py                  # 30 submissions, one nbgrader process
    .venv/bin/python benchmarks/grading.py --students 10 --jobs 1 2

Writes a course for chapter 1 (bookkit.course) into a temporary folder, releases it, submits
``--students`` notebooks (a third the instructor's solutions, a third half solved, a third the
untouched release: a class mid-term), and autogrades them all with
``bookkit.grading.autograde_class`` for each ``--jobs`` (nbgrader processes; each starts the
next submission's kernel while grading one). Where one submission's time goes comes
from the autograder's own log line (kernel start, notebook cells, checks) and the process's wall
time (nbgrader's start, sanitising, the gradebook). Prints tables and writes
``benchmarks/results/grading.json``; the course guide prints the figures from there.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import describe, write_results  # noqa: E402

from bookkit import course, grading  # noqa: E402
from bookkit.conventions import CHAPTERS  # noqa: E402

ASSIGNMENT = "01-attention"
MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)
TIMINGS = re.compile(r"sandboxed grading: kernel start ([\d.]+) s, notebook cells ([\d.]+) s, checks ([\d.]+) s")


def submissions(root: Path, n: int) -> list[str]:
    """``n`` submissions of chapter 1 under ``root/submitted``: solved, half solved, untouched."""
    release = nbformat.read(str(root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), as_version=4)
    source = nbformat.read(str(root / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), as_version=4)
    answers = [MARKERS.sub("", c.source) for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")]
    students = []
    for i in range(n):
        nb = nbformat.from_dict(release)
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        solve = {0: range(len(cells)), 1: range(0, len(cells), 2), 2: ()}[i % 3]
        for k in solve:
            cells[k].source = answers[k]
        student = f"student{i:02d}"
        out = root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(out))
        students.append(student)
    return students


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1])
    args = parser.parse_args(argv)
    if not grading.bwrap_available():
        print("bwrap is missing: make sandbox-deps")
        return 1
    with tempfile.TemporaryDirectory(prefix="tlib-grading-bench-") as tmp:
        root = Path(tmp)
        course.write_course(CHAPTERS, root, only=[ASSIGNMENT])
        start = time.perf_counter()
        course.release(root, [ASSIGNMENT])
        release_s = time.perf_counter() - start
        students = submissions(root, args.students)
        runs = []
        for jobs in args.jobs:
            load_before = os.getloadavg()[0]
            start = time.perf_counter()
            graded = grading.autograde_class(root, ASSIGNMENT, jobs=jobs, students=students)
            total = time.perf_counter() - start
            phases = [tuple(map(float, m.groups())) for r in graded.values() for m in [TIMINGS.search(r["log"])] if m]
            per = [r["seconds"] for r in graded.values()]
            runs.append({"jobs": jobs, "submissions": len(students), "total_s": round(total, 1),
                         "per_submission_s": round(statistics.median(per), 1),
                         "kernel_start_s": round(statistics.median(p[0] for p in phases), 2),
                         "cells_s": round(statistics.median(p[1] for p in phases), 2),
                         "checks_s": round(statistics.median(p[2] for p in phases), 2),
                         "load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2)})
            r = runs[-1]
            r["nbgrader_other_s"] = round(r["per_submission_s"] - r["kernel_start_s"] - r["cells_s"] - r["checks_s"], 1)
        ok = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", str(root / "grades.csv")],
                            cwd=root, capture_output=True, text=True).returncode == 0
    results = write_results("grading", {"assignment": ASSIGNMENT, "generate_assignment_s": round(release_s, 1),
                                        "runs": runs, "export_ok": ok,
                                        "target": "30 submissions of chapter 1 in at most 300 s"})
    info = __import__("json").loads(results.read_text())["machine"]
    print(f"\nautograde of {ASSIGNMENT} ({describe(info)})")
    print(f"{'jobs':>4} {'subs':>5} {'total s':>8} {'per sub s':>9} {'kernel start':>12} {'cells':>6} {'checks':>6} "
          f"{'nbgrader rest':>13} {'load':>11}")
    for r in runs:
        print(f"{r['jobs']:>4} {r['submissions']:>5} {r['total_s']:>8} {r['per_submission_s']:>9} "
              f"{r['kernel_start_s']:>12} {r['cells_s']:>6} {r['checks_s']:>6} {r['nbgrader_other_s']:>13} "
              f"{r['load_1min_before']:>5}-{r['load_1min_after']:<5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
