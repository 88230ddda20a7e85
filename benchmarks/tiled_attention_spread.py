"""Chapter 11's CPU timing comparisons with their spread: per-round ratios in process CPU time.

    nice -n 19 .venv/bin/python benchmarks/tiled_attention_spread.py   # about 75 CPU seconds

``benchmarks/tiled_attention.py`` stores one median per kernel at n = 4096 (7 calls, wall time)
and one call per entry of the block-size grid. On a shared machine wall time includes the time
other programs hold the core, so single medians and single calls cannot say whether a 20 % gap
is real. This script measures the same kernels (batch 1, 8 heads x 64, float32, one thread) in
*process CPU time* (``time.process_time``: with one torch thread it is the time this process
computed, not the time it waited), the kernels taking turns call by call, and keeps every round,
so that each comparison is a list of per-round ratios (median, min, max) rather than one number.

Sections:

* ``lengths``: readable, tiled 64x64, tiled 128x256, SDPA, and the causal tiled/SDPA calls, at
  n = 512, 1024, 2048, 4096 (rounds: 7, 7, 5, 5);
* ``grid``: the tiled path at square blocks 32 ... 512 and n = 512, 1024, 2048, 5 rounds;
* ``softmax``: ns per score of the softmax written into an existing buffer, on a (64, 2048) block
  that stays in the caches (called 128 times) and on a (8, 2048, 2048) tensor (128 MiB): if its
  speed were set by memory bandwidth, the large tensor would cost far more per score. Also the
  softmax and a scaling by 1/8 written into *new* memory (as the readable path does), the rate of
  a 128 MiB copy into an existing buffer, and a 1024 x 1024 matrix product's GFLOP/s.

Writes ``benchmarks/results/tiled_attention_spread.json``. A benchmark: it asserts nothing.
Measured cost: 75 CPU seconds (66 s user, 12 s sys; the ``cpu_seconds`` field) on two shared
AMD EPYC cores at a load average of 4.9, 2026-12-06.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from transformer_lib.profiling import machine_info  # noqa: E402
from transformer_lib.tiled import tiled_attention  # noqa: E402
from tiled_attention import inputs, kernels  # noqa: E402  (benchmarks/tiled_attention.py)

RESULTS = ROOT / "benchmarks" / "results" / "tiled_attention_spread.json"
_SIDE_BY_SIDE = kernels(64, 64)  # tiled_attention.py's kernels, with this file's names for them
KERNELS = {name: _SIDE_BY_SIDE[theirs] for name, theirs in (
    ("readable", "readable"), ("tiled 64x64", "tiled"), ("tiled 128x256", "tiled 128x256"), ("sdpa", "sdpa"),
    ("tiled 64x64 causal", "tiled causal"), ("sdpa causal", "sdpa causal"))}


def cpu_time(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def rounds(fns: dict, repeat: int) -> dict:
    """CPU seconds of every call, the functions taking turns (one warm-up call each first)."""
    for fn in fns.values():
        fn()
    out = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            out[name].append(cpu_time(fn))
    return out


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "values": xs}


def main() -> int:
    torch.set_num_threads(1)
    start_all = time.process_time()
    machine = machine_info()
    print(f"torch {torch.__version__}, {machine['cpu']}, load average {machine['load_average_1min']}", flush=True)

    lengths = []
    for n, repeat in [(512, 7), (1024, 7), (2048, 5), (4096, 5)]:
        q, k, v = inputs(n)
        times = rounds({name: (lambda fn=fn: fn(q, k, v)) for name, fn in KERNELS.items()}, repeat)
        ratios = {
            f"{a} / {b}": summary([x / y for x, y in zip(times[a], times[b])])
            for a, b in [("tiled 64x64", "readable"), ("tiled 128x256", "readable"),
                         ("readable", "sdpa"), ("tiled 64x64", "sdpa"), ("tiled 128x256", "sdpa"),
                         ("tiled 64x64 causal", "tiled 64x64"), ("sdpa causal", "sdpa")]
        }
        lengths.append({"n": n, "rounds": repeat, "seconds": {k_: summary(t) for k_, t in times.items()},
                        "ratios": ratios})
        print(f"n = {n}: " + ", ".join(f"{name} {r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]"
                                       for name, r in ratios.items()), flush=True)

    grid = []
    blocks, grid_ns = (32, 64, 128, 256, 512), (512, 1024, 2048)
    data = {n: inputs(n) for n in grid_ns}
    fns = {(b, n): (lambda b=b, n=n: tiled_attention(*data[n], block_q=b, block_k=b))
           for n in grid_ns for b in blocks}
    times = rounds(fns, 5)
    for (b, n), ts in times.items():
        grid.append({"block": b, "n": n, "seconds": summary(ts)})
    for n in grid_ns:
        print(f"grid n = {n}: " + ", ".join(f"{b}: {statistics.median(times[b, n]) * 1e3:.0f} ms "
                                            f"[{min(times[b, n]) * 1e3:.0f}-{max(times[b, n]) * 1e3:.0f}]"
                                            for b in blocks), flush=True)

    big = torch.randn(8, 2048, 2048)  # 128 MiB of scores, far larger than the caches
    small = torch.randn(1, 64, 2048)  # 512 KiB: stays in the caches
    dst, dst_small = torch.empty_like(big), torch.empty_like(small)
    reps_small = big.numel() // small.numel()  # 128 calls: the same number of scores
    a = torch.randn(1024, 1024)
    soft = rounds({
        "softmax into a buffer, out of cache": lambda: torch.ops.aten._softmax.out(big, -1, False, out=dst),
        "softmax into a buffer, in cache": lambda: [torch.ops.aten._softmax.out(small, -1, False, out=dst_small)
                                                    for _ in range(reps_small)],
        "softmax into new memory, out of cache": lambda: torch.softmax(big, dim=-1),
        "scale into a buffer, out of cache": lambda: torch.mul(big, 0.125, out=dst),
        "scale into new memory, out of cache": lambda: big * 0.125,
        "copy": lambda: dst.copy_(big),
        "matmul": lambda: a @ a,
    }, 5)
    softmax = {name: summary([t / big.numel() * 1e9 for t in ts])
               for name, ts in soft.items() if name not in ("copy", "matmul")}
    softmax["copy_GB_per_s"] = summary([2 * big.numel() * 4 / t / 1e9 for t in soft["copy"]])
    softmax["matmul_GFLOP_per_s"] = summary([2 * 1024**3 / t / 1e9 for t in soft["matmul"]])
    for name, r in softmax.items():
        print(f"{name}: {r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]", flush=True)

    RESULTS.write_text(json.dumps({
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine, "load_average_end": machine_info()["load_average_1min"],
        "setting": {"threads": 1, "batch": 1, "heads": 8, "d_head": 64, "dtype": "float32",
                    "clock": "time.process_time (CPU time of the process)"},
        "lengths": lengths, "grid": grid, "softmax": softmax,
        "cpu_seconds": time.process_time() - start_all,
    }, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}; {time.process_time() - start_all:.0f} CPU seconds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
