"""Chapter 18's measurements on 1, 2 and 4 processes (gloo, one thread per rank, this machine).

    python benchmarks/distributed.py            # everything (~1-2 min on an idle 2-core machine)

Writes ``benchmarks/results/distributed.json``; chapter 18 prints from it what it cannot afford to
measure live inside its 60 s budget:

* ``agreement``: chapter 16's GPT trained ``STEPS`` steps by hand (one process, no group), then
  with DDP and FSDP on 1, 2 and 4 ranks, and once through ``torchrun`` per strategy: the largest
  parameter and loss difference from the one-process run.
* ``memory``: bytes of parameters, gradients and Adam state per rank (DDP, FSDP on 2 and 4),
  measured on the tensors, against 16 P / N.
* ``collectives``: bytes each rank sent (``/proc/self/io``) for all-reduce, all-gather and
  reduce-scatter of 1 MB and 16 MB on 2 and 4 ranks, against the ring formulas, and the time.
* ``step_bytes``: bytes a rank sent in one training step under DDP and FSDP.
* ``bubble``: the pipeline's measured idle fraction on 2 and 4 stages that compute, for 1-16
  micro-batches, once each. On cores shared with other processes these timings measure the load
  as much as the schedule; chapter 18 reads ``benchmarks/pipeline_bubble.py``'s repeated timings
  of stages of fixed duration instead.

Four ranks on a 2-core machine are oversubscribed: fine for agreement, bytes and memory, not
for times. The load average is recorded with the machine.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import transformer_lib.distributed as tld
from _results import describe, machine, write_results

STEPS, BATCH = 8, 8
ROOT = Path(__file__).resolve().parents[1]


def _diff(state: dict, reference: dict) -> float:
    return max((state[k] - reference[k]).abs().max().item() for k in reference)


def _torchrun(strategy: str, nproc: int, folder: Path) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    save = folder / f"{strategy}{nproc}.pt"
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", str(nproc), "--master-addr",
           "127.0.0.1", "--master-port", str(port), "-m", "transformer_lib.distributed", "--strategy", strategy,
           "--steps", str(STEPS), "--global-batch", str(BATCH), "--seed", "0", "--save", str(save)]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=300, capture_output=True,
                   env=os.environ | tld.LOOPBACK_ENV)
    return {"state": torch.load(save, weights_only=True),
            "loss": json.loads(Path(f"{save}.losses.json").read_text())}


def agreement() -> list[dict]:
    reference = tld.train(0, 1, "hand", STEPS, BATCH, 0)
    rows = []
    runs = [(s, n, "launch") for s in ("hand", "ddp", "fsdp") for n in (1, 2, 4) if not (s == "hand" and n == 1)]
    runs += [("ddp", 4, "torchrun"), ("fsdp", 4, "torchrun")]
    with tempfile.TemporaryDirectory() as folder:
        for strategy, n, how in runs:
            start = time.perf_counter()
            result = (tld.launch(tld.train, n, strategy, STEPS, BATCH, 0, timeout=300)[0] if how == "launch"
                      else _torchrun(strategy, n, Path(folder)))
            rows.append({"strategy": strategy, "ranks": n, "how": how, "seconds": time.perf_counter() - start,
                         "param_diff": _diff(result["state"], reference["state"]),
                         "loss_diff": max(abs(a - b) for a, b in zip(result["loss"], reference["loss"]))})
            print(f"{strategy:>5} x {n} ({how:>8}): params {rows[-1]['param_diff']:.2e}, "
                  f"losses {rows[-1]['loss_diff']:.2e}  ({rows[-1]['seconds']:.1f} s)", flush=True)
    return rows, reference["loss"]


def memory_and_step_bytes() -> tuple[list[dict], list[dict]]:
    memory, step_bytes = [], []
    for strategy, n in (("ddp", 2), ("fsdp", 2), ("fsdp", 4)):
        per_rank = tld.launch(tld.train, n, strategy, 3, BATCH, 0, tld.Recipe(), True, timeout=300)
        for rank, r in enumerate(per_rank):
            memory.append({"strategy": strategy, "ranks": n, "rank": rank, **r["bytes"]})
            step_bytes.append({"strategy": strategy, "ranks": n, "rank": rank, "sent": r["sent_per_step"][-1],
                               "grad_bytes": 4 * r["bytes"]["numel"]})
        b = per_rank[0]["bytes"]
        print(f"{strategy:>5} x {n}: rank 0 holds {b['total']:,} bytes (16 P / N = "
              f"{tld.zero_bytes_per_rank(b['numel'], n, 3 if strategy == 'fsdp' else 0):,.0f}); "
              f"sent {per_rank[0]['sent_per_step'][-1]:,} bytes in a step", flush=True)
    return memory, step_bytes


def collectives() -> list[dict]:
    rows = []
    for n in (2, 4):
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for r in tld.launch(tld.measure_allreduce, n, [262_144, 4_194_304], 3, op, timeout=300)[0]:
                rows.append({"ranks": n, **r})
                print(f"{op:>14} x {n}: {r['bytes']:>10,} bytes -> sent {r['sent']:>10,} "
                      f"({r['sent'] / r['bytes']:.3f} S) in {1e3 * r['seconds']:.1f} ms", flush=True)
    return rows


def bubble() -> list[dict]:
    rows = []
    for p in (2, 4):
        for m in (1, 2, 4, 8, 16):
            results = tld.launch(tld.pipeline_forward, p, m, 8, 64, 128, 2, timeout=300)
            rows.append({"stages": p, "micro_batches": m, "formula": tld.bubble_fraction(p, m),
                         "measured": tld.measured_bubble(results), "wall": results[0]["wall"],
                         "busy": [r["busy"] for r in results]})
            print(f"p = {p}, m = {m:>2}: bubble {rows[-1]['measured']:.3f} measured, {rows[-1]['formula']:.3f} "
                  f"formula", flush=True)
    return rows


def main() -> None:
    print("#", describe(machine()))
    start = time.perf_counter()
    rows, losses = agreement()
    memory, step_bytes = memory_and_step_bytes()
    write_results("distributed", {"steps": STEPS, "global_batch": BATCH, "agreement": rows, "reference_losses": losses,
                                  "memory": memory, "step_bytes": step_bytes, "collectives": collectives(),
                                  "bubble": bubble(), "seconds": time.perf_counter() - start})


if __name__ == "__main__":
    main()
