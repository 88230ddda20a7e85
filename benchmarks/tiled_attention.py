"""Tiled attention (online softmax, pure PyTorch) against readable attention and torch's SDPA.

    nice .venv/bin/python benchmarks/tiled_attention.py          # about 2-4 minutes on 2 idle cores
    .venv/bin/python benchmarks/tiled_attention.py --quick  # smaller grid, no n = 16384

Setting (issue 16): batch 1, 8 heads x 64, float32, on the CPU. Three kernels:

* readable - ``transformer_lib.attention.scaled_dot_product_attention``: builds the (H, n, n)
             score matrix (and the weights, a second one);
* tiled    - ``transformer_lib.tiled_attention`` with blocks of ``--block-q`` x ``--block-k``
             (default 64 x 64, the function's default; also timed with 128 x 256 tiles): a
             Python loop over tiles, each tile about twenty small PyTorch operations;
* sdpa     - ``torch.nn.functional.scaled_dot_product_attention`` (a fused C++ flash kernel on CPUs).

Targets: the tiled path's peak extra memory at n = 16384 below 1/20 of the readable path's score
matrix (8 x 16384^2 x 4 bytes = 8 GiB; too large to materialize on a laptop or a shared machine,
so that side is computed analytically, and the readable path is measured only up to n = 4096), and
its time within 3x of torch SDPA at n = 4096.

Method. Times are medians of ``--repeat`` calls after one warm-up; at n = 4096 the kernels take
turns call by call, so a change in the machine's load hits them alike and the ratio is measured
side by side. Peak memory is ``transformer_lib.profiling.peak_memory``: the extra resident memory
(Linux VmHWM, reset before the call, glibc told to hand freed memory back) beyond what was live
before the call (q, k, v already allocated); the output (8 x n x 64 x 4 bytes, 32 MiB at 16384) is
part of every kernel's peak.

Threads. Every kernel runs on ``--threads`` threads (default 1). The tiled path dispatches about
twenty small operations per tile; with two OpenMP threads each of them ends in a barrier, and on a
busy shared machine (where this benchmark was run: more runnable processes than cores) those
barriers made it tens of times slower than on one thread (n = 2048: 15-20 s against 0.5 s), while
SDPA, one large kernel, lost far less. One thread for all kernels keeps the comparison fair and
repeatable; on an idle machine try ``--threads 2``.

Writes ``benchmarks/results/tiled_attention.json``, which chapter 11
prints from. A benchmark, not a test: it prints and asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformer_lib.attention import scaled_dot_product_attention  # noqa: E402
from transformer_lib.profiling import machine_info, peak_memory  # noqa: E402
from transformer_lib.tiled import count_tiles, tiled_attention  # noqa: E402

B, H, D = 1, 8, 64
RESULTS = ROOT / "benchmarks" / "results" / "tiled_attention.json"


def inputs(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g) for _ in range(3)]  # q, k, v: (B, H, n, D)


def kernels(block_q: int, block_k: int) -> dict:
    return {
        "readable": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
        "tiled": lambda q, k, v: tiled_attention(q, k, v, block_q=block_q, block_k=block_k),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "tiled causal": lambda q, k, v: tiled_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k),
        "sdpa causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiled 128x256": lambda q, k, v: tiled_attention(q, k, v, block_q=128, block_k=256),
    }


def score_matrix_bytes(n: int) -> int:
    """Bytes of the readable path's (B, H, n, n) float32 score matrix."""
    return B * H * n * n * 4


def timed_side_by_side(fns: dict, args, repeat: int) -> dict:
    """Median seconds of each function, calls interleaved (one warm-up call each first)."""
    for fn in fns.values():
        fn(*args)
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(*args)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def fmt_mb(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per kernel at n = 4096 (median)")
    parser.add_argument("--block-q", type=int, default=64)
    parser.add_argument("--block-k", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="smaller memory sweep, no n = 16384")
    parser.add_argument("--no-write", action="store_true", help="do not write the results JSON")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for every kernel (default 1: see the note in the docstring)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fns = kernels(args.block_q, args.block_k)
    machine = machine_info()
    print(f"torch {torch.__version__}, {machine['cpu']}, {machine['cpu_count']} CPUs, "
          f"{torch.get_num_threads()} threads, load average {machine['load_average_1min']} at start")
    print(f"B={B}, H={H}, d={D}, float32, CPU; tiled blocks {args.block_q} x {args.block_k} "
          f"(and 128 x 256 for comparison)\n")

    # -- peak memory as n grows ------------------------------------------------------------------
    ns = [512, 1024, 2048, 4096] + ([] if args.quick else [8192, 16384])
    memory = []
    q, k, v = inputs(256)
    for name in ("readable", "tiled", "sdpa"):
        fns[name](q, k, v)  # first calls allocate thread pools and caches once: keep them out of the peaks
    print(f"{'n':>6} | {'score matrix':>13} | {'readable':>11} | {'tiled':>11} | {'sdpa':>11} | tiled / scores")
    for n in ns:
        q, k, v = inputs(n)
        row = {"n": n, "score_matrix_bytes": score_matrix_bytes(n)}
        for name in ("readable", "tiled", "sdpa"):
            if name == "readable" and n > 4096:
                row[name] = None  # 2 GiB per (H, n, n) matrix at 8192, 8 GiB at 16384: not materialized here
                continue
            start = time.perf_counter()
            row[name] = peak_memory(lambda: fns[name](q, k, v))
            row[name + "_seconds_one_call"] = time.perf_counter() - start
        memory.append(row)
        readable = fmt_mb(row["readable"]) if row["readable"] is not None else "(analytic)"
        print(f"{n:>6} | {fmt_mb(row['score_matrix_bytes']):>13} | {readable:>11} | {fmt_mb(row['tiled']):>11} | "
              f"{fmt_mb(row['sdpa']):>11} | 1/{row['score_matrix_bytes'] / max(row['tiled'], 1):.0f}", flush=True)
        del q, k, v

    # -- time at n = 4096, side by side ----------------------------------------------------------
    n = 4096
    q, k, v = inputs(n)
    order = ["sdpa", "tiled", "tiled 128x256", "readable", "sdpa causal", "tiled causal"]
    times = timed_side_by_side({name: fns[name] for name in order}, (q, k, v), args.repeat)
    err = (fns["tiled"](q, k, v) - fns["sdpa"](q, k, v)).abs().max().item()
    err_causal = (fns["tiled causal"](q, k, v) - fns["sdpa causal"](q, k, v)).abs().max().item()
    print(f"\ntimes at n = {n} (median of {args.repeat}, kernels taking turns):")
    for name in order:
        print(f"  {name:<13} {fmt_time(times[name]):>9}   {times[name] / times['sdpa']:5.2f}x sdpa")
    computed, total = count_tiles(n, n, args.block_q, args.block_k, causal=True)
    print(f"  causal tiles computed: {computed} of {total} ({100 * computed / total:.1f} %); "
          f"tiled causal / tiled = {times['tiled causal'] / times['tiled']:.2f}")
    print(f"  max |tiled - sdpa| = {err:.1e} (causal {err_causal:.1e})")

    # -- block size x n grid (the chapter's widget) ----------------------------------------------
    grid = []
    grid_ns, blocks = (512, 1024, 2048), (32, 64, 128, 256, 512)
    print("\nblock size grid, tiled (square blocks), one call each: time / peak memory")
    print(f"{'block':>6} | " + " | ".join(f"{'n = ' + str(n):>20}" for n in grid_ns))
    for block in blocks:
        cells = []
        for n in grid_ns:
            q, k, v = inputs(n)
            tiled_attention(q[..., :64, :], k, v, block_q=block, block_k=block)  # warm-up, small
            start = time.perf_counter()
            peak = peak_memory(lambda: tiled_attention(q, k, v, block_q=block, block_k=block))
            seconds = time.perf_counter() - start
            grid.append({"block": block, "n": n, "seconds": seconds, "peak_bytes": peak})
            cells.append(f"{fmt_time(seconds):>8} / {fmt_mb(peak):>9}")
        print(f"{block:>6} | " + " | ".join(cells), flush=True)

    # -- targets ---------------------------------------------------------------------------------
    at_max = memory[-1]
    mem_fraction = at_max["tiled"] / at_max["score_matrix_bytes"]
    ratio = times["tiled"] / times["sdpa"]
    print("\ntargets (issue 16):")
    print(f"  peak extra memory of tiled at n = {at_max['n']}: {fmt_mb(at_max['tiled'])} = 1/{1 / mem_fraction:.0f} "
          f"of the readable path's score matrix ({fmt_mb(at_max['score_matrix_bytes'])}, analytic) "
          f"(target: below 1/20) -> {'met' if mem_fraction < 1 / 20 else 'NOT met'}")
    print(f"  tiled / sdpa time at n = 4096: {ratio:.2f}x (target: within 3x) -> {'met' if ratio <= 3 else 'NOT met'}")
    machine_end = machine_info()
    print(f"load average {machine_end['load_average_1min']} at the end")

    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine, "load_average_end": machine_end["load_average_1min"],
            "setting": {"threads": args.threads, "batch": B, "heads": H, "d_head": D, "dtype": "float32", "device": "cpu",
                        "block_q": args.block_q, "block_k": args.block_k, "repeat": args.repeat},
            "memory": memory,
            "time_4096": times,
            "tiled_over_sdpa_4096": ratio,
            "max_abs_error_4096": {"full": err, "causal": err_causal},
            "causal_tiles_4096": {"computed": computed, "total": total},
            "memory_fraction_at_max_n": {"n": at_max["n"], "tiled_over_score_matrix": mem_fraction},
            "grid": grid,
        }, indent=1) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
