"""Chapter 28's server comparisons over five draws of the workload (seeds 0 .. 4; seed 0 is the draw
``benchmarks/serving.py`` serves once, in wall time, on an idle machine, so the two clocks can be
compared on it).

    nice .venv/bin/python benchmarks/serving_seeds.py       # about 11 minutes of one core at load 3

Setting as ``benchmarks/serving.py``: SmolLM2-135M-Instruct in float32, one thread, 16 requests,
prompts uniform in [16, 96] tokens, outputs uniform in [8, 40], greedy; batches of up to 8 rows,
blocks of 16 positions, a pool of 256 blocks, a prompt budget of 512 tokens per step, the
batchers' linear layers in ``PackedLinears``. Each seed draws new prompts, output lengths and
arrivals (``serving.workload.make_workload``).

Clock: this process's CPU time plus the idle time the arrivals impose (``time.sleep`` advances
the clock by its argument instead of sleeping), so that time the process waits for a core does
not count; on an idle core it reads as wall time. It does not remove all of the machine's other
load: a neighbour's memory traffic still slows the memory-bound steps, one request at a time's
most (compare seed 0 with ``serving.json``).

Per seed:

* offline (every request at 0): one request at a time, static batches, the continuous batcher
  (every forward pass recorded: its decoding rows, its prompt chunks and its CPU seconds), and
  transformers' manager (its tokens per CPU second only: its token times come from its own wall
  clock, which the load would move);
* online (Poisson arrivals, 2 per second): static batches and the continuous batcher. One request
  at a time serves each request exactly as offline, so its online run is the offline run's
  per-request service times replayed against the arrivals (``replay``).

Memory (cache positions) as in ``benchmarks/serving.py``. It prints, asserts nothing, and writes
``benchmarks/results/serving_seeds.json``.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, write_results  # noqa: E402
from serving import BLOCK, BUDGET, NUM_BLOCKS, OUTPUTS, PROMPTS, hf_manager, hf_serve  # noqa: E402

import transformer_lib.serving.scheduler as scheduler  # noqa: E402
from transformer_lib.pretrained import load_smollm2, smollm2_gguf_path  # noqa: E402
from transformer_lib.serving.baselines import serve_one_at_a_time, serve_static  # noqa: E402
from transformer_lib.serving.workload import latency_summary, make_workload, percentile  # noqa: E402


class CPUClock:
    """Seconds of this process's CPU time since creation, plus the seconds slept on it."""

    def __init__(self):
        self.origin, self.idle = time.process_time(), 0.0

    def __call__(self) -> float:
        return time.process_time() - self.origin + self.idle

    def sleep(self, seconds: float) -> None:
        self.idle += max(0.0, seconds)


@contextlib.contextmanager
def simulated():
    """A fresh CPUClock, with ``time.sleep`` advancing it instead of sleeping."""
    clock, real = CPUClock(), time.sleep
    time.sleep = clock.sleep
    try:
        yield clock
    finally:
        time.sleep = real


@contextlib.contextmanager
def recorded_steps(into: list):
    """Record every forward pass of the continuous batcher: decoding rows, prompt chunks
    ([request id, tokens]) and CPU seconds."""
    real = scheduler.varlen_forward

    def timed(model, cache, ids, pieces):
        start = time.process_time()
        out = real(model, cache, ids, pieces)
        into.append({"decode": sum(len(p) == 1 for p in pieces),
                     "prompts": [[i, len(p)] for i, p in zip(ids, pieces) if len(p) > 1],
                     "s": time.process_time() - start})
        return out

    scheduler.varlen_forward = timed
    try:
        yield into
    finally:
        scheduler.varlen_forward = real


@contextlib.contextmanager
def head_calls(model, into: list):
    """Record every call of ``model``'s LM head: [rows B, positions L, CPU seconds] for an input
    (B, L, D), [S, 0, seconds] for the batcher's (S, D) (its last tokens only)."""
    start = {}

    def pre(module, args):
        start["t"] = time.process_time()

    def post(module, args, out):
        x = args[0]
        shape = [x.shape[0], x.shape[1]] if x.dim() == 3 else [x.shape[0], 0]
        into.append(shape + [time.process_time() - start["t"]])

    hooks = [model.head.register_forward_pre_hook(pre), model.head.register_forward_hook(post)]
    try:
        yield into
    finally:
        for h in hooks:
            h.remove()


def unsampled_head_seconds(calls) -> float:
    """CPU seconds the LM head spent on positions whose logits no one samples: a call on (B, L, D)
    with L > 1 (a prefill) needs B rows of logits, so its time beyond a one-position call of the same
    B rows (the median of the run's decoding calls) went to the other B x (L - 1)."""
    one = {}
    for b, length, t in calls:
        if length == 1:
            one.setdefault(b, []).append(t)
    base = {b: sorted(ts)[len(ts) // 2] for b, ts in one.items()}
    fallback = min(base.values()) if base else 0.0
    return sum(max(0.0, t - base.get(b, fallback)) for b, length, t in calls if length > 1)


def hf_offline(ref, requests, batch):
    """transformers' manager on ``requests`` (all at 0), as ``serving.hf_serve`` runs it: the CPU
    seconds of this process from the requests' submission to the last token (the manager's own
    set-up not counted, as the batcher's is not)."""
    manager = hf_manager(ref, batch)
    out = {}
    try:
        cpu = time.process_time()
        for r in requests:
            manager.add_request(r.prompt, request_id=str(r.id), max_new_tokens=r.max_tokens)
        while len(out) < len(requests):
            result = manager.get_result(timeout=60)
            if result is None:
                raise RuntimeError("transformers' manager stopped before every request finished")
            if result.is_finished():
                out[int(result.request_id)] = list(result.generated_tokens)
        cpu = time.process_time() - cpu
    finally:
        manager.stop(block=True, timeout=30)
    for r in requests:
        r.tokens = out[r.id]
    return cpu


def replay(solo, workload):
    """One request at a time against ``workload``'s arrivals, from each request's offline
    service: (seconds, per-request TTFT)."""
    t, ttft = 0.0, []
    for r in sorted(workload, key=lambda r: r.arrival):
        start = max(t, r.arrival)
        ttft.append(start + solo[r.id]["prefill_s"] - r.arrival)
        t = start + solo[r.id]["service_s"]
    return t, ttft


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start_cpu, start = time.process_time(), time.perf_counter()
    lm = load_smollm2()
    from transformers import AutoModelForCausalLM
    from transformers import __version__ as tf_version
    path = smollm2_gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    print(f"# {describe(machine())}; 1 thread; transformers {tf_version}", flush=True)
    model = lm.model
    opts = dict(max_batch=args.batch, block_size=BLOCK, num_blocks=NUM_BLOCKS, max_prefill_tokens=BUDGET,
                reserve_tokens=OUTPUTS[1], pack_linears=True)
    with torch.no_grad():  # warm-up: one short request through each path
        warm = make_workload(2, None, (8, 8), (2, 2), seed=9)
        scheduler.serve_continuous(model, [r.fresh() for r in warm], max_batch=2, block_size=BLOCK, num_blocks=8)
        hf_serve(ref, [r.fresh() for r in warm], 2)
    draws = []
    for seed in args.seeds:
        offline = make_workload(args.requests, None, PROMPTS, OUTPUTS, seed=seed)
        online = make_workload(args.requests, args.rate, PROMPTS, OUTPUTS, seed=seed)
        draw = {"seed": seed, "prompt_tokens": sum(len(r.prompt) for r in offline),
                "output_tokens": sum(r.max_tokens for r in offline),
                "last_arrival_s": max(r.arrival for r in online), "offline": {}, "online": {}}
        served = {}
        with torch.no_grad():
            rs, calls = [r.fresh() for r in offline], []
            with simulated() as clock, head_calls(model, calls):
                seconds = serve_one_at_a_time(model, rs, clock=clock)
            prefills = iter(c for c in calls if c[1] > 1)  # each request's prompt (>= 16 tokens), in order
            decodes = [c for c in calls if c[1] == 1]
            solo, end = {}, 0.0
            for r in rs:  # offline: in id order, each after the one before
                solo[r.id] = {"prompt": len(r.prompt), "prefill_s": r.token_times[0] - end,
                              "service_s": r.token_times[-1] - end,
                              "unsampled_head_s": unsampled_head_seconds([next(prefills)] + decodes)}
                end = r.token_times[-1]
            draw["offline"]["one-at-a-time"] = latency_summary(rs, seconds)
            draw["offline"]["one-at-a-time"]["unsampled_head_s"] = unsampled_head_seconds(calls)
            draw["solo"] = [solo[r.id] for r in rs]
            served["one-at-a-time"] = [r.tokens for r in rs]
            seconds, ttft = replay(solo, online)
            row = dict(draw["offline"]["one-at-a-time"])
            row.update(seconds=seconds, tokens_per_s=row["tokens"] / seconds,
                       ttft_p50_s=percentile(ttft, 50), ttft_p95_s=percentile(ttft, 95))
            draw["online"]["one-at-a-time"] = row
            for scenario, workload in (("offline", offline), ("online", online)):
                for method in ("static", "continuous"):
                    rs, steps, calls = [r.fresh() for r in workload], [], []
                    with simulated() as clock, head_calls(model, calls), (
                            recorded_steps(steps) if scenario == "offline" and method == "continuous"
                            else contextlib.nullcontext()):
                        if method == "static":
                            seconds, memory = serve_static(model, rs, max_batch=args.batch, clock=clock,
                                                           reserve_tokens=OUTPUTS[1], pack_linears=True)
                        else:
                            seconds, memory = scheduler.serve_continuous(model, rs, clock=clock, **opts)
                    row = latency_summary(rs, seconds)
                    row["same_tokens_as_one_at_a_time"] = sum(r.tokens == t for r, t in zip(rs, served["one-at-a-time"]))
                    row["unsampled_head_s"] = unsampled_head_seconds(calls)
                    if scenario == "offline":
                        row["memory_positions"] = memory
                    draw[scenario][method] = row
                    if steps:
                        draw["steps"] = steps
            rs = [r.fresh() for r in offline]
            cpu = hf_offline(ref, rs, args.batch)
            tokens = sum(len(r.tokens) for r in rs)
            draw["offline"]["transformers"] = {
                "tokens": tokens, "cpu_seconds": cpu, "tokens_per_s": tokens / cpu,
                "same_tokens_as_one_at_a_time": sum(r.tokens == t for r, t in zip(rs, served["one-at-a-time"]))}
        line = " ".join(f"{s[:3]} {m} {row['tokens_per_s']:.1f}" for s in ("offline", "online")
                        for m, row in draw[s].items())
        print(f"seed {seed}: {line} tok/s", flush=True)
        draws.append(draw)
    payload = {"threads": 1, "transformers": tf_version, "requests": args.requests,
               "prompt_lengths": list(PROMPTS), "output_lengths": list(OUTPUTS), "rate": args.rate,
               "batch": args.batch, "block_size": BLOCK, "num_blocks": NUM_BLOCKS, "prefill_budget": BUDGET,
               "clock": "process CPU time plus the idle time the arrivals impose", "draws": draws,
               "seconds": round(time.perf_counter() - start, 1),
               "cpu_seconds": round(time.process_time() - start_cpu, 1)}
    write_results("serving_seeds", payload)


if __name__ == "__main__":
    main()
