"""The prefills in speculative decoding's timings (chapter 29): what the target and each model
draft spend reading a prompt, in float32 target steps, for the six prompts of
``benchmarks/speculative.py``.

    .venv/bin/python benchmarks/speculative_prefill.py        # about 1 CPU minute, one thread

The speed-up formula, tokens per pass / (k c + v), counts decoding steps only. A timed generation
also reads the prompt once: ``generate`` in one target pass over it, ``speculative_generate`` in the
target's first pass (the prompt and the first drafts) and, for a model draft, in the draft's first
call too. This script times those passes the way the benchmark's rows run them: the float32 target
inside ``PackedLinears`` (a prompt's rows go to oneDNN with packed weights), the int8 and int4
copies (``quantize(copy, bits)``) through their modules; and the float32 one-token step inside
``PackedLinears`` at a 101-token context (the benchmark's ``costs`` setting), to express every
prefill in target steps, a ratio that carries over between runs better than milliseconds.
Medians of ``--reps`` timings in process CPU time; the variants are timed in turn in each
repetition. It prints, asserts nothing, and writes benchmarks/results/speculative_prefill.json.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import write_results  # noqa: E402
from speculative import PASSAGE, PROMPTS  # noqa: E402

from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.quantization import quantize  # noqa: E402
from transformer_lib.serving.packed_linear import PackedLinears  # noqa: E402


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = load_smollm2("cpu")
    f32 = lm.model.eval()
    packs = PackedLinears(f32)
    drafts = {"int8": quantize(copy.deepcopy(f32), 8), "int4": quantize(copy.deepcopy(f32), 4)}

    context = torch.tensor([lm.encode(PASSAGE * 3)[:102]])  # the benchmark's costs: 101 tokens cached
    step_cache = f32.new_cache()
    with packs:
        f32(context[:, :101], cache=step_cache)
    prompts = {p: lm.prompt_ids([{"role": "user", "content": text}])[None] for p, (_, text) in PROMPTS.items()}

    def timed(model, ids, ctx) -> float:
        cache = model.new_cache()
        with ctx:
            start = time.process_time()
            model(ids, cache=cache)
            return time.process_time() - start

    steps, times = [], {p: {"target": [], "int8": [], "int4": []} for p in prompts}
    for _ in range(args.reps):
        for _ in range(3):  # three one-token steps per repetition
            with packs:
                start = time.process_time()
                f32(context[:, 101:102], cache=step_cache)
                steps.append(time.process_time() - start)
            step_cache.truncate(101)
        for p, ids in prompts.items():
            times[p]["target"].append(timed(f32, ids, packs))
            for name, model in drafts.items():
                times[p][name].append(timed(model, ids, torch.no_grad()))
    step = statistics.median(steps)
    out = {}
    for p, ids in prompts.items():
        out[p] = {"kind": PROMPTS[p][0], "prompt_tokens": ids.shape[1],
                  **{who: round(statistics.median(ts) / step, 2) for who, ts in times[p].items()}}
        print(f"{p:<9} {ids.shape[1]:>3} tokens: prefill in target steps {out[p]}")
    print(f"# float32 step in PackedLinears at a 101-token context: {1e3 * step:.1f} ms")
    if not args.no_write:
        write_results("speculative_prefill", {
            "setting": {"model": "SmolLM2-135M-Instruct (GGUF Q4_1; float32 = its weights decoded)",
                        "threads": 1, "reps": args.reps, "clock": "process CPU seconds",
                        "target": "float32 in PackedLinears (prompt rows: oneDNN, packed weights)",
                        "drafts": "quantize(copy, 8) and quantize(copy, 4), their modules",
                        "unit": "one float32 step in PackedLinears at a 101-token context"},
            "step_ms": round(1e3 * step, 2), "prefill_steps": out})


if __name__ == "__main__":
    main()
