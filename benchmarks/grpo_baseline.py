"""The starting model of chapter 27 measured at five sampling seeds: how much its held-out pass@k
and one-sample accuracy move from one draw of samples to the next.

    nice -n 10 .venv/bin/python benchmarks/grpo_baseline.py     # ~20 CPU-seconds

``grpo_seeds.py`` measures the untrained model once (16 samples per held-out problem at sampling
seed 5, one-sample accuracy at seed 99) and every trained run once. A gain "after minus before"
computed from that one draw of the baseline carries the draw's noise in every seed alike, so the
spread over training seeds does not show it. This script repeats the baseline's measurement at
sampling seeds 5-9 (16 samples per problem) and 99-103 (one sample), on the same 400 held-out
problems, so chapter 27 can compare five trained seeds with five draws of the untrained model.
Greedy accuracy needs no repeat (it samples nothing). Asserts nothing; writes
benchmarks/results/grpo_baseline.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, seed_sweep, write_results  # noqa: E402
from grpo_seeds import DIGITS, MAX_NEW, SAMPLES  # noqa: E402

from transformer_lib.reasoning import (accuracy, addition_problems, decode, load_addition_model,  # noqa: E402
                                       sample_responses, verify)

PASS_SEED, ONE_SAMPLE_SEED = 5, 99  # the seeds grpo_seeds.py's held_out uses; draws count up from them


def main() -> None:
    args, elapsed = seed_sweep(__doc__)
    model = load_addition_model()
    prompts, answers = addition_problems(400, DIGITS, True, torch.Generator().manual_seed(1234))
    draws = []
    for i in range(args.seeds):
        samples = sample_responses(model, prompts, SAMPLES, MAX_NEW, temperature=1.0, seed=PASS_SEED + i)
        right = [int(verify(decode(r), answers[j // SAMPLES])) for j, r in enumerate(samples.tolist())]
        draws.append({"pass_seed": PASS_SEED + i, "one_sample_seed": ONE_SAMPLE_SEED + i,
                      "right_of_16": [sum(right[j:j + SAMPLES]) for j in range(0, len(right), SAMPLES)],
                      "sampled": accuracy(model, prompts, answers, temperature=1.0, seed=ONE_SAMPLE_SEED + i)})
        print(f"draw {i}: one sample {draws[-1]['sampled']:.4f}, "
              f"pass@16 {sum(c > 0 for c in draws[-1]['right_of_16']) / len(answers):.4f}", flush=True)
    write_results("grpo_baseline", {
        "settings": {"digits": DIGITS, "held_out_problems": len(answers), "samples_per_problem": SAMPLES,
                     "max_new_tokens": MAX_NEW, "draws": args.seeds},
        "greedy": accuracy(model, prompts, answers), "draws": draws,
        "cpu_seconds": round(elapsed()["cpu_seconds"], 1)})
    print(describe(machine()))


if __name__ == "__main__":
    main()
