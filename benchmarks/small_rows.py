"""Why a batched decoding step costs more than one row on a CPU: F.linear on SmolLM2's shapes for
M = 1 .. 16 rows, torch's default against other ways to write the same product (chapter 28's
"rows are nearly free" and chapter 29's verification both lean on this).

    nice .venv/bin/python benchmarks/small_rows.py        # ~1 minute of CPU per thread count

Setting: one decode step's linear layers of SmolLM2-135M (30 blocks x q (576x576), k, v
(192x576 each), o (576x576), gate, up (1536x576), down (576x1536)), each block its own random
float32 weights so that every weight comes from memory as in a real forward pass (one weight
timed alone stays in the cache and hides the effect), and the tied LM head (49152x576, 113 MB).
CPU time (``time.process_time``) of each variant, median of ``--reps`` (5), at ``--threads`` (1 and 2); variants
interleaved so the load of the machine hits them alike.

Variants of ``y = x @ W.T`` (x (M, K) row-major, W (N, K) as nn.Linear stores it):

* ``F.linear``  - torch's default (MKL sgemm with W transposed);
* ``W@x.T``     - ``torch.mm(W, x.t()).t().contiguous()``: the BLAS sees a matrix times M columns;
* ``x@Wt``      - W stored transposed once (K, N) and ``x @ Wt``;
* ``onednn``    - oneDNN's linear with a weight prepacked for it (``torch.ops.mkldnn._linear_pointwise``);
* ``packed``    - ``serving.packed_linear.packed_linear``, what ``PackedLinears`` runs: the library's
                  few-rows kernel (each weight read once for all rows) up to 8 rows, oneDNN beyond;

and, on the real model, one whole decode step (B rows at 64 cached positions, paged cache) with
the model's nn.Linear layers run by ``F.linear`` and by ``serving.packed_linear.PackedLinears``
(the ``packed`` variant, which the batchers use with ``pack_linears=True``).

It prints, asserts nothing, and writes benchmarks/results/small_rows.json.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, write_results  # noqa: E402

from transformer_lib.serving.packed_linear import KERNEL_MAX_ROWS, kernel_available, packed_linear  # noqa: E402

D, KV, FF, V, NL = 576, 192, 1536, 49152, 30
LAYER_SHAPES = [(D, D), (KV, D), (KV, D), (D, D), (FF, D), (FF, D), (D, FF)]
ROWS = [1, 2, 3, 4, 5, 8, 9, 16]


def transposed_mm(x, w):
    return torch.mm(w, x.t()).t().contiguous()


def linear_sweep(reps=5):
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(n, k, generator=g) * 0.02 for _ in range(NL) for n, k in LAYER_SHAPES]
    head = torch.randn(V, D, generator=g) * 0.02
    wts = [w.t().contiguous() for w in ws]
    head_t = head.t().contiguous()
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in ws]
    packed_head = torch.ops.mkldnn._reorder_linear_weight(head, None)
    calls = {
        "F.linear": (lambda x, i: F.linear(x, ws[i]), lambda x: F.linear(x, head)),
        "W@x.T": (lambda x, i: transposed_mm(x, ws[i]), lambda x: transposed_mm(x, head)),
        "x@Wt": (lambda x, i: x @ wts[i], lambda x: x @ head_t),
        "onednn": (lambda x, i: torch.ops.mkldnn._linear_pointwise(x, packed[i], None, "none", [], ""),
                   lambda x: torch.ops.mkldnn._linear_pointwise(x, packed_head, None, "none", [], "")),
        # what PackedLinears runs: the few-rows kernel up to KERNEL_MAX_ROWS rows, oneDNN beyond
        "packed": (lambda x, i: packed_linear(x, ws[i], packed[i]), lambda x: packed_linear(x, head, packed_head)),
    }
    out = {name: {"layers_s": [], "head_s": []} for name in calls}
    for M in ROWS:
        xs = {D: torch.randn(M, D, generator=g), FF: torch.randn(M, FF, generator=g)}
        times = {name: ([], []) for name in calls}
        for _ in range(reps):
            for name, (layer, lm_head) in calls.items():
                start = time.process_time()
                for i, (_, k) in enumerate(LAYER_SHAPES * NL):
                    layer(xs[k], i)
                mid = time.process_time()
                lm_head(xs[D])
                times[name][0].append(mid - start)
                times[name][1].append(time.process_time() - mid)
        line = []
        for name, (lt, ht) in times.items():
            out[name]["layers_s"].append(sorted(lt)[reps // 2])
            out[name]["head_s"].append(sorted(ht)[reps // 2])
            line.append(f"{name} {1e3 * out[name]['layers_s'][-1]:6.1f} + {1e3 * out[name]['head_s'][-1]:5.1f}")
        print(f"  M={M:2d} (layers + head, ms)  " + " | ".join(line), flush=True)
    return out


@torch.no_grad()
def step_sweep(reps=5):
    from transformer_lib.pretrained import load_smollm2
    from transformer_lib.serving.batching import new_ragged_cache
    from transformer_lib.serving.packed_linear import PackedLinears
    model = load_smollm2().model
    packs = PackedLinears(model)
    ids = torch.randint(100, 10000, (1, 64), generator=torch.Generator().manual_seed(1))
    out = {"rows": [1, 2, 3, 4, 8], "F.linear": [], "packed": []}
    for B in out["rows"]:
        kv = new_ragged_cache(model, B, "paged", 16, capacity=128)
        model(ids.expand(B, -1).contiguous(), cache=kv)
        token = torch.full((B, 1), 500)
        times = {"F.linear": [], "packed": []}
        for _ in range(reps):
            for name in times:
                kv.set_lengths(torch.full((B,), 64))
                with packs if name == "packed" else contextlib.nullcontext():
                    start = time.process_time()
                    model(token, cache=kv)
                    times[name].append(time.process_time() - start)
        for name in times:
            out[name].append(sorted(times[name])[reps // 2])
        print(f"  decode step B={B}: F.linear {1e3 * out['F.linear'][-1]:6.1f} ms, packed {1e3 * out['packed'][-1]:6.1f} ms",
              flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5, help="timings per variant (the median is kept)")
    args = ap.parse_args(argv)
    payload = {"rows": ROWS, "reps": args.reps, "kernel_max_rows": KERNEL_MAX_ROWS,
               "kernel": kernel_available()[1], "by_threads": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"# {describe(machine())}; {threads} threads")
        payload["by_threads"][str(threads)] = {"linear": linear_sweep(args.reps), "decode_step": step_sweep(args.reps)}
    write_results("small_rows", payload)


if __name__ == "__main__":
    main()
