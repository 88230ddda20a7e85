"""Chapter 9's "same arithmetic, one product or a chain of them", over rounds, with two probes.

    ATEN_CPU_CAPABILITY=default nice .venv/bin/python benchmarks/chain_vs_product.py   # ~15 s of CPU
    ATEN_CPU_CAPABILITY=avx2 nice .venv/bin/python benchmarks/chain_vs_product.py      # adds a second set

The chapter times, once each, four ways of doing the n d^2 B multiply-adds of an Elman RNN's
recurrence (B = 8, d = 256, n = 1024): one large product of all n steps' inputs, the n small
products (B, d) x (d, d) each on its own input, the same n products chained (each reads the last
one's result), and the recurrence itself (chain + addition + tanh per step). One timing per
quantity is no measure of its spread, so this script repeats them in ``--rounds`` rounds, the
quantities taking turns, each entry the least of 5 calls' CPU time on one thread (``time_call``,
as in the chapter). Two probes split the costs:

* ``linear_1x1_chain``: the same n chained calls of an ``nn.Linear(1, 1)`` on a (1, 1) tensor,
  what a call costs with almost no arithmetic;
* ``add_tanh_full`` and ``add_tanh_1x1``: the recurrence's n additions and tanh alone, on the
  chapter's (B, d) tensors and on (1, 1) tensors: which part of them grows with the size of the
  tensor and which is a fixed cost per call.

The results are stored per CPU kernel set (``torch.backends.cpu.get_cpu_capability()``: the book's
outputs use ATen's default kernels, a reader's machine its vectorized ones), in
``benchmarks/results/chain_vs_product.json``; a second run under another capability adds to it.
"""
from __future__ import annotations

import argparse
import json

import torch

import transformer_lib as tl
from _results import RESULTS, write_results
from transformer_lib.profiling import time_call

B, D, N = 8, 256, 1024


def quantities() -> dict:
    """name -> (function, argument), every one of N calls or steps."""
    tl.seed_everything(0)
    rnn = tl.ElmanRNN(D, D).eval()
    tiny = torch.nn.Linear(1, 1).eval()
    tokens = torch.randn(B, N, D)  # (B, n, d)
    with torch.no_grad():
        x_proj = rnn.ih(tokens)  # (B, n, d)
    steps = x_proj.transpose(0, 1).contiguous()  # (n, B, d)
    small_proj = torch.randn(1, N, 1)  # (1, n, 1)

    def separate(steps):
        for t in range(N):
            rnn.hh(steps[t])

    def chained(steps):
        h = steps[0]
        for t in range(N):
            h = rnn.hh(h)

    def recurrence(x_proj):
        h = x_proj.new_zeros(x_proj.shape[0], x_proj.shape[2])
        for t in range(N):
            h = torch.tanh(x_proj[:, t] + rnn.hh(h))

    def tiny_chain(h):
        for _ in range(N):
            h = tiny(h)

    def add_tanh(x_proj):
        h = x_proj.new_zeros(x_proj.shape[0], x_proj.shape[2])
        for t in range(N):
            h = torch.tanh(x_proj[:, t] + h)

    return {"one_product": (rnn.ih, tokens), "separate": (separate, steps), "chained": (chained, steps),
            "recurrence": (recurrence, x_proj), "linear_1x1_chain": (tiny_chain, torch.randn(1, 1)),
            "add_tanh_full": (add_tanh, x_proj), "add_tanh_1x1": (add_tanh, small_proj)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    todo = quantities()
    rounds = {name: [] for name in todo}
    with torch.no_grad():
        for r in range(args.rounds):
            for name, (fn, arg) in todo.items():
                rounds[name].append(time_call(fn, arg, repeats=5, cpu_time=True))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms" for k, v in rounds.items()), flush=True)
    capability = torch.backends.cpu.get_cpu_capability()
    path = RESULTS / "chain_vs_product.json"
    sets = json.loads(path.read_text())["capabilities"] if path.exists() else {}
    sets[capability] = {"rounds": rounds}
    write_results("chain_vs_product", {
        "batch": B, "width": D, "n": N, "clock": "CPU time of one thread, least of 5 calls per round",
        "capabilities": sets})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
