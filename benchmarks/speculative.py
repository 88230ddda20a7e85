"""Speculative decoding on SmolLM2: acceptance, tokens per target pass and speed-up per draft and k,
against the target's own greedy decoding, side by side in one run (chapter 29).

    .venv/bin/python benchmarks/speculative.py                 # the full table (about 15 CPU minutes)
    .venv/bin/python benchmarks/speculative.py --quick         # 24 new tokens, one round, 3 prompts
    .venv/bin/python benchmarks/speculative.py --part lookup --rounds 1   # float32: greedy and the three
                     # lookup rules at k = 2, 4, 7 in PackedLinears, and the costs (about 5 CPU minutes);
                     # writes benchmarks/results/speculative_lookup.json

Setting: SmolLM2-135M-Instruct from the packaged GGUF, batch 1, CPU, greedy, up to ``--new``
(48) new tokens after each of ``PROMPTS`` (chat template; three ask to copy or edit a text they
contain, three are open questions), stopping at the end-of-turn token. Targets: float32
(``load_smollm2``), int8 and int4 (``quantize(copy, bits)``, default widths; their one-token steps
run the fused step of chapter 19). Generators on each target:

* greedy     - ``sampling.generate`` (the target's own decoding: prefill, then one token a step),
               float32 inside ``PackedLinears`` (one-token steps through the few-rows kernel);
* greedy-unpacked - the same on torch's default kernels (``F.linear``); each speculative row's
               speed-up on a prompt is against the faster of the two there;
* lookup k   - ``speculative_generate`` with ``PromptLookup()`` (n-grams of 3, 2, 1 tokens: every
               match proposes, the rule before the two below);
* lookup2 k  - with ``PromptLookup(min_ngram=2)``: a match of one token proposes nothing;
* lookup2b k - with ``PromptLookup(min_ngram=2, max_misses=1)``: that, and after a proposal of
               which nothing was kept only a 3-token match proposes, until one has a token kept;
* lookup-unpacked k - ``PromptLookup()`` with the target's passes on torch's default kernels,
               beside the same draft in ``PackedLinears``;
* int4-draft k - with ``ModelDraft`` of ``quantize(copy, 4)`` (caveat: the float32 weights are the
               file's 4-bit weights decoded, and this copy rounds them to the same grid, groups of
               32: it is the same model in fewer bytes, and shows what a draft that always agrees buys);
* int4h4-draft k - with ``ModelDraft`` of ``quantize(copy, 4, widths={})``: every layer at 4 bits, the
               output head (8 bits in the file) included, so it is a cheaper model that
               disagrees with the target now and then (self-speculation by quantization);
* int8-draft k - with ``ModelDraft`` of ``quantize(copy, 8)`` (q8_0: another grid, 8 bits);
* exit<n> k  - with ``ModelDraft(shallow_exit(target, n))``: the first n of 30 blocks, the final norm
               and head, untrained for it.

Every float32 row but ``greedy-unpacked`` and ``lookup-unpacked`` runs the target in one
``PackedLinears(float32 target)``, built once before the runs, as a server would: passes of up to 8
tokens through the few-rows kernel (each weight read once for all rows), more through oneDNN-packed
weights. The quantized targets have nothing to pack: their passes of up to 16 tokens
run the quantized matrix-vector kernel, which part ``costs`` times against the tiled GEMM
(``pass_ms_matmul``).

Every speculative row's ids are compared with the greedy row's (``identical``). Method: one
warm-up run of every generator (8 tokens), then ``--rounds`` rounds, each running every
generator on every prompt in turn (interleaved, so a load change hits all alike); per generator
and prompt the median seconds over rounds. Reported per generator: tokens/s over all prompts
(sum of new tokens / sum of median CPU seconds: see CLOCK), the median over prompts of the paired speed-up
(greedy seconds / its seconds on the same prompt, same target) with its range, the acceptance
rate (accepted / proposed drafts; also over the copy prompts and the open ones) and the new
tokens per target pass. Part ``costs``: one target step at a 101-token context, a pass over k + 1
tokens (``verify_cost``, in target steps: float32 on torch's default kernels ``pass_ms`` and in
``PackedLinears`` ``pass_ms_packed``, its one-token step there ``step_ms_packed``; int8/int4 through their matrix-vector kernel ``pass_ms`` and
through the GEMM ``pass_ms_matmul``) and each draft's step (``cost_ratio``), medians of ``--steps``,
the variants of one step timed in turn, for the formula
``expected_speedup = tokens per pass / (k * cost_ratio + verify_cost)``.

It prints, asserts nothing, and writes benchmarks/results/speculative.json for chapter 29. Run it
on a quiet machine; torch uses ``--threads`` threads (1: the chapters' setting, and the most
stable on a shared machine).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
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

from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.quantization import modules as quantized_modules  # noqa: E402
from transformer_lib.quantization import quantize  # noqa: E402
from transformer_lib.serving.packed_linear import PackedLinears  # noqa: E402
from transformer_lib.sampling import generate  # noqa: E402
from transformer_lib.speculative import ModelDraft, PromptLookup, shallow_exit, speculative_generate  # noqa: E402

PASSAGE = ("The river rose slowly through the night. By morning the lower fields were under water, and "
           "the farmers moved their animals to the hill behind the church, where the ground stayed dry.")
CODE = ("def total(xs):\n    x = 0\n    for v in xs:\n        x = x + v\n    return x\n")
PROMPTS = {  # kind: copy (the answer repeats the prompt's text) or open
    "quote": ("copy", f"Repeat the following paragraph word for word:\n\n{PASSAGE}"),
    "spelling": ("copy", "Correct the spelling mistakes and give back the whole text:\n\nThe rivr rose slowly "
                         "thruogh the nigth. By mornig the lower feilds were under watter."),
    "rename": ("copy", f"Rename the variable x to count in this Python function and show the whole "
                       f"function:\n\n{CODE}"),
    "capital": ("open", "What is the capital of France, and what is it famous for?"),
    "story": ("open", "Write a short story about a robot who learns to paint."),
    "tips": ("open", "Give me five tips for learning a new language."),
}
EXIT_LAYERS = 24
# Times are the process's CPU seconds (one thread: the time the work takes on a core of its own).
# On a machine shared with other jobs, wall-clock time also counts the waits for a core, several
# times the work at a load of 10 on 2 cores; wall seconds are recorded beside them.
CLOCK = "cpu_seconds"


# draft lengths: a pass over k + 1 <= 8 tokens runs the few-rows kernel (KERNEL_MAX_ROWS), 9 or more oneDNN
KS = (2, 4, 7)
LOOKUPS = {"lookup": {}, "lookup2": {"min_ngram": 2}, "lookup2b": {"min_ngram": 2, "max_misses": 1}}


def generators(models: dict) -> dict:
    """name -> (target name, draft or None for the target's own greedy decoding, k, pack the target's
    passes)."""
    f32, q8, q4, q4h4 = models["float32"], models["int8"], models["int4"], models["int4h4"]
    out = {"float32 greedy": ("float32", None, 0, True), "float32 greedy-unpacked": ("float32", None, 0, False)}
    out["float32 lookup-unpacked k=4"] = ("float32", PromptLookup(), 4, False)
    for name, rule in LOOKUPS.items():
        for k in KS:
            out[f"float32 {name} k={k}"] = ("float32", PromptLookup(**rule), k, True)
    for k in (4, 7, 12):
        out[f"float32 int4-draft k={k}"] = ("float32", ModelDraft(q4), k, True)
    for k in KS:
        out[f"float32 int4h4-draft k={k}"] = ("float32", ModelDraft(q4h4), k, True)
        out[f"float32 int8-draft k={k}"] = ("float32", ModelDraft(q8), k, True)
    out[f"float32 exit{EXIT_LAYERS} k=2"] = ("float32", ModelDraft(shallow_exit(f32, EXIT_LAYERS)), 2, True)
    for bits in ("int8", "int4"):
        out[f"{bits} greedy"] = (bits, None, 0, False)
        out[f"{bits} lookup k=4"] = (bits, PromptLookup(), 4, False)
        out[f"{bits} lookup2b k=4"] = (bits, PromptLookup(**LOOKUPS["lookup2b"]), 4, False)
    out["int8 int4-draft k=4"] = ("int8", ModelDraft(q4), 4, False)
    return out


def run(models, spec, ids, new, eos):
    target, draft, k, pack = spec
    model = models[target]
    start, start_cpu = time.perf_counter(), time.process_time()
    if draft is None:
        with models["packs"][target] if pack else contextlib.nullcontext():  # one-token steps: few-rows kernel
            out = generate(model, ids, new, eos_id=eos)
        result = {"ids": out[0, ids.shape[1]:].tolist(), "proposed": 0, "accepted": 0, "calls": None}
    else:
        s = speculative_generate(model, draft, ids, new, k=k, eos_id=eos,
                                 pack_linears=models["packs"][target] if pack else False)
        result = {"ids": s.new_ids, "proposed": s.proposed, "accepted": s.accepted, "calls": s.target_calls}
    result["seconds"], result["cpu_seconds"] = time.perf_counter() - start, time.process_time() - start_cpu
    return result


@torch.no_grad()
def costs(models: dict, ids: torch.Tensor, steps: int) -> dict:
    """ms of one target step and of a pass over k + 1 tokens (k = 2, 4, 7, 8) at ids' context, per
    target and path (float32: default kernels and packed weights; int8/int4: the matrix-vector
    kernel and the GEMM), and of each draft's one-token step; medians of ``steps``, every variant
    timed once in turn in each of them."""
    context = ids.shape[1] - 9
    exit_model = shallow_exit(models["float32"], EXIT_LAYERS)

    def matmul_rows(on: bool):  # quantized layers: several rows through the tiled GEMM (prefill's path)
        quantized_modules.KERNEL_MAX_ROWS = 1 if on else KERNEL_MAX_ROWS

    KERNEL_MAX_ROWS = quantized_modules.KERNEL_MAX_ROWS
    variants = {}  # (target, what, k or None) -> (model, rows, context manager, setup)
    for name in ("float32", "int8", "int4"):
        variants[name, "step_ms", None] = (models[name], 1, contextlib.nullcontext, None)
        if name == "float32":
            variants[name, "step_ms_packed", None] = (models[name], 1, lambda: models["packs"]["float32"], None)
        for k in (2, 4, 7, 8):
            variants[name, "pass_ms", k] = (models[name], k + 1, contextlib.nullcontext, None)
            if name == "float32":
                variants[name, "pass_ms_packed", k] = (models[name], k + 1, lambda: models["packs"]["float32"], None)
            else:
                variants[name, "pass_ms_matmul", k] = (models[name], k + 1, contextlib.nullcontext, matmul_rows)
    variants[f"exit{EXIT_LAYERS}", "step_ms", None] = (exit_model, 1, contextlib.nullcontext, None)
    caches = {}
    for key, (model, _, _, _) in variants.items():
        caches[key] = model.new_cache()
        model(ids[:, :context], cache=caches[key])
    times = {key: [] for key in variants}
    for _ in range(steps):
        for key, (model, n, ctx, setup) in variants.items():
            if setup:
                setup(True)
            try:
                with ctx():
                    start = time.process_time()
                    model(ids[:, context:context + n], cache=caches[key])
                    times[key].append(time.process_time() - start)
            finally:
                if setup:
                    setup(False)
            caches[key].truncate(context)
    out = {}
    for (name, what, k), ts in times.items():
        ms = round(1e3 * statistics.median(ts), 2)
        if k is None:
            out.setdefault(name, {})[what] = ms
        else:
            out.setdefault(name, {}).setdefault(what, {})[k] = ms
    return out


def acceptance(prompts: list) -> float | None:
    """Accepted / proposed drafts over some prompts' rows (None when nothing was proposed)."""
    proposed = sum(x["proposed"] for x in prompts)
    return round(sum(x["accepted"] for x in prompts) / proposed, 3) if proposed else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="24 new tokens, one round, 3 prompts, 3 steps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--raw", help="also write every run's raw record to this JSON file")
    ap.add_argument("--part", choices=("all", "lookup"), default="all",
                    help="lookup: float32 greedy and the lookup rules only (results in speculative_lookup.json)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    new, rounds, steps = (24, 1, 3) if args.quick else (args.new, args.rounds, args.steps)
    prompts = dict(list(PROMPTS.items())[::2]) if args.quick else PROMPTS

    lm = load_smollm2("cpu")
    f32 = lm.model.eval()
    models = {"float32": f32, "int8": quantize(copy.deepcopy(f32), 8), "int4": quantize(copy.deepcopy(f32), 4),
              "int4h4": quantize(copy.deepcopy(f32), 4, widths={})}
    models["packs"] = {"float32": PackedLinears(f32)}  # packed once: every float32 row but lookup-unpacked uses it
    gens = generators(models)
    if args.part == "lookup":
        gens = {g: spec for g, spec in gens.items() if g.startswith("float32 greedy")
                or (g.startswith("float32 lookup") and "unpacked" not in g)}
    ids = {name: lm.prompt_ids([{"role": "user", "content": text}])[None] for name, (_, text) in prompts.items()}

    cost = costs(models, torch.tensor([lm.encode(PASSAGE * 3)[:110]]), steps)  # first: a bad part fails early
    print("# costs (ms):", cost, flush=True)
    first = next(iter(prompts))
    for spec in gens.values():  # warm-up: every generator once, a few tokens
        run(models, spec, ids[first], min(8, new), lm.eos_id)
    results = {g: {p: [] for p in prompts} for g in gens}
    for r in range(rounds):
        for p in prompts:
            for g, spec in gens.items():
                results[g][p].append(run(models, spec, ids[p], new, lm.eos_id))
        print(f"# round {r + 1} of {rounds} done", flush=True)
    if args.raw:  # every run's ids, counts and seconds, before they are summarised
        Path(args.raw).write_text(json.dumps({"results": results, "cost": cost}))

    rows = []
    for g, (target, draft, k, pack) in gens.items():
        bases = [b for b in (f"{target} greedy", f"{target} greedy-unpacked") if b in gens]
        per_prompt = []
        for p in prompts:
            runs = results[g][p]
            # the target's own greedy decoding at its fastest on this prompt: float32 with its one-token
            # steps through the few-rows kernel or through F.linear, whichever took less
            ref = min((results[b][p] for b in bases), key=lambda rs: statistics.median(x[CLOCK] for x in rs))
            seconds = statistics.median(x[CLOCK] for x in runs)
            per_prompt.append({
                "prompt": p, "kind": prompts[p][0], "new_tokens": len(runs[0]["ids"]),
                "seconds": round(seconds, 4), "wall_seconds": round(statistics.median(x["seconds"] for x in runs), 4),
                "speedup": round(statistics.median(x[CLOCK] for x in ref) / seconds, 3),
                "identical": all(x["ids"] == ref[0]["ids"] for x in runs),
                "proposed": runs[0]["proposed"], "accepted": runs[0]["accepted"], "target_calls": runs[0]["calls"]})
        tokens = sum(x["new_tokens"] for x in per_prompt)
        seconds = sum(x["seconds"] for x in per_prompt)
        proposed = sum(x["proposed"] for x in per_prompt)
        calls = sum(x["target_calls"] or x["new_tokens"] for x in per_prompt)
        speedups = [x["speedup"] for x in per_prompt]
        rows.append({
            "generator": g, "target": target, "draft": None if draft is None else g.split()[1], "k": k,
            "tokens_per_s": round(tokens / seconds, 2),
            "speedup_median": round(statistics.median(speedups), 3),
            "speedup_min": min(speedups), "speedup_max": max(speedups),
            "speedup_copy": round(statistics.median(x["speedup"] for x in per_prompt if x["kind"] == "copy"), 3),
            "speedup_open": round(statistics.median(x["speedup"] for x in per_prompt if x["kind"] == "open"), 3),
            "acceptance": round(sum(x["accepted"] for x in per_prompt) / proposed, 3) if proposed else None,
            **{f"acceptance_{kind}": acceptance([x for x in per_prompt if x["kind"] == kind]) for kind in ("copy", "open")},
            "proposed": proposed, "packed": pack,
            "tokens_per_pass": round(tokens / calls, 3),
            "identical": all(x["identical"] for x in per_prompt), "prompts": per_prompt})

    print(f"# the copy prompts' acceptance / the open prompts':",
          {r["generator"]: (r["acceptance_copy"], r["acceptance_open"]) for r in rows if r["draft"]})
    print(f"# SmolLM2-135M, batch 1, greedy, up to {new} new tokens, {len(prompts)} prompts, "
          f"{args.threads} thread(s), medians of {rounds} rounds, CPU seconds")
    print(f"# {describe(machine())}")
    print(f"{'generator':<26}{'tok/s':>7}{'speed-up':>10}{'[min, max]':>15}{'copy':>7}{'open':>7}"
          f"{'accept':>8}{'tok/pass':>9}  identical")
    for r in rows:
        acc = "" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        print(f"{r['generator']:<26}{r['tokens_per_s']:>7.1f}{r['speedup_median']:>9.2f}x"
              f"  [{r['speedup_min']:.2f}, {r['speedup_max']:.2f}]{r['speedup_copy']:>7.2f}{r['speedup_open']:>7.2f}"
              f"{acc:>8}{r['tokens_per_pass']:>9.2f}  {r['identical']}")
    print("# costs (ms):", cost)
    if not args.no_write:
        write_results("speculative" if args.part == "all" else "speculative_lookup", {
            "setting": {"model": "SmolLM2-135M-Instruct (GGUF Q4_1; float32 = its weights decoded)", "batch": 1,
                        "device": "cpu", "decoding": "greedy", "max_new_tokens": new, "threads": args.threads,
                        "rounds": rounds, "steps": steps, "part": args.part, "clock": "process CPU seconds", "exit_layers": EXIT_LAYERS, "lookup_ngrams": [3, 2, 1],
                        "lookup_rules": LOOKUPS, "packed": "float32 rows but greedy-unpacked and lookup-unpacked: "
                        "the target's linear layers in PackedLinears (up to 8 rows: the few-rows kernel reading "
                        "each weight once; more rows: oneDNN-packed weights); speed-ups against the faster of "
                        "greedy and greedy-unpacked on each prompt",
                        "prompts": {p: {"kind": kind, "text": text} for p, (kind, text) in prompts.items()}},
            "rows": rows, "costs": cost})


if __name__ == "__main__":
    main()
