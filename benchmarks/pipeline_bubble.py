"""The pipeline bubble against its formula, repeated (chapter 18).

    nice .venv/bin/python benchmarks/pipeline_bubble.py      # about a minute of wall time, little CPU

GPipe's forward schedule on p = 2 and p = 4 processes (gloo, one thread each) for m = 1, 2, 4, 8
and 16 micro-batches, five repetitions of each. Every stage computes one small encoder layer
(2 x 16 x 32 inputs) and then sleeps ``STAGE_SECONDS``: work of a fixed duration that needs no
core, as a GPU kernel is for the CPU thread that waits on it, so that the schedule and the
messages, not the other processes sharing the machine's cores, set the timing. The measured idle
fraction is ``transformer_lib.distributed.measured_bubble``: 1 - (the stages' busy seconds) /
(p x the pipeline's wall time, from the first stage's start to the last stage's end).

Prints a table, asserts nothing, writes benchmarks/results/pipeline_bubble.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import describe, machine, write_results  # noqa: E402

import transformer_lib.distributed as tld  # noqa: E402

STAGE_SECONDS = 0.02
ROWS, LENGTH, D_MODEL, LAYERS_PER_STAGE = 2, 16, 32, 1
STAGES, MICRO_BATCHES, REPEATS = (2, 4), (1, 2, 4, 8, 16), 5


def main() -> None:
    print("#", describe(machine()))
    start = time.perf_counter()
    rows = []
    for p in STAGES:
        for m in MICRO_BATCHES:
            measured, walls = [], []
            for _ in range(REPEATS):
                results = tld.launch(tld.pipeline_forward, p, m, ROWS, LENGTH, D_MODEL, LAYERS_PER_STAGE, 0,
                                     STAGE_SECONDS, timeout=120)
                measured.append(round(tld.measured_bubble(results), 4))
                walls.append(round(results[0]["wall"], 4))
            rows.append({"stages": p, "micro_batches": m, "formula": tld.bubble_fraction(p, m),
                         "measured": measured, "wall_seconds": walls})
            print(f"p = {p}, m = {m:>2}: formula {rows[-1]['formula']:.3f}, measured "
                  + " ".join(f"{x:.3f}" for x in measured), flush=True)
    write_results("pipeline_bubble", {
        "setting": {"stage_seconds": STAGE_SECONDS, "rows": ROWS, "length": LENGTH, "d_model": D_MODEL,
                    "layers_per_stage": LAYERS_PER_STAGE, "repeats": REPEATS,
                    "clock": "wall clock; busy = each stage's compute + sleep"},
        "rows": rows, "seconds": round(time.perf_counter() - start, 1)})


if __name__ == "__main__":
    main()
