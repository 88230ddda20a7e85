"""Sparse attention kernels against dense masked SDPA: time, peak memory, scores computed.

    nice .venv/bin/python benchmarks/sparse.py            # the full table (about 2-3 minutes idle)
    .venv/bin/python benchmarks/sparse.py --quick         # n = 2048 and 8192 only

Setting (issue 5 / DL0028): 8 heads x 64, float32, batch 1, window w = 512 (each query sees the
keys with |i - j| <= 256), n in {2048, 8192, 16384, 32768}; plus dilated attention with d = 4 at
n = 8192 (DL0029). Kernels (transformer_lib.sparse):

* dense   - F.scaled_dot_product_attention with the (n, n) boolean band mask: the baseline. The
            mask is built before timing (a model builds it once for all layers); it holds n^2
            bytes more (1 GiB at n = 32768) that the peak-memory column leaves out;
* full    - SDPA with no mask at all (full attention, a different result): shows what the mask
            itself costs the dense baseline;
* blocked - blocks of 32 queries, each on its own (32 x 544) key tile; the tiles are
            overlapping views of k and v, batched 128 blocks per SDPA call;
* flex    - torch.compile(flex_attention) with the cached window BlockMask of 64 x 64 tiles
            (compiled once per process before timing; the compile time is not in the table);
* strided - dilated attention as d dense SDPA calls on the interleaved subsequences.

Method. Every (kernel, n) case runs in a fresh Python subprocess, so that no allocator cache or
compiled kernel of one case leaks into another. In the subprocess:

* time: one warm-up call, then the median wall time of ``--repeat`` calls (dense at n >= 16384:
  one call, it takes seconds and gigabytes);
* peak memory: extra resident memory (RSS) at the peak of one call beyond what was resident just
  before it (q, k, v already allocated). Linux's peak-RSS counter VmHWM is reset through
  /proc/self/clear_refs right before the call, and glibc is told to return every block larger
  than 128 KiB to the OS on free (MALLOC_MMAP_THRESHOLD_), so the counter sees the call's own
  buffers. tracemalloc would see none of them: torch allocates outside Python's allocator. On a
  GPU the same column comes from torch.cuda.max_memory_allocated;
* scores: the exact number of band pairs per head (``band_score_count``) next to n^2, and what
  each kernel really computes (whole tiles: ``blocked_score_count`` / ``flex_score_count``);
  ns/score is the time per computed score and head. A speedup over dense is the product of
  (n^2 / computed scores) and (dense ns/score / kernel ns/score).

It is a benchmark, not a test: it prints, it asserts nothing. Run it on a quiet machine (the
load average is printed) and with ``nice`` on a shared one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

B, H, D = 1, 8, 64
WINDOW = 512
NS = (2048, 8192, 16384, 32768)
DILATION, DILATED_N = 4, 8192


def run_case(kernel: str, n: int, repeat: int, seed: int = 0) -> dict:
    """Measure one case in this process; returns a JSON-able dict."""
    import torch
    import torch.nn.functional as F

    from transformer_lib import sparse as sp

    device = torch.device(os.environ.get("TLIB_DEVICE", "cpu"))
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g).to(device) for _ in range(3))
    if kernel == "full":  # no mask at all: every score computed, none masked (not a window!)
        fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    elif kernel == "dense":  # the baseline: SDPA given a boolean band mask built beforehand
        mask = sp._band_mask(n, WINDOW // 2, WINDOW // 2, device)  # (n, n) bool
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    elif kernel == "dense-dilated":
        mask = sp._residue_mask(n, DILATION, False, device)  # (n, n) bool
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    elif kernel == "strided":
        fn = lambda: sp.dilated_attention(q, k, v, DILATION, kernel="strided")  # noqa: E731
    else:
        fn = lambda: sp.sliding_window_attention(q, k, v, WINDOW, kernel=kernel)  # noqa: E731
    slow = kernel in ("dense", "full") and n >= 16384
    out = fn()  # warm-up (compiles flex)
    if kernel == "flex" and (device.type, torch.float32) in sp._FLEX_STATE["errors"]:
        return {"kernel": kernel, "n": n, "error": sp._FLEX_STATE["errors"][device.type, torch.float32]}
    error = None
    if n <= 8192 and kernel not in ("dense", "dense-dilated", "full"):
        ref = (sp.dilated_attention(q, k, v, DILATION, kernel="dense") if kernel == "strided"
               else sp.sliding_window_attention(q, k, v, WINDOW, kernel="dense"))
        error = (out - ref).abs().max().item()
        del ref
    del out
    peak = sp.peak_memory(fn, device=device)
    seconds = sp.median_time(fn, repeat=1 if slow else repeat, warmup=0)
    return {"kernel": kernel, "n": n, "seconds": seconds, "peak_bytes": peak, "max_error": error,
            "threads": torch.get_num_threads()}


def measure(kernel: str, n: int, repeat: int) -> dict:
    """Run :func:`run_case` in a fresh subprocess."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    cmd = [sys.executable, __file__, "--case", kernel, str(n), "--repeat", str(repeat)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs=2, metavar=("KERNEL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per case (median)")
    parser.add_argument("--quick", action="store_true", help="n = 2048 and 8192 only")
    parser.add_argument("--kernels", nargs="+", default=["full", "dense", "blocked", "flex"])
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.repeat)))
        return 0

    import torch

    from transformer_lib import sparse as sp

    ns = NS[:2] if args.quick else NS
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, device {os.environ.get('TLIB_DEVICE', 'cpu')}, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    print(f"sliding window: B={B}, H={H}, d_k={D}, float32, w={WINDOW} (|i - j| <= {WINDOW // 2}); "
          "dense = SDPA with a prebuilt (n, n) bool mask (n^2 bytes, not in its peak)\n")
    header = (f"{'n':>6} {'kernel':>8} {'median':>9} {'peak mem':>9} {'output':>7} {'speedup':>9} "
              f"{'band scores':>12} {'n^2/band':>9} {'computed':>14} {'ns/score':>9} {'max err':>8}")
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], dict] = {}
    for n in ns:
        band = sp.band_score_count(n, WINDOW)
        computed = {"full": n * n, "dense": n * n, "blocked": sp.blocked_score_count(n, WINDOW),
                    "flex": sp.flex_score_count(n, WINDOW)}
        for kernel in args.kernels:
            r = results[kernel, n] = measure(kernel, n, args.repeat)
            if "error" in r:
                print(f"{n:>6} {kernel:>8}  unavailable: {r['error']}")
                continue
            dense = results.get(("dense", n), {}).get("seconds")
            speed = "-" if kernel == "full" or not dense else f"{dense / r['seconds']:.1f}x"
            err = "-" if r["max_error"] is None else f"{r['max_error']:.0e}"
            ns_per_score = r["seconds"] * 1e9 / (computed[kernel] * H)
            print(f"{n:>6} {kernel:>8} {fmt_time(r['seconds']):>9} {fmt_mb(r['peak_bytes']):>9} "
                  f"{fmt_mb(B * H * n * D * 4):>7} {speed:>9} {band:>12,} {n * n / band:>9.1f} "
                  f"{computed[kernel]:>14,} {ns_per_score:>9.2f} {err:>8}", flush=True)

    print(f"\ndilated: d={DILATION}, n={DILATED_N} (scores per head: {sp.dilated_score_count(DILATED_N, DILATION):,} "
          f"= n^2/{DILATION})")
    dil = {k: measure(k, DILATED_N, args.repeat) for k in ("dense-dilated", "strided")}
    for k, r in dil.items():
        if "error" in r:
            print(f"{k:>14}  failed: {r['error']}")
            continue
        err = "-" if r["max_error"] is None else f"{r['max_error']:.0e}"
        print(f"{k:>14} {fmt_time(r['seconds']):>9} {fmt_mb(r['peak_bytes']):>9}   max err {err}")
    if all("seconds" in r for r in dil.values()):
        print(f"{'speedup':>14} {dil['dense-dilated']['seconds'] / dil['strided']['seconds']:.1f}x (target >= 4x)")

    print("\ntargets (issue 5, 2 CPU cores):")
    for kernel in [k for k in args.kernels if k != "full"]:
        pts = [(n, results[kernel, n]["seconds"]) for n in ns if "seconds" in results.get((kernel, n), {})]
        if len(pts) >= 2:
            tail = [p for p in pts if p[0] >= 8192]
            tail_text = f", n^{growth_exponent(tail):.2f} from 8192" if len(tail) >= 2 else ""
            print(f"  {kernel:>8}: time grows like n^{growth_exponent(pts):.2f} over all n{tail_text} "
                  "(target <= 1.1 for the sparse kernels)")
    if 16384 in ns:
        best = min((results[k, 16384] for k in args.kernels
                    if k not in ("dense", "full") and "seconds" in results.get((k, 16384), {})),
                   key=lambda r: r["seconds"], default=None)
        dense = results.get(("dense", 16384), {}).get("seconds")
        if best and dense:
            print(f"  best kernel at n=16384: {best['kernel']}, {dense / best['seconds']:.1f}x faster than dense "
                  f"(target >= 25x; exact score ratio {16384 ** 2 / sp.band_score_count(16384, WINDOW):.1f}x)")
    if 32768 in ns:
        fastest = min((results[k, 32768] for k in args.kernels
                       if k not in ("dense", "full") and "seconds" in results.get((k, 32768), {})),
                      key=lambda r: r["seconds"], default=None)
        if fastest:
            print(f"  fastest at n=32768: {fastest['kernel']} in {fmt_time(fastest['seconds'])} (target <= 0.3 s)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
