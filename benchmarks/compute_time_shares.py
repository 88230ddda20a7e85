"""Chapter 10's time shares, repeated and in three kernel environments: benchmarks/results/compute_time_shares.json.

    python benchmarks/compute_time_shares.py             # 5 rounds, about four minutes of CPU
    python benchmarks/compute_time_shares.py --rounds 3

Chapter 10 times the two sub-layers of one encoder layer (d = 512, 8 heads, FFN 2048; one sequence
of n tokens, forward pass, no gradients): `self_attn` (projections plus PyTorch's fused attention)
and `ffn`, and compares attention's share of the time with its share of the FLOPs. Its own cell is
one run, in the environment the book's outputs are stored in. This script repeats the measurement
in three environments, each a fresh process because PyTorch reads its kernel choice once, at
import:

* ``store``: the book's stored outputs: ATen's default (unvectorized) kernels, MKL's sgemm and
  oneDNN pinned to AVX2 (the Makefile's STORE_ENV);
* ``avx2``: ATen's AVX2 kernels with the same pins (what `make test` compares in);
* ``native``: no pins: the kernels PyTorch picks for this processor.

Every round is a fresh process, and the rounds go round-robin (round k of each environment, in
turn, before round k + 1), so the environments' round k ran minutes apart on the same machine and
can be compared pair by pair. Each timing is the least of three calls after one warm-up, in the CPU
time of one thread. Per length a round times four things:

0. the attention sub-layer (``self_attn``: four projections and the fused kernel);
1. the FFN sub-layer;
2. the fused kernel alone: ``F.scaled_dot_product_attention`` on the layer's own q, k, v;
3. a softmax over the (1, 8, n, n) scores of those q and k (into a preallocated output).

Matrix products run in MKL's sgemm in all three environments; what changes is the element-wise
work, which ATen's default kernels run as scalar loops. Items 2 and 3 say where attention's extra
time under the default kernels goes: into the fused kernel (not the projections), and how much of
it a softmax over the same scores accounts for.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ENVIRONMENTS = {
    "store": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "native": {},
}
PINNED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
LENGTHS = (64, 256, 1024, 4096)
D, HEADS = 512, 8
COLUMNS = ["attention sub-layer", "FFN sub-layer", "fused attention kernel", "softmax of the scores"]


def measure() -> dict:
    """One round, inside one environment: {"capability": ..., "times": {n: [seconds per COLUMNS]}}."""
    import torch
    import torch.nn.functional as F

    import transformer_lib as tl
    from transformer_lib.multihead import split_heads
    from transformer_lib.profiling import time_call

    torch.set_num_threads(1)
    tl.seed_everything(0)
    layer = tl.TransformerBlock(D, HEADS, 4 * D).eval()
    attn = layer.self_attn
    inputs = {n: torch.randn(1, n, D) for n in LENGTHS}  # (B, n, d)
    times = {}
    with torch.no_grad():
        for n, x in inputs.items():
            q, k, v = (split_heads(proj(x), HEADS) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
            scores = (q @ k.transpose(-2, -1)) * (D // HEADS) ** -0.5  # (1, H, n, n)
            probs = torch.empty_like(scores)
            times[str(n)] = [
                time_call(lambda: attn(x), repeats=3, cpu_time=True),
                time_call(layer.ffn, x, repeats=3, cpu_time=True),
                time_call(F.scaled_dot_product_attention, q, k, v, repeats=3, cpu_time=True),
                time_call(lambda: torch.ops.aten._softmax.out(scores, -1, False, out=probs),
                          repeats=3, cpu_time=True),
            ]
            del scores, probs
    return {"capability": torch.backends.cpu.get_cpu_capability(), "times": times}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:  # a child: one round in the environment it was started with
        print(json.dumps(measure()))
        return 0
    from _results import write_results

    start, cpu = time.perf_counter(), 0.0
    results = {name: {"pins": pins, "rounds": []} for name, pins in ENVIRONMENTS.items()}
    for k in range(args.rounds):
        for name, pins in ENVIRONMENTS.items():
            env = {key: value for key, value in os.environ.items() if key not in PINNED}
            env.update(pins, OMP_NUM_THREADS="1")
            before = os.times()
            child = subprocess.run([sys.executable, __file__, "--inside"], env=env, capture_output=True,
                                   text=True, check=True)
            after = os.times()
            cpu += (after.children_user - before.children_user) + (after.children_system - before.children_system)
            out = json.loads(child.stdout.strip().splitlines()[-1])
            results[name]["capability"] = out["capability"]
            results[name]["rounds"].append(out["times"])
            print(f"round {k + 1}, {name} ({out['capability']}): "
                  + ", ".join(f"n={n} {t[0]:.3f}/{t[1]:.3f}/{t[2]:.3f}/{t[3]:.3f} s" for n, t in out["times"].items()),
                  flush=True)
    write_results("compute_time_shares", {
        "d": D, "heads": HEADS, "d_ff": 4 * D, "lengths": list(LENGTHS), "rounds": args.rounds,
        "columns": COLUMNS,
        "clock": "CPU time of one thread, least of 3 calls after 1 warm-up",
        "order": "each round a fresh process; round k of every environment before round k + 1",
        "environments": results, "seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(cpu, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
