"""Execution time of every chapter (target: <= 60 s each on 2 CPU cores; whole book <= 8 min).

    .venv/bin/python benchmarks/chapters.py [chapters/NN-slug.md ...] [--repeat 1]

Executes each chapter's MyST source with nbclient (like `make chapters`, but without writing the
notebook) and prints a table of wall times, with the machine's load average so that a noisy
reading can be recognized. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bookkit.conventions import chapter_files  # noqa: E402

BUDGET_S = 60.0


def run_once(md: Path) -> float:
    from bookkit.conventions import execute_notebook
    from bookkit.notebooks import read_md

    return execute_notebook(read_md(md), md.parent, timeout=900)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("TLIB_DEVICE", "cpu")
    paths = [Path(p) for p in args.paths] or chapter_files(ROOT / "chapters", ".md")
    print(f"{'chapter':<36} {'median s':>9} {'budget':>7} {'load':>6}")
    total = 0.0
    for md in paths:
        times = [run_once(md) for _ in range(args.repeat)]
        median = statistics.median(times)
        total += median
        flag = "ok" if median <= BUDGET_S else "OVER"
        print(f"{md.stem:<36} {median:>9.1f} {flag:>7} {os.getloadavg()[0]:>6.2f}", flush=True)
    print(f"{'total':<36} {total:>9.1f} {'ok' if total <= 480 else 'OVER':>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
