"""Chapter 10's time shares, repeated and in three kernel environments: benchmarks/results/compute_time_shares.json.

    python benchmarks/compute_time_shares.py             # 5 rounds, about two minutes of CPU
    python benchmarks/compute_time_shares.py --rounds 3

Chapter 10 times the two sub-layers of one encoder layer (d = 512, 8 heads, FFN 2048; one sequence
of n tokens, forward pass, no gradients): `self_attn` (projections plus PyTorch's fused attention)
and `ffn`, and compares attention's share of the time with its share of the FLOPs. Its own cell is
one run, in the environment the book's outputs are stored in. This script repeats the measurement
in five rounds (each round times every length once, each timing the least of three calls after one
warm-up, as the CPU time of one thread) and in three environments, each a fresh process because
PyTorch reads its kernel choice once, at import:

* ``store``: the book's stored outputs: ATen's default (unvectorized) kernels, MKL's sgemm and
  oneDNN pinned to AVX2 (the Makefile's STORE_ENV);
* ``avx2``: ATen's AVX2 kernels with the same pins (what `make test` compares in);
* ``native``: no pins: the kernels PyTorch picks for this processor.

Matrix products run in MKL's sgemm in all three; what changes is the element-wise work (the
softmax inside the fused attention kernel, the ReLU, the bias additions), which ATen's default
kernels run as scalar loops.
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


def measure(rounds: int) -> dict:
    """Run inside one environment: {"capability": ..., "rounds": [{n: [attention s, ffn s]}]}."""
    import torch

    import transformer_lib as tl
    from transformer_lib.profiling import time_call

    torch.set_num_threads(1)
    tl.seed_everything(0)
    layer = tl.TransformerBlock(D, HEADS, 4 * D).eval()
    inputs = {n: torch.randn(1, n, D) for n in LENGTHS}  # (B, n, d)
    out = []
    with torch.no_grad():
        for _ in range(rounds):
            row = {}
            for n, x in inputs.items():
                attention = time_call(lambda: layer.self_attn(x), repeats=3, cpu_time=True)
                ffn = time_call(layer.ffn, x, repeats=3, cpu_time=True)
                row[str(n)] = [attention, ffn]
            out.append(row)
    return {"capability": torch.backends.cpu.get_cpu_capability(), "rounds": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:  # a child: measure in the environment it was started with
        print(json.dumps(measure(args.rounds)))
        return 0
    from _results import write_results

    start, results = time.perf_counter(), {}
    cpu = 0.0
    for name, pins in ENVIRONMENTS.items():
        env = {k: v for k, v in os.environ.items() if k not in PINNED}
        env.update(pins, OMP_NUM_THREADS="1")
        before = os.times()
        child = subprocess.run([sys.executable, __file__, "--inside", "--rounds", str(args.rounds)],
                               env=env, capture_output=True, text=True, check=True)
        after = os.times()
        cpu += (after.children_user - before.children_user) + (after.children_system - before.children_system)
        results[name] = {"pins": pins, **json.loads(child.stdout.strip().splitlines()[-1])}
        print(name, results[name]["capability"], flush=True)
    write_results("compute_time_shares", {
        "d": D, "heads": HEADS, "d_ff": 4 * D, "lengths": list(LENGTHS), "rounds": args.rounds,
        "clock": "CPU time of one thread, least of 3 calls after 1 warm-up, per round",
        "environments": results, "seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(cpu, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
