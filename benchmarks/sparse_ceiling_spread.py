"""How far one measurement of the tile steps' ceiling moves: ``benchmarks/sparse.py --ceiling``, repeated.

    nice .venv/bin/python benchmarks/sparse_ceiling_spread.py          # 7 runs, about 35 s of CPU

``benchmarks/sparse.py`` times the three steps of a tile kernel (score product, softmax or
exp2 + row sums, product with v) once per block size: one median of 5 timed runs, on one thread,
in CPU time (``run_ceiling``). Chapter 8 divides by that median and compares the result with
ratios that differ by a fraction of a percent, so it needs to know how far such a median moves
from one measurement to the next. This script runs the same ceiling measurement ``--runs`` times,
each in a fresh process (as ``sparse.py`` does), and writes every run's numbers, with the machine
and its load, to ``benchmarks/results/sparse_ceiling_spread.json``. It changes nothing in the
procedure: the spread it records is that of ``sparse.json``'s ceiling on this kind of machine.

It is a benchmark, not a test: it prints, it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results" / "sparse_ceiling_spread.json"
STEPS = ("scores", "softmax", "exp", "exp2", "sum", "values")


def main() -> int:
    import sparse as bench  # benchmarks/sparse.py: the ceiling is measured by its own code

    from transformer_lib import profiling

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh-process repetitions of the ceiling")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per step inside one ceiling (median)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    machine = profiling.machine_info()
    print(f"{machine['cpu']}, {machine['cpu_count']} CPUs (AVX-512: {machine['avx512']}), torch {machine['torch']}, "
          f"load average {machine['load_average_1min']:.2f} at start")
    runs = []
    for i in range(args.runs):
        r = bench.measure("ceiling", 0, args.repeat)
        if "rows" not in r:
            print(f"run {i}: failed: {r.get('error')}")
            return 1
        runs.append({"rows": [{"block": row["block"], "keys_per_query": row["keys_per_query"],
                               **{f"{s}_ns_per_score": row[f"{s}_ns_per_score"] for s in STEPS}}
                              for row in r["rows"]],
                     "large_matmul_gflops": r["large_matmul_gflops"]})
        print(f"run {i}: " + "; ".join(
            f"b = {row['block']}: " + ", ".join(f"{s} {row[f'{s}_ns_per_score']:.2f}" for s in STEPS)
            for row in r["rows"]) + f"; large product {r['large_matmul_gflops']:.0f} GFLOP/s", flush=True)
    machine["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    report = {"benchmark": "benchmarks/sparse_ceiling_spread.py",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine,
              "setting": {"runs": args.runs, "repeat": args.repeat, "clock": "cpu", "threads": 1,
                          "procedure": "benchmarks/sparse.py --ceiling, one fresh process per run"},
              "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"load average {machine['load_average_1min_end']:.2f} at the end; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
