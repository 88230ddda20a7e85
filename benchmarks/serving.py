"""Serving many requests: one-at-a-time decoding, static batching, continuous batching with a paged
cache, and transformers' continuous batching, on the same SmolLM2 weights and workload (chapter 28).

    nice .venv/bin/python benchmarks/serving.py            # everything (a few minutes of CPU)
    .venv/bin/python benchmarks/serving.py --quick         # 6 requests, short outputs, no sweeps

Setting: SmolLM2-135M-Instruct from the packaged GGUF, dequantized to float32, CPU, ``--threads``
threads (1: on a shared two-core machine under load, two OpenMP threads spin-waiting for each
other made every server's steps several times slower, so one thread per process is what measures
the servers rather than the contention), greedy, no end token (each request generates exactly its
drawn output length).

Workload (``serving.workload.make_workload``, seed 0): ``--requests`` requests (16), prompt lengths
uniform in [16, 96] tokens, output lengths uniform in [8, 40], prompt ids uniform in [100, 10000).
Two arrival patterns of the same requests: *offline* (all at time 0: a batch job; throughput is the
servers' capacity) and *online* (Poisson arrivals, ``--rate`` per second (2): the latency a user
feels, queueing included).

Servers (``serving.baselines`` and ``serving.scheduler``; each on fresh copies of the requests, in this order, one after the other):

* one-at-a-time - each request alone with the plain KVCache, in arrival order, the next after it;
* static        - up to ``--batch`` (8) arrived requests decoded together to the end of the longest
                  (PaddedKVCache sized to the longest prompt + the largest output length), linear
                  layers in ``PackedLinears`` (``pack_linears``: up to 8 rows the few-rows kernel, each
                  weight read once; more rows oneDNN-packed weights: rows of a step cost less);
* continuous    - ``ContinuousBatcher``: up to ``--batch`` rows, mixed steps (every running
                  request's next token and the admitted prompts, in chunks under a 512-token
                  budget, in one flattened forward pass: ``serving.varlen``), a PagedKVCache of
                  blocks of 16 positions allocated on demand (pre-empting the newest request if
                  the pool runs out), ``pack_linears`` as static;
* transformers  - ``model.init_continuous_batching`` (the manager ``generate_batch`` runs), its
                  paged cache (pages of 16, 256 blocks, at most ``--batch`` requests and 512 tokens
                  per batch, SDPA attention), requests added at their arrival times.

Per server: throughput (new tokens / wall seconds from the first arrival to the last token), time
to first token and time per output token (p50, p95), and whether its tokens equal one-at-a-time's.
Memory (in cache positions, x 46,080 bytes for SmolLM2's 30 layers x K, V x 3 heads x 64 x 4 bytes),
on the same workload read as requests that stop at different lengths: each request stops after its
drawn output length (uniform in [8, 40]), which a server cannot know in advance (an end token ends
a real request), so a contiguous cache must preallocate the limit, 40 new tokens, per row. Static
batching's padded buffers (rows x (longest prompt + 40)) and contiguous caches of each running
request (its prompt + 40) against the blocks the continuous batcher holds (allocated as tokens are
written): peaks over the decode steps and means over them.

Sweeps (for chapter 28's widgets): one decode step's time with B rows at a 64-token context
(B = 1 .. 32: the roofline's flat part), and the two batchers at several arrival rates.

It prints, asserts nothing, and writes benchmarks/results/serving.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, write_results  # noqa: E402

from transformer_lib.pretrained import load_smollm2, smollm2_gguf_path  # noqa: E402
from transformer_lib.serving.baselines import serve_one_at_a_time, serve_static  # noqa: E402
from transformer_lib.serving.scheduler import serve_continuous  # noqa: E402
from transformer_lib.serving.workload import latency_summary, make_workload  # noqa: E402

PROMPTS, OUTPUTS, BLOCK, NUM_BLOCKS, BUDGET = (16, 96), (8, 40), 16, 256, 512
BYTES_PER_POSITION = 30 * 2 * 3 * 64 * 4


def hf_manager(ref, batch):
    """transformers' continuous batching manager on ``ref``, started, with this benchmark's pages,
    pool, token budget and at most ``batch`` requests at once (greedy, no end token)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=max(OUTPUTS))
    cb = ContinuousBatchingConfig(page_size=BLOCK, num_blocks=NUM_BLOCKS, max_batch_tokens=BUDGET,
                                  max_requests_per_batch=batch, allow_block_sharing=False, use_cuda_graph=False)
    manager = ref.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    return manager


def hf_serve(ref, requests, batch):
    """transformers' continuous batching manager on ``requests`` (added at their arrival times):
    (wall seconds, {id: (tokens, token times after the start)})."""
    manager = hf_manager(ref, batch)
    out = {}
    try:
        start = time.perf_counter()
        for r in sorted(requests, key=lambda r: r.arrival):
            time.sleep(max(0.0, r.arrival - (time.perf_counter() - start)))
            manager.add_request(r.prompt, request_id=str(r.id), max_new_tokens=r.max_tokens, record_timestamps=True)
        while len(out) < len(requests):
            result = manager.get_result(timeout=60)
            if result is None:
                raise RuntimeError("transformers' manager stopped before every request finished")
            if result.is_finished():
                out[int(result.request_id)] = (list(result.generated_tokens), [t - start for t in result.timestamps])
        seconds = max(times[-1] for _, times in out.values())
    finally:
        manager.stop(block=True, timeout=30)
    for r in requests:
        r.tokens, r.token_times = out[r.id]
    return seconds


def run_scenario(name, lm, ref, workload, batch, want=None):
    rows = {}
    serve = {
        "one-at-a-time": lambda rs: (serve_one_at_a_time(lm.model, rs), None),
        "static": lambda rs: serve_static(lm.model, rs, max_batch=batch, reserve_tokens=OUTPUTS[1], pack_linears=True),
        "continuous": lambda rs: serve_continuous(lm.model, rs, max_batch=batch, block_size=BLOCK,
                                                  num_blocks=NUM_BLOCKS, max_prefill_tokens=BUDGET,
                                                  reserve_tokens=OUTPUTS[1], pack_linears=True),
        "transformers": lambda rs: (hf_serve(ref, rs, batch), None),
    }
    served = {}
    for method, fn in serve.items():
        if ref is None and method == "transformers":
            continue
        requests = [r.fresh() for r in workload]
        with torch.no_grad():
            seconds, memory = fn(requests)
        row = latency_summary(requests, seconds)
        served[method] = [r.tokens for r in requests]
        if memory is not None:
            row["memory_positions"] = memory
        rows[method] = row
        print(f"  {name:8s} {method:14s} {row['tokens_per_s']:7.1f} tok/s  TTFT p50 {row['ttft_p50_s']:6.2f} s "
              f"p95 {row['ttft_p95_s']:6.2f} s  TPOT p50 {1e3 * row['tpot_p50_s']:6.1f} ms "
              f"p95 {1e3 * row['tpot_p95_s']:6.1f} ms  ({row['seconds']:.1f} s)", flush=True)
    base = want if want is not None else served["one-at-a-time"]
    for method, tokens in served.items():
        rows[method]["same_tokens_as_one_at_a_time"] = sum(a == b for a, b in zip(tokens, base))
    return rows, served.get("one-at-a-time", base)


@torch.no_grad()
def decode_step_sweep(lm, batches, context=64, repeat=5):
    """Seconds of one decode step with B rows at ``context`` cached positions (median of ``repeat``)."""
    model = lm.model
    ids = torch.randint(100, 10000, (1, context), generator=torch.Generator().manual_seed(1))
    out = []
    for B in batches:
        times = []
        for _ in range(repeat):
            cache = model.new_cache(initial_capacity=context + 1)
            model(ids, cache=cache)
            cache.reorder(torch.zeros(B, dtype=torch.long))  # every row: the same context
            token = torch.full((B, 1), 500)
            start = time.perf_counter()
            model(token, cache=cache)
            times.append(time.perf_counter() - start)
        out.append(statistics.median(times))
        print(f"  decode step B={B:3d}: {1e3 * out[-1]:7.1f} ms  ({B / out[-1]:6.1f} tok/s)", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-reference", action="store_true", help="skip transformers")
    ap.add_argument("--keep-sweeps", action="store_true",
                    help="write the scenarios with the previous results' sweeps first, then run the sweeps")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    global OUTPUTS
    if args.quick:
        args.requests, OUTPUTS = 6, (4, 8)
    start_cpu, start = time.process_time(), time.perf_counter()
    lm = load_smollm2()
    ref = None
    if not args.no_reference:
        from transformers import AutoModelForCausalLM
        path = smollm2_gguf_path()
        ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    from transformers import __version__ as tf_version
    print(f"# {describe(machine())}; {args.threads} threads; transformers {tf_version}")
    offline = make_workload(args.requests, None, PROMPTS, OUTPUTS, seed=0)
    online = make_workload(args.requests, args.rate, PROMPTS, OUTPUTS, seed=0)
    with torch.no_grad():  # warm-up: one short request through each path
        warm = [r.fresh() for r in make_workload(2, None, (8, 8), (2, 2), seed=9)]
        serve_continuous(lm.model, warm, max_batch=2, block_size=BLOCK, num_blocks=8)
        if ref is not None:
            hf_serve(ref, [r.fresh() for r in warm], 2)
    print("offline (all requests at time 0):")
    offline_rows, want = run_scenario("offline", lm, ref, offline, args.batch)
    print(f"online (Poisson arrivals, {args.rate}/s):")
    online_rows, _ = run_scenario("online", lm, None if args.quick else ref, online, args.batch, want)
    payload = {"threads": args.threads, "transformers": tf_version, "requests": args.requests,
               "prompt_lengths": list(PROMPTS), "output_lengths": list(OUTPUTS), "rate": args.rate,
               "batch": args.batch, "block_size": BLOCK, "num_blocks": NUM_BLOCKS, "prefill_budget": BUDGET,
               "bytes_per_position": BYTES_PER_POSITION, "offline": offline_rows, "online": online_rows,
               "prompt_tokens": sum(len(r.prompt) for r in offline),
               "output_tokens": sum(r.max_tokens for r in offline)}
    mem_c, mem_s = offline_rows["continuous"]["memory_positions"], offline_rows["static"]["memory_positions"]
    print(f"# memory (offline, positions): static padded peak {mem_s['padded_positions']} mean "
          f"{mem_s['mean']['padded_positions']:.0f}; contiguous per request peak {mem_c['contiguous_positions']} mean "
          f"{mem_c['mean']['contiguous_positions']:.0f}; paged peak {mem_c['paged_positions']} mean "
          f"{mem_c['mean']['paged_positions']:.0f}; real peak {mem_c['real_positions']} mean "
          f"{mem_c['mean']['real_positions']:.0f}; pre-emptions {mem_c['preemptions']}", flush=True)
    if not args.quick and args.keep_sweeps:  # the scenarios first, with the previous run's sweeps, labelled
        previous = json.loads((ROOT / "results" / "serving.json").read_text())
        payload["sweeps_from"] = {"date": previous["machine"]["date"], "note": "step_sweep and rate_sweep of the "
                                  "previous run (default F.linear, blocks reserved at admission)"}
        payload["step_sweep"], payload["rate_sweep"] = previous["step_sweep"], previous["rate_sweep"]
        payload["seconds"] = round(time.perf_counter() - start, 1)
        payload["cpu_seconds"] = round(time.process_time() - start_cpu, 1)
        write_results("serving", payload)
        payload.pop("sweeps_from")
    if not args.quick:
        print("decode step against batch size (64 cached positions):")
        batches = [1, 2, 4, 8, 16, 32]
        payload["step_sweep"] = {"batches": batches, "context": 64, "seconds": decode_step_sweep(lm, batches)}
        rates = [1.0, 2.0, 4.0, 8.0]
        sweep = {"rates": rates, "continuous": [], "static": []}
        print("arrival-rate sweep (the same requests):")
        for rate in rates:
            workload = make_workload(args.requests, rate, PROMPTS, OUTPUTS, seed=0)
            for method in ("continuous", "static"):
                requests = [r.fresh() for r in workload]
                with torch.no_grad():
                    seconds, _ = (serve_continuous(lm.model, requests, max_batch=args.batch, block_size=BLOCK,
                                                   num_blocks=NUM_BLOCKS, max_prefill_tokens=BUDGET, pack_linears=True)
                                  if method == "continuous"
                                  else serve_static(lm.model, requests, args.batch, pack_linears=True))
                row = latency_summary(requests, seconds)
                sweep[method].append(row)
                print(f"  rate {rate:4.1f}/s {method:10s} {row['tokens_per_s']:6.1f} tok/s  TTFT p50 "
                      f"{row['ttft_p50_s']:5.2f} s p95 {row['ttft_p95_s']:5.2f} s  TPOT p50 "
                      f"{1e3 * row['tpot_p50_s']:5.1f} ms", flush=True)
        payload["rate_sweep"] = sweep
    payload["seconds"] = round(time.perf_counter() - start, 1)
    payload["cpu_seconds"] = round(time.process_time() - start_cpu, 1)
    off = offline_rows
    print(f"# continuous / one-at-a-time throughput: {off['continuous']['tokens_per_s'] / off['one-at-a-time']['tokens_per_s']:.2f}x"
          + (f"; continuous / transformers: {off['continuous']['tokens_per_s'] / off['transformers']['tokens_per_s']:.2f}x"
             if "transformers" in off else ""))
    mem = off["continuous"]["memory_positions"]
    print(f"# peak cache positions: paged {mem['paged_positions']}, real {mem['real_positions']}, contiguous per "
          f"request {mem['contiguous_positions']}, static padded {off['static']['memory_positions']['padded_positions']}")
    if not args.quick:
        write_results("serving", payload)


if __name__ == "__main__":
    main()
