"""The time per token of a mixture of experts against dense FFNs, repeated (chapter 25).

    .venv/bin/python benchmarks/moe_timing.py      # about 40 CPU-seconds

``benchmarks/moe.py`` times each layer once (the minimum of 5 timings). This script repeats that
comparison five times, each repetition with freshly initialised layers (seed 0 to 4) and the
three layers timed one after the other, so that a ratio is read within one repetition. The
layers are ``moe.three_layers()``: a MixtureOfExperts (d_model 256, 8 experts of d_ff 512, top-2),
a dense SwiGLU FFN of the same active size (d_ff 1024) and one of the same total size
(d_ff 4096), on 1024 tokens, one thread. Time: ``profiling.time_call(cpu_time=True)``, the CPU
time of the one thread (the minimum of 5, after 2 warm-up runs), which other processes on the
machine barely change. Prints a table, asserts nothing, writes benchmarks/results/moe_timing.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from moe import D, E, F, K, N, three_layers  # noqa: E402

from transformer_lib.device import cpu_threads  # noqa: E402
from transformer_lib.profiling import time_call  # noqa: E402

REPEATS = 5


def one_repetition(seed: int) -> dict:
    torch.manual_seed(seed)
    layers = dict(zip(("moe", "dense_active", "dense_total"), three_layers().values()))  # moe.py's, in its order
    x = torch.randn(N, D)
    row = {"seed": seed}
    with cpu_threads(1), torch.no_grad():
        for name, layer in layers.items():
            layer.eval()
            row[f"{name}_us_per_token"] = time_call(layer, x, repeats=5, warmup=2, cpu_time=True) / N * 1e6
    row["moe_over_dense_active"] = row["moe_us_per_token"] / row["dense_active_us_per_token"]
    row["dense_total_over_moe"] = row["dense_total_us_per_token"] / row["moe_us_per_token"]
    print(f"seed {seed}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k != "seed"), flush=True)
    return row


if __name__ == "__main__":
    rows = [one_repetition(s) for s in range(REPEATS)]
    write_results("moe_timing", {"settings": {"d_model": D, "d_ff": F, "num_experts": E, "top_k": K,
                                              "tokens": N, "repetitions": REPEATS,
                                              "clock": "thread CPU time, minimum of 5 after 2 warm-up"},
                                 "runs": rows})
