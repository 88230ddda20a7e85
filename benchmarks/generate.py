"""Text generation speed: the library's SmolLM2 with and without its KV cache vs transformers.

    nice .venv/bin/python benchmarks/generate.py           # the full table (a few minutes)
    .venv/bin/python benchmarks/generate.py --quick        # 32 new tokens, one round
    nice .venv/bin/python benchmarks/generate.py --only sweep --threads 1   # one part, merged in
    nice .venv/bin/python benchmarks/generate.py --only long --threads 1

Setting: SmolLM2-135M-Instruct from the packaged GGUF, dequantized to float32, batch
1, CPU, greedy, 128 new tokens after a 64-token prompt (``min_new_tokens`` keeps transformers from
stopping early; the library's loop is given no end token). Three generators on the same weights:

* cached   - ``transformer_lib.sampling.generate_ids`` with the KV cache (prefill, then one token
             per step);
* uncached - the same loop re-running the whole sequence every step;
* reference - ``transformers``' own ``generate`` (its DynamicCache) on the model it reads from
             the same GGUF file.

Method: one warm-up, then ``--rounds`` rounds taking turns (cached, reference, uncached in
each), median tokens/s per generator (prefill included, as a user sees it). Then the cost of one
step at a 512-token context: the median of ``--steps`` cached steps (one token, 512 in the cache)
against uncached steps (a forward pass over all 513 tokens; like the library's uncached loop it
computes the output head at every position, about a fifth of the work per token, where a lean
loop would compute it at the last position only).

Part ``sweep`` (chapter 17's figure and its claims): the same two kinds of step at contexts 32,
128, 256 and 512, repeated ``--repeats`` times (default 5). Each repetition fills the cache once
with 512 tokens and cuts it back to each length, longest first, as ``kv_cache.step_times`` does,
and takes the median of ``--sweep-steps`` steps (default 3) of each kind. The clock is the CPU time of
the one thread that runs the model (``profiling.time_call(cpu_time=True)``, torch on one thread):
it leaves out the time the thread waits for a core, but not the stalls other processes cause
through the shared caches and memory, so on a busy machine the absolute times come out higher
than on an idle one (the load is recorded). Each repetition times every context under the same
conditions, so the ratios within a repetition (growth with the context, the cache's speed-up) are
what chapter 17's claims read; every repetition is stored, and the chapter prints a mean and a
spread. The part is recorded with its own machine and load, since ``--only sweep``
merges it into an existing file without re-running the generation part (1.5 to 4 CPU-minutes:
``nice .venv/bin/python benchmarks/generate.py --only sweep``).

Part ``long`` (chapter 17's long-context paragraph): cached steps only, at contexts 32 to 8,191
(the model's last position), thread CPU time on one thread, ``--repeats`` repetitions of the
median of ``--sweep-steps`` steps; the cache is filled once, in chunks of 512 tokens (not timed),
and cut back to each length in every repetition (``nice .venv/bin/python benchmarks/generate.py
--only long --threads 1``, about 3 CPU-minutes, most of it the prefill).

The generation part stores every round's seconds per generator (``round_seconds``), so that a run
shows how much the library/reference ratio moves from round to round (runs before 2026-12-07 kept
only the medians).

It prints, asserts nothing, and writes benchmarks/results/generate.json (with the machine and
its load average) for chapter 17. Run it on a quiet machine; torch uses ``--threads`` threads.
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

from _results import RESULTS, describe, machine, write_results  # noqa: E402

from transformer_lib.pretrained import load_smollm2, smollm2_gguf_path  # noqa: E402
from transformer_lib.profiling import time_call  # noqa: E402
from transformer_lib.sampling import generate_ids  # noqa: E402

TEXT = ("The history of computing is a story of people who wanted machines to do arithmetic for them. "
        "Charles Babbage designed an engine of brass gears, Ada Lovelace wrote programs for it, and a "
        "century later electronic computers filled whole rooms. Today a phone holds more memory than")
PARTS = ("generation", "sweep", "long")
RESULT_FILE = RESULTS / "generate.json"
SWEEP_CONTEXTS = [32, 128, 256, 512]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sweep(lm, steps: int, repeats: int) -> dict:
    """Part ``sweep``: ms of thread CPU time per decoding step, with and without the cache, at
    ``SWEEP_CONTEXTS``, ``repeats`` times over (the median of ``steps`` steps each time)."""
    model = lm.model
    long_ids = torch.tensor([(lm.tokenizer.encode(TEXT * 30).ids * 2)[:max(SWEEP_CONTEXTS) + 1]])  # (1, 513)
    runs = {"cached": [], "uncached": []}
    with torch.no_grad():
        for r in range(repeats):
            cache = model.new_cache(initial_capacity=max(SWEEP_CONTEXTS) + 1)
            model(long_ids[:, :max(SWEEP_CONTEXTS)], cache=cache)  # prefill once, then cut back
            ms = {"cached": {}, "uncached": {}}
            for c in sorted(SWEEP_CONTEXTS, reverse=True):

                def cached_step():
                    cache.truncate(c)  # keep the first c tokens, then add token c
                    model(long_ids[:, c:c + 1], cache=cache)

                ms["cached"][c] = 1e3 * time_call(cached_step, repeats=steps, warmup=1, cpu_time=True,
                                                  statistic="median")
                ms["uncached"][c] = 1e3 * time_call(lambda: model(long_ids[:, :c + 1]), repeats=steps, warmup=0,
                                                    cpu_time=True, statistic="median")
            for kind in runs:
                runs[kind].append([round(ms[kind][c], 2) for c in SWEEP_CONTEXTS])
            print(f"repetition {r}: cached " + " ".join(f"{v:6.1f}" for v in runs["cached"][-1])
                  + " ms; uncached " + " ".join(f"{v:7.1f}" for v in runs["uncached"][-1]) + " ms", flush=True)
    return {"machine": machine(), "threads": 1, "clock": "thread CPU time (ms), median of the steps",
            "steps": steps, "repeats": repeats, "contexts": SWEEP_CONTEXTS,
            "cached_ms_runs": runs["cached"], "uncached_ms_runs": runs["uncached"]}


LONG_CONTEXTS = [32, 1024, 2048, 4096, 8191]


def long_context(lm, steps: int, repeats: int, chunk: int = 512) -> dict:
    """Part ``long``: ms of thread CPU time per cached decoding step at ``LONG_CONTEXTS``, up to the
    model's last position (8,191 cached tokens and the new one make its 8,192), ``repeats`` times
    over (the median of ``steps`` steps each). The cache is filled once, in chunks of ``chunk``
    tokens (the prefill is not timed), and set to each length, longest first, in every repetition:
    the buffers keep every prefilled position, and a step at context c rewrites slot c with the
    same token's keys and values at the same position, so setting the length back to a longer
    context is as exact as cutting it."""
    model = lm.model
    top = max(LONG_CONTEXTS)
    long_ids = torch.tensor([(lm.tokenizer.encode(TEXT * 200).ids)[:top + 1]])  # (1, 8192)
    runs = []
    with torch.no_grad():
        cache = model.new_cache(initial_capacity=top + 1)
        start = time.process_time()
        for i in range(0, top, chunk):  # prefill: 8,191 tokens, a chunk at a time
            model(long_ids[:, i:min(i + chunk, top)], cache=cache)
        prefill_cpu_s = time.process_time() - start
        for r in range(repeats):
            ms = {}
            for c in sorted(LONG_CONTEXTS, reverse=True):

                def cached_step():
                    cache.lengths = [c] * cache.num_layers  # the first c tokens, then token c
                    model(long_ids[:, c:c + 1], cache=cache)

                ms[c] = 1e3 * time_call(cached_step, repeats=steps, warmup=1, cpu_time=True, statistic="median")
            runs.append([round(ms[c], 2) for c in LONG_CONTEXTS])
            print(f"repetition {r}: cached " + " ".join(f"{v:6.1f}" for v in runs[-1]) + " ms", flush=True)
    return {"machine": machine(), "threads": 1, "clock": "thread CPU time (ms), median of the steps",
            "steps": steps, "repeats": repeats, "contexts": LONG_CONTEXTS, "prefill_chunk": chunk,
            "prefill_cpu_s": round(prefill_cpu_s, 1), "cached_ms_runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="32 new tokens, one round, 3 steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="steps of the one-step timing at 512 tokens")
    ap.add_argument("--sweep-steps", type=int, default=3, help="steps per point of the sweep")
    ap.add_argument("--repeats", type=int, default=5, help="repetitions of the sweep")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=None,
                    help="run only these parts and merge them into the existing results file")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    new_tokens, prompt_len, context = (32 if args.quick else 128), 64, 512
    rounds, steps = (1, 3) if args.quick else (args.rounds, args.steps)
    parts = args.only or PARTS

    lm = load_smollm2("cpu")
    payload = json.loads(RESULT_FILE.read_text()) if args.only and RESULT_FILE.exists() else {}
    if "sweep" in parts:
        payload["sweep"] = sweep(lm, 1 if args.quick else args.sweep_steps, 2 if args.quick else args.repeats)
    if "long" in parts:
        payload["long"] = long_context(lm, 1 if args.quick else args.sweep_steps, 2 if args.quick else args.repeats)
    if "generation" in parts:
        payload.update(generation(lm, args, new_tokens, prompt_len, context, rounds, steps))
    if not args.no_write:  # --quick writes too, with its setting (new_tokens, rounds) recorded
        if "generation" in parts:  # the top-level machine is the generation part's (the sweep has its own)
            payload.pop("machine", None)
        write_results("generate", payload)


def generation(lm, args, new_tokens: int, prompt_len: int, context: int, rounds: int, steps: int) -> dict:
    """Part ``generation``: tokens/s of the three generators and one step at ``context`` tokens."""
    model = lm.model
    prompt = lm.tokenizer.encode(TEXT * 4).ids[:prompt_len]
    from transformers import AutoModelForCausalLM, __version__ as tf_version
    path = smollm2_gguf_path()
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ref_ids = torch.tensor([prompt])

    def ours(use_cache):
        return generate_ids(model, prompt, new_tokens, temperature=0.0, eos_id=None, use_cache=use_cache)

    def reference():
        with torch.no_grad():
            out = ref.generate(ref_ids, attention_mask=torch.ones_like(ref_ids), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=lm.eos_id)
        return out[0, len(prompt):].tolist()

    same = ours(True) == reference()  # warm-up, and the greedy tokens must agree
    times = {"cached": [], "reference": [], "uncached": []}
    for _ in range(rounds):
        times["cached"].append(timed(lambda: ours(True)))
        times["reference"].append(timed(reference))
        times["uncached"].append(timed(lambda: ours(False)))
    tok_s = {k: new_tokens / statistics.median(v) for k, v in times.items()}

    # one step at a 512-token context
    long_ids = torch.tensor([(lm.tokenizer.encode(TEXT * 30).ids * 2)[:context + 1]])  # (1, 513)
    cache = model.new_cache(initial_capacity=1024)
    with torch.no_grad():
        model(long_ids[:, :context], cache=cache)
        cached_steps, uncached_steps = [], []
        for _ in range(steps):
            cached_steps.append(timed(lambda: model(long_ids[:, context:], cache=cache)))
            cache.truncate(context)  # the next step overwrites the same slot: the context stays 512
            uncached_steps.append(timed(lambda: model(long_ids)))
    step_cached, step_uncached = statistics.median(cached_steps), statistics.median(uncached_steps)

    rows = [{"generator": k, "tokens_per_s": round(v, 2)} for k, v in tok_s.items()]
    print(f"# SmolLM2-135M fp32, batch 1, greedy, {new_tokens} new tokens after {prompt_len}; "
          f"{args.threads} threads; transformers {tf_version}")
    print(f"# {describe(machine())}")
    print(f"{'generator':<12}{'tokens/s':>10}")
    for r in rows:
        print(f"{r['generator']:<12}{r['tokens_per_s']:>10.1f}")
    ratio = tok_s["cached"] / tok_s["reference"]
    print(f"cached / reference = {ratio:.2f}; greedy tokens identical: {same}")
    print(f"one step at {context} tokens of context: cached {1e3 * step_cached:.1f} ms, uncached "
          f"{1e3 * step_uncached:.1f} ms, speedup {step_uncached / step_cached:.1f}x")
    return {
        "setting": {"model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)", "batch": 1,
                    "dtype": "float32", "device": "cpu", "decoding": "greedy", "prompt_tokens": prompt_len,
                    "new_tokens": new_tokens, "threads": args.threads, "rounds": rounds,
                    "transformers": tf_version},
        "rows": rows, "cached_over_reference": round(ratio, 3), "greedy_tokens_identical": same,
        "round_seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
        "step_context": context, "step_cached_ms": round(1e3 * step_cached, 2),
        "step_uncached_ms": round(1e3 * step_uncached, 2),
        "cache_speedup_at_context": round(step_uncached / step_cached, 2)}


if __name__ == "__main__":
    main()
