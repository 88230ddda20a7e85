"""Chapter 7's norm timings, repeated: benchmarks/results/norm_timing.json.

    .venv/bin/python benchmarks/norm_timing.py     # about 15 CPU-seconds

The chapter times four ways to normalize a (64, 256, 512) batch once, where it runs: the
library's written-out LayerNorm and RMSNorm (``transformer_lib.norms``) and PyTorch's
``F.layer_norm`` and ``F.rms_norm`` (gamma 1, beta 0). One timing is one draw, so this script
repeats the comparison five times, each repetition on a fresh batch (seed 0 to 4) with the four
norms timed one after the other, so that a ratio is read within one repetition. Time:
``profiling.time_call(cpu_time=True)``, the CPU time of one thread (the minimum of 5, after 1
warm-up run), which other processes on the machine barely change. Prints a table, asserts
nothing, writes benchmarks/results/norm_timing.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from transformer_lib.device import cpu_threads  # noqa: E402
from transformer_lib.norms import LayerNorm, RMSNorm  # noqa: E402
from transformer_lib.profiling import time_call  # noqa: E402

SHAPE, REPEATS = (64, 256, 512), 5


def one_repetition(seed: int) -> dict:
    x = torch.randn(*SHAPE, generator=torch.Generator().manual_seed(seed))  # (B, L, d)
    d = SHAPE[-1]
    ones, zeros = torch.ones(d), torch.zeros(d)
    norms = {
        "readable_layer_norm": LayerNorm(d),
        "readable_rms_norm": RMSNorm(d),
        "F.layer_norm": lambda t: F.layer_norm(t, (d,), ones, zeros),
        "F.rms_norm": lambda t: F.rms_norm(t, (d,), ones),
    }
    row = {"seed": seed}
    with cpu_threads(1), torch.no_grad():
        for name, norm in norms.items():
            row[f"{name}_ms"] = time_call(norm, x, repeats=5, warmup=1, cpu_time=True) * 1e3
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "seed"), flush=True)
    return row


if __name__ == "__main__":
    rows = [one_repetition(s) for s in range(REPEATS)]
    write_results("norm_timing", {"settings": {"shape": list(SHAPE), "repetitions": REPEATS,
                                               "clock": "one thread's CPU time, best of 5 after 1 warm-up"},
                                  "runs": rows})
