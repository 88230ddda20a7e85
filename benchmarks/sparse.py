"""Sparse attention kernels against dense masked SDPA: time, peak memory, scores computed.

    nice .venv/bin/python benchmarks/sparse.py            # the full table (about 3-4 minutes idle)
    .venv/bin/python benchmarks/sparse.py --quick         # n = 2048 and 8192 only

It prints its tables and writes them, with a description of the machine and its load, to
``benchmarks/results/sparse.json`` (``--out``), which chapter 8 prints.

Setting: 8 heads x 64, float32, batch 1, window w = 512 (each query sees the
keys with |i - j| <= 256), n in {2048, 8192, 16384, 32768}; plus dilated attention with d = 4 at
n = 8192. Kernels (transformer_lib.sparse):

* dense   - F.scaled_dot_product_attention with the (n, n) boolean band mask: the baseline. The
            mask is built before timing (a model builds it once for all layers); it holds n^2
            bytes more (1 GiB at n = 32768) that the peak-memory column leaves out;
* full    - SDPA with no mask at all (full attention, a different result): shows what the mask
            itself costs the dense baseline;
* blocked - blocks of 32 queries, each on its own (32 x 544) key tile; the tiles are
            overlapping views of k and v. On a CPU with no gradient wanted (as here) the tile
            steps are written out by hand, 16 tiles per step (transformer_lib.sparse.tiles:
            exp2 without the row max, checked afterwards; the division after the product
            with v); elsewhere 128 tiles go to one fused SDPA call;
* flex    - torch.compile(flex_attention) with the cached window BlockMask of 64 x 64 tiles
            (compiled once per process before timing; the compile time is not in the table);
* fused   - the blocked kernel's tile steps compiled into one C++ loop (transformer_lib.sparse.
            fused): each block of 32 queries goes through its tile start to finish while its
            weights are in the cache, the blocks shared over torch's threads (built once
            before timing, cached on disk; the build time is not in the table);
* strided - dilated attention as d dense SDPA calls on the interleaved subsequences.

Method. Every (kernel, n) case runs in a fresh Python subprocess, so that no allocator cache or
compiled kernel of one case leaks into another. In the subprocess:

* time (``--clock wall``, the default): one warm-up call, then the median wall time of ``--repeat`` calls (dense and full at
  n >= 16384: one call, timed while its peak memory is measured; it takes seconds and gigabytes).
  ``--clock cpu`` measures the same on one thread with ``time.thread_time``: on a busy shared
  machine the wall clock mostly measures the other programs, CPU time much less so;
* peak memory: extra resident memory (RSS) at the peak of one call beyond what was resident just
  before it (q, k, v already allocated). Linux's peak-RSS counter VmHWM is reset through
  /proc/self/clear_refs right before the call, and for that call glibc is told to give every
  block larger than 128 KiB its own mapping, returned to the OS on free, so the counter sees
  the call's own buffers (``profiling.peak_memory``). The timings are taken before, with the
  allocator a user has. tracemalloc would see none of them: torch allocates outside Python's allocator. On a
  GPU the same column comes from torch.cuda.max_memory_allocated;
* headline: how close the sparse kernels come, at n = 16384, to the exact band's score ratio
  n^2 / band = 32.2x (what a kernel with dense's cost per score and no wasted score would reach). On
  a shared machine a ratio of two runs taken minutes apart measures the load as much as the
  kernels, so this one is measured side by side in one process: ``--rounds`` rounds, each
  timing dense once and every sparse kernel ``--repeat`` times, the ratio per round, its
  median reported (``--rounds 5`` gives five paired ratios per kernel, enough for an interval);
  the best median on the wall clock names the headline kernel. The same is
  repeated on one thread with ``time.thread_time`` (CPU time, which waiting for a core does
  not inflate) as a check that is less sensitive to the load;
* scores: the exact number of band pairs per head (``band_score_count``) next to n^2, and what
  each kernel really computes (whole tiles: ``blocked_score_count`` / ``flex_score_count``);
  ns/score is the time per computed score and head. A speedup over dense is the product of
  (n^2 / computed scores) and (dense ns/score / kernel ns/score);
* ceiling: what any kernel made of tiles could reach on this machine. A tile kernel with blocks
  of b queries computes b + 2h keys per query (h = w // 2; the band needs 2h + 1) through three
  steps per tile: the (b x d) @ (d x (b + 2h)) score product, a softmax over each row, and the
  (b x (b + 2h)) @ ((b + 2h) x d) product with v. Each step is timed alone on one thread, on
  tiles already in cache, with nothing allocated (the best case for a kernel built from them),
  for b = 16, 32 and 64. The ratio such a kernel could reach is
  (n / (b + 2h)) x (dense ns/score / the steps' ns/score), dense's cost taken from the
  one-thread headline rounds. Small tiles waste fewer scores but make slower matrix products.
  Two middles are timed: torch's softmax (what SDPA does: max, exp, sum, divide every weight),
  and the hand path's exp2 plus row sums (its division happens after the product with v, on
  d_v instead of b + 2h numbers per row, and is left out); exp is timed too, to show why base 2.

It is a benchmark, not a test: it prints, it asserts nothing. Run it on a quiet machine (the
load average is printed) and with ``nice`` on a shared one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

B, H, D = 1, 8, 64
WINDOW = 512
NS = (2048, 8192, 16384, 32768)
DILATION, DILATED_N = 4, 8192
HEADLINE_N = 16384
RESULTS = ROOT / "benchmarks" / "results" / "sparse.json"


def _inputs(n: int, seed: int = 0):
    import torch

    device = torch.device(os.environ.get("TLIB_DEVICE", "cpu"))
    g = torch.Generator().manual_seed(seed)
    return device, [torch.randn(B, H, n, D, generator=g).to(device) for _ in range(3)]


def _kernel_call(kernel: str, n: int, q, k, v, device):
    """The zero-argument call that a case times."""
    import torch.nn.functional as F

    import transformer_lib as tl
    from transformer_lib import sparse as sp

    if kernel == "full":  # no mask at all: every score computed, none masked (not a window!)
        return lambda: F.scaled_dot_product_attention(q, k, v)
    if kernel == "dense":  # the baseline: SDPA given a boolean band mask built beforehand
        mask = tl.sliding_window_mask(n, WINDOW, device=device)  # (n, n) bool
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if kernel == "dense-dilated":
        mask = tl.dilated_mask(n, DILATION, device=device)  # (n, n) bool
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if kernel == "strided":
        return lambda: sp.dilated_attention(q, k, v, DILATION, kernel="strided")
    return lambda: sp.sliding_window_attention(q, k, v, WINDOW, kernel=kernel)


def run_case(kernel: str, n: int, repeat: int, clock: str = "wall") -> dict:
    """Measure one case in this process; returns a JSON-able dict."""
    import torch

    from transformer_lib import profiling, sparse as sp

    device, (q, k, v) = _inputs(n)
    fn = _kernel_call(kernel, n, q, k, v, device)
    slow = kernel in ("dense", "full") and n >= 16384
    cpu = clock == "cpu"
    if cpu:
        torch.set_num_threads(1)  # time.thread_time counts one thread's CPU time
    if slow:  # seconds and gigabytes per call: one call, timed and measured together, no warm-up
        read = time.thread_time if cpu else time.perf_counter
        start = read()
        peak = profiling.peak_memory(fn, device=device)
        return {"kernel": kernel, "n": n, "seconds": read() - start, "peak_bytes": peak,
                "max_error": None, "threads": torch.get_num_threads(), "clock": clock}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        out = fn()  # warm-up (compiles flex, builds fused)
    fallback = [str(w.message) for w in caught if "falling back" in str(w.message)]
    if kernel in ("flex", "fused") and fallback:  # it ran as the blocked kernel: not this kernel's numbers
        return {"kernel": kernel, "n": n, "error": fallback[0]}
    error = None
    if n <= 8192 and kernel not in ("dense", "dense-dilated", "full"):
        ref = (sp.dilated_attention(q, k, v, DILATION, kernel="dense") if kernel == "strided"
               else sp.sliding_window_reference(q, k, v, WINDOW))
        error = (out - ref).abs().max().item()
        del ref
    del out
    # time first, with the allocator a user has; peak_memory then sets glibc's thresholds for
    # the one measured call (see its docstring)
    seconds = profiling.time_call(fn, repeats=repeat, warmup=0, device=device, cpu_time=cpu, statistic="median")
    peak = profiling.peak_memory(fn, device=device)
    return {"kernel": kernel, "n": n, "seconds": seconds, "peak_bytes": peak, "max_error": error,
            "threads": torch.get_num_threads(), "clock": clock}


def run_headline(kernels: list[str], repeat: int, rounds: int) -> dict:
    """Dense and every kernel in ``kernels`` at n = HEADLINE_N, side by side in one process."""
    import torch

    device, (q, k, v) = _inputs(HEADLINE_N)
    dense = _kernel_call("dense", HEADLINE_N, q, k, v, device)
    sparse_fns = {name: _kernel_call(name, HEADLINE_N, q, k, v, device) for name in kernels}
    for fn in sparse_fns.values():
        fn()  # warm-up (compiles flex, builds fused)
    result = {"n": HEADLINE_N, "rounds": rounds, "kernels": {name: {} for name in kernels}}
    for clock_name, clock, threads in (("wall", time.perf_counter, torch.get_num_threads()),
                                       ("cpu_1thread", time.thread_time, 1)):
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        dense_s, sparse_s = [], {name: [] for name in kernels}
        try:
            for _ in range(rounds):
                start = clock()
                dense()
                dense_s.append(clock() - start)
                for name, fn in sparse_fns.items():
                    times = []
                    for _ in range(repeat):
                        start = clock()
                        fn()
                        times.append(clock() - start)
                    sparse_s[name].append(statistics.median(times))
        finally:
            torch.set_num_threads(saved)
        for name in kernels:
            ratios = [d / s for d, s in zip(dense_s, sparse_s[name])]
            result["kernels"][name][clock_name] = {
                "threads": threads, "dense_seconds": dense_s, "kernel_seconds": sparse_s[name],
                "ratios": ratios, "median_ratio": statistics.median(ratios)}
    # the headline kernel: the best median ratio on the table's clock (wall)
    best = max(kernels, key=lambda name: result["kernels"][name]["wall"]["median_ratio"])
    result.update(kernel=best, **result["kernels"][best])
    return result


CEILING_BLOCKS = (16, 32, 64)


def run_ceiling(repeat: int) -> dict:
    """One thread, CPU time: the steps of a tile kernel, each alone, per computed score."""
    import torch

    from transformer_lib import profiling

    half, calls = WINDOW // 2, 50  # a step takes ~0.1 ms: each timed run makes `calls` calls
    g = torch.Generator().manual_seed(0)
    rows = []
    for b in CEILING_BLOCKS:
        W, count = b + 2 * half, 256 // b  # keys per tile; 256 queries per batched call
        q, k, v = (torch.randn(count, rows_, D, generator=g) for rows_ in (b, W, W))
        scores, weights, out = torch.empty(count, b, W), torch.empty(count, b, W), torch.empty(count, b, D)
        torch.bmm(q, k.transpose(1, 2), out=scores)
        probs = torch.softmax(scores, dim=-1)
        steps = {"scores": lambda: torch.bmm(q, k.transpose(1, 2), out=scores),
                 "softmax": lambda: torch.softmax(scores, dim=-1),
                 "exp": lambda: torch.exp(scores, out=weights),  # base e, for comparison
                 "exp2": lambda: torch.exp2(scores, out=weights),  # the hand path: no max, base 2
                 "sum": lambda: torch.sum(weights, dim=-1),  # ... and the row sums, divided in after v
                 "values": lambda: torch.bmm(probs, v, out=out)}
        row = {"block": b, "keys_per_query": W}
        for name, fn in steps.items():
            def many(fn=fn):  # each result is dropped at once, as in a kernel's loop
                for _ in range(calls):
                    fn()
            seconds = profiling.time_call(many, repeats=max(repeat, 5), cpu_time=True, statistic="median") / calls
            row[f"{name}_ns_per_score"] = seconds * 1e9 / (count * b * W)
        rows.append(row)
    # the reference for "fast": a large square product, as close to peak as this BLAS gets
    a, b_ = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    seconds = profiling.time_call(torch.matmul, a, b_, repeats=max(repeat, 5), cpu_time=True, statistic="median")
    return {"threads": 1, "clock": "cpu", "rows": rows, "large_matmul_gflops": 2 * 1024 ** 3 / seconds / 1e9}


def measure(kernel: str, n: int, repeat: int, clock: str = "wall") -> dict:
    """Run :func:`run_case` in a fresh subprocess."""
    if kernel.startswith("headline:"):
        cmd = [__file__, "--headline", kernel.split(":", 1)[1], "--rounds", str(n)]
    elif kernel == "ceiling":
        cmd = [__file__, "--ceiling"]
    else:
        cmd = [__file__, "--case", kernel, str(n), "--clock", clock]
    cmd = [sys.executable, *cmd, "--repeat", str(repeat)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"kernel": kernel, "n": n, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[-1])


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def fmt_mb(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:.0f} MB"


def growth_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(n)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def headline_and_ceiling(computed: dict[str, int], rounds: int, repeat: int) -> tuple[dict | None, dict | None]:
    """The side-by-side headline rounds at n = HEADLINE_N for the kernels in ``computed`` (kernel ->
    the scores it computes there), then the ceiling of a tile kernel's steps; prints both."""
    from transformer_lib import sparse as sp

    headline, ceiling = None, None
    sparse_kernels = list(computed)
    if sparse_kernels:
        headline = measure(f"headline:{','.join(sparse_kernels)}", rounds, repeat)
        if "error" in headline:
            print(f"headline: failed: {headline['error']}")
            headline = None
    if headline:
        cap = HEADLINE_N ** 2 / sp.band_score_count(HEADLINE_N, WINDOW)
        headline.update(score_ratio_cap=cap, computed_scores=computed[headline["kernel"]],
                        band_scores=sp.band_score_count(HEADLINE_N, WINDOW))
        print(f"\nheadline, n={HEADLINE_N}, w={WINDOW}: dense and {', '.join(sparse_kernels)} side by side over "
              f"{rounds} rounds (exact score ratio {cap:.1f}x); best '{headline['kernel']}'")
        for name, clocks in headline["kernels"].items():
            for clock in ("wall", "cpu_1thread"):
                h = clocks[clock]
                print(f"  {name:>8} {clock:>11} ({h['threads']} thread(s)): dense "
                      f"{statistics.median(h['dense_seconds']):.2f} s, {name} "
                      f"{statistics.median(h['kernel_seconds']) * 1e3:.0f} ms, ratio {h['median_ratio']:.1f}x "
                      f"(rounds: {', '.join(f'{x:.1f}' for x in h['ratios'])})")
    if headline and "cpu_1thread" in headline:
        ceiling = measure("ceiling", 0, repeat)
        if "rows" in ceiling:
            dense_ns = statistics.median(headline["cpu_1thread"]["dense_seconds"]) * 1e9 / (H * HEADLINE_N ** 2)
            ceiling["dense_ns_per_score"] = dense_ns
            print(f"\nceiling: a tile kernel's steps timed alone (one thread, in cache, nothing allocated); "
                  f"dense + mask costs {dense_ns:.2f} ns per score; a 1024^3 matrix product runs at "
                  f"{ceiling['large_matmul_gflops']:.0f} GFLOP/s, the score product at 2 d / (its ns per score)")
            print(f"{'block':>6} {'keys/query':>10} {'n/keys':>7} {'scores':>7} {'softmax':>8} {'exp':>6} "
                  f"{'exp2':>6} {'sum':>6} {'values':>7} {'best: softmax':>14} {'best: exp2+sum':>15}")
            for row in ceiling["rows"]:
                gemms = row["scores_ns_per_score"] + row["values_ns_per_score"]
                row["total_ns_per_score"] = gemms + row["softmax_ns_per_score"]  # SDPA's steps
                row["hand_total_ns_per_score"] = gemms + row["exp2_ns_per_score"] + row["sum_ns_per_score"]
                row["best_ratio"] = HEADLINE_N / row["keys_per_query"] * dense_ns / row["total_ns_per_score"]
                row["hand_best_ratio"] = HEADLINE_N / row["keys_per_query"] * dense_ns / row["hand_total_ns_per_score"]
                print(f"{row['block']:>6} {row['keys_per_query']:>10} {HEADLINE_N / row['keys_per_query']:>7.1f} "
                      + " ".join(f"{row[f'{step}_ns_per_score']:>{width}.2f}" for step, width in
                                 (("scores", 7), ("softmax", 8), ("exp", 6), ("exp2", 6), ("sum", 6), ("values", 7)))
                      + f" {row['best_ratio']:>13.1f}x {row['hand_best_ratio']:>14.1f}x")
        else:
            print(f"ceiling: failed: {ceiling.get('error')}")
    return headline, ceiling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs=2, metavar=("KERNEL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--headline", metavar="KERNEL", help=argparse.SUPPRESS)
    parser.add_argument("--ceiling", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per case (median)")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds for the headline ratio")
    parser.add_argument("--quick", action="store_true", help="n = 2048 and 8192 only, no headline")
    parser.add_argument("--kernels", nargs="+", default=["full", "dense", "blocked", "flex", "fused"])
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="table times: wall clock on all threads, or one thread's CPU time (for a busy "
                             "shared machine: waiting for a core does not count)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON (default %(default)s)")
    parser.add_argument("--only-headline", action="store_true",
                        help="re-measure only the headline rounds and the ceiling, into the existing --out file "
                             "(their date and load average recorded beside them)")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.repeat, args.clock)))
        return 0
    if args.headline:
        print(json.dumps(run_headline(args.headline.split(","), args.repeat, args.rounds)))
        return 0
    if args.ceiling:
        print(json.dumps(run_ceiling(args.repeat)))
        return 0

    from transformer_lib import profiling, sparse as sp

    if args.only_headline:
        report = json.loads(args.out.read_text())
        here, there = profiling.machine_info(), report["machine"]
        differ = [key for key in ("cpu", "cpu_count", "avx512", "torch") if here[key] != there[key]]
        if differ:  # new rounds beside another CPU's table would compare two machines as one
            print(f"--only-headline: {args.out} was measured on another machine ({', '.join(differ)}: "
                  f"{[there[k] for k in differ]} there, {[here[k] for k in differ]} here); run the whole "
                  "benchmark here instead", file=sys.stderr)
            return 2
        computed = {r["kernel"]: r["computed_scores"] for r in report["window"]
                    if r["n"] == HEADLINE_N and "seconds" in r and r["kernel"] not in ("dense", "full")}
        load_start = os.getloadavg()[0]
        headline, ceiling = headline_and_ceiling(computed, args.rounds, args.repeat)
        if headline is None or ceiling is None or "rows" not in ceiling:
            return 1
        headline["measured"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                "load_average_1min": round(load_start, 2),
                                "load_average_1min_end": round(os.getloadavg()[0], 2)}
        report.update(headline=headline, ceiling=ceiling)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote the headline and ceiling into {args.out}")
        return 0

    machine = profiling.machine_info()
    ns = NS[:2] if args.quick else NS
    print(f"{machine['cpu']}, {machine['cpu_count']} CPUs (AVX-512: {machine['avx512']}), torch {machine['torch']}, "
          f"{machine['torch_threads']} threads, device {os.environ.get('TLIB_DEVICE', 'cpu')}, "
          f"load average {machine['load_average_1min']:.2f} at start")
    print(f"sliding window: B={B}, H={H}, d_k={D}, float32, w={WINDOW} (|i - j| <= {WINDOW // 2}); "
          "dense = SDPA with a prebuilt (n, n) bool mask (n^2 bytes, not in its peak)")
    print("times: " + ("wall clock, all threads" if args.clock == "wall" else "CPU time of one thread (time.thread_time)") + "\n")
    header = (f"{'n':>6} {'kernel':>8} {'median':>9} {'peak mem':>9} {'output':>7} {'speedup':>9} "
              f"{'band scores':>12} {'n^2/band':>9} {'computed':>14} {'ns/score':>9} {'max err':>8}")
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], dict] = {}
    for n in ns:
        band = sp.band_score_count(n, WINDOW)
        computed = {"full": n * n, "dense": n * n, "blocked": sp.blocked_score_count(n, WINDOW),
                    "flex": sp.flex_score_count(n, WINDOW), "fused": sp.fused_score_count(n, WINDOW)}
        for kernel in args.kernels:
            r = results[kernel, n] = measure(kernel, n, args.repeat, args.clock)
            r.update(band_scores=band, computed_scores=computed[kernel], output_bytes=B * H * n * D * 4)
            if "error" in r:
                print(f"{n:>6} {kernel:>8}  unavailable: {r['error']}")
                continue
            dense = results.get(("dense", n), {}).get("seconds")
            r["speedup"] = None if kernel == "full" or not dense else dense / r["seconds"]
            r["ns_per_score"] = r["seconds"] * 1e9 / (computed[kernel] * H)
            speed = "-" if r["speedup"] is None else f"{r['speedup']:.1f}x"
            err = "-" if r["max_error"] is None else f"{r['max_error']:.0e}"
            print(f"{n:>6} {kernel:>8} {fmt_time(r['seconds']):>9} {fmt_mb(r['peak_bytes']):>9} "
                  f"{fmt_mb(r['output_bytes']):>7} {speed:>9} {band:>12,} {n * n / band:>9.1f} "
                  f"{computed[kernel]:>14,} {r['ns_per_score']:>9.2f} {err:>8}", flush=True)

    print(f"\ndilated: d={DILATION}, n={DILATED_N} (scores per head: {sp.dilated_score_count(DILATED_N, DILATION):,} "
          f"= n^2/{DILATION})")
    dil = {k: measure(k, DILATED_N, args.repeat, args.clock) for k in ("dense-dilated", "strided")}
    for k, r in dil.items():
        if "error" in r:
            print(f"{k:>14}  failed: {r['error']}")
            continue
        err = "-" if r["max_error"] is None else f"{r['max_error']:.0e}"
        print(f"{k:>14} {fmt_time(r['seconds']):>9} {fmt_mb(r['peak_bytes']):>9}   max err {err}")
    if all("seconds" in r for r in dil.values()):
        print(f"{'speedup':>14} {dil['dense-dilated']['seconds'] / dil['strided']['seconds']:.1f}x")

    print("\ngrowth:")
    growth = {}
    for kernel in [k for k in args.kernels if k != "full"]:
        pts = [(n, results[kernel, n]["seconds"]) for n in ns if "seconds" in results.get((kernel, n), {})]
        if len(pts) >= 2:
            growth[kernel] = growth_exponent(pts)
            print(f"  {kernel:>8}: time grows like n^{growth[kernel]:.2f}")

    headline, ceiling = None, None
    if not args.quick:
        sparse_kernels = [k for k in args.kernels if k not in ("dense", "full")
                          and "seconds" in results.get((k, HEADLINE_N), {})]
        computed = {k: results[k, HEADLINE_N]["computed_scores"] for k in sparse_kernels}
        headline, ceiling = headline_and_ceiling(computed, args.rounds, args.repeat)
    machine["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(f"load average {machine['load_average_1min_end']:.2f} at the end")
    report = {
        "benchmark": "benchmarks/sparse.py", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine, "setting": {"B": B, "H": H, "d_k": D, "dtype": "float32", "window": WINDOW, "clock": args.clock,
                                        "repeat": args.repeat, "dilation": DILATION, "dilated_n": DILATED_N},
        "window": [dict(r) for r in results.values()], "dilated": list(dil.values()),
        "growth_exponents": growth, "headline": headline, "ceiling": ceiling,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
