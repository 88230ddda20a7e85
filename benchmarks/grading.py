"""How long grading a class takes: nbgrader autograde of chapter 1, sandboxed (bookkit/grading.py).

    .venv/bin/python benchmarks/grading.py                  # 30 submissions, one nbgrader process
    .venv/bin/python benchmarks/grading.py --students 10 --jobs 1 2 --prestart 0 1

Writes a course for chapter 1 (bookkit.course) into a temporary folder, releases it, submits
``--students`` notebooks (a third the instructor's solutions, a third half solved, a third the
untouched release: a class mid-term), and autogrades them all with
``bookkit.grading.autograde_class`` for each ``--jobs`` (nbgrader processes) and ``--prestart``
(kernels each process starts ahead for its next submissions). Where one submission's time goes
comes from the autograder's own log line (kernel start, notebook cells, checks) and the process's
wall time (nbgrader's start, sanitising, the gradebook). The machine this runs on may be shared,
so each run also records the load average before and after and the CPU seconds that grading
used: everything the benchmark starts is in one ``cpuacct`` control group where one can be made
(cgroup v1), which counts a killed kernel's processes too; elsewhere ``cpu_s`` is null. Prints
tables and writes ``benchmarks/results/grading.json``; the course guide prints the figures from there.
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
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuMeter:
    """CPU seconds used by this process and all it starts, from a cpuacct group it joins."""

    def __init__(self):
        self.group = None
        if (CPUACCT / "cpuacct.usage").exists() and os.access(CPUACCT, os.W_OK):
            group = CPUACCT / f"tlib-grading-bench-{os.getpid()}"
            try:
                group.mkdir()
                (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
                self.group = group
            except OSError:
                pass

    def seconds(self) -> float | None:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9 if self.group else None

    def close(self) -> None:
        if self.group is not None:
            (CPUACCT / "cgroup.procs").write_text(f"{os.getpid()}\n")
            for _ in range(100):  # the group's last processes may still be exiting
                try:
                    self.group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
            self.group = None


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


def grade(root: Path, students: list[str], jobs: int, prestart: int, meter: CpuMeter) -> dict:
    """Autograde every submission once (``--force``); the run's figures."""
    load_before, cpu_before = os.getloadavg()[0], meter.seconds()
    start = time.perf_counter()
    graded = grading.autograde_class(root, ASSIGNMENT, jobs=jobs, students=students,
                                     extra=[f"--SandboxedExecute.prestart={prestart}"])
    total = time.perf_counter() - start
    cpu = None if cpu_before is None else meter.seconds() - cpu_before
    phases = [tuple(map(float, m.groups())) for r in graded.values() for m in [TIMINGS.search(r["log"])] if m]
    per = [r["seconds"] for r in graded.values()]
    r = {"jobs": jobs, "prestart": prestart, "submissions": len(students), "total_s": round(total, 1),
         "per_submission_s": round(statistics.median(per), 1),
         "kernel_start_s": round(statistics.median(p[0] for p in phases), 2),
         "cells_s": round(statistics.median(p[1] for p in phases), 2),
         "checks_s": round(statistics.median(p[2] for p in phases), 2),
         "cpu_s": None if cpu is None else round(cpu, 1),
         "cpu_per_submission_s": None if cpu is None else round(cpu / len(students), 2),
         "slowest_submission_s": round(max(sum(p) for p in phases), 1),
         "load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2)}
    r["nbgrader_other_s"] = round(r["per_submission_s"] - r["kernel_start_s"] - r["cells_s"] - r["checks_s"], 1)
    return r


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1])
    parser.add_argument("--prestart", type=int, nargs="+", default=[1])
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
        meter = CpuMeter()
        try:
            for jobs in args.jobs:
                for prestart in args.prestart:
                    runs.append(grade(root, students, jobs, prestart, meter))
        finally:
            meter.close()
        ok = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", str(root / "grades.csv")],
                            cwd=root, capture_output=True, text=True).returncode == 0
    results = write_results("grading", {"assignment": ASSIGNMENT, "generate_assignment_s": round(release_s, 1),
                                        "runs": runs, "export_ok": ok,
                                        "target": "30 submissions of chapter 1 in at most 300 s"})
    info = __import__("json").loads(results.read_text())["machine"]
    print(f"\nautograde of {ASSIGNMENT} ({describe(info)})")
    print(f"{'jobs':>4} {'ahead':>5} {'subs':>5} {'total s':>8} {'per sub s':>9} {'kernel start':>12} {'cells':>6} "
          f"{'checks':>6} {'nbgrader rest':>13} {'CPU s':>7} {'CPU/sub':>7} {'load':>11}")
    for r in runs:
        print(f"{r['jobs']:>4} {r['prestart']:>5} {r['submissions']:>5} {r['total_s']:>8} {r['per_submission_s']:>9} "
              f"{r['kernel_start_s']:>12} {r['cells_s']:>6} {r['checks_s']:>6} {r['nbgrader_other_s']:>13} "
              f"{r['cpu_s']!s:>7} {r['cpu_per_submission_s']!s:>7} {r['load_1min_before']:>5}-{r['load_1min_after']:<5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
