"""Answer-only against scratchpad: the same small model taught to add with and without writing its
work out (chapter 26's sequential test-time compute).

    .venv/bin/python benchmarks/scratchpad.py            # 5 seeds, two processes
    nice -n 19 .venv/bin/python benchmarks/scratchpad.py --workers 1   # one process

Cost: about 350 CPU-seconds for 5 seeds (measured with --workers 1: 347 s user and 3 s system for
the whole run, 337 s of it training, 484 s wall; each run's training time is in the results).

For each seed, two models of ``reasoning.MODEL_CONFIG`` (d_model 64, 4 heads, 2 layers) are trained
from scratch on the same training problems in the same order (1 to 4 digits, one length per step in
turn, 64 problems a step, 1000 steps, AdamW lr 3e-3, 20 warmup steps):

* answer-only: ``reasoning.train_addition_model`` (the chapters' shipped checkpoint is 3000 steps of it, seed 0);
* scratchpad: ``scratchpad.train_scratchpad_model``, the response writing each column's digits, sum
  digit and carry before '=' and the answer.

Measured on held-out problems (``is_held_out``; 200 per length, 1 to 5 digits, drawn with a fixed
generator, the same for every model; 5 digits is a length neither model was trained on): greedy
accuracy, accuracy of one sample at temperature 1, and the mean response length in tokens; at 4
digits also the answer-only model's majority vote over 4 samples (about as many tokens as one
scratchpad response). Per run the training CPU seconds. Prints a table, asserts nothing, writes
benchmarks/results/scratchpad.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import runs_in_workers, seed_sweep  # noqa: E402

from transformer_lib.reasoning import (addition_problems, decode, majority_vote, parse_answer,  # noqa: E402
                                       response_mask, sample_responses, train_addition_model)
from transformer_lib.scratchpad import parse_scratchpad, scratchpad_length, train_scratchpad_model  # noqa: E402

STEPS, PROBLEMS, DIGITS = 1000, 200, (1, 2, 3, 4, 5)
FORMATS = {"answer-only": (train_addition_model, parse_answer, lambda d: d + 3),
           "scratchpad": (train_scratchpad_model, parse_scratchpad, lambda d: scratchpad_length(d) + 1)}


def evaluate(model, parse, max_new, digits):
    prompts, answers = addition_problems(PROBLEMS, digits, held_out=True,
                                         generator=torch.Generator().manual_seed(1000 + digits))
    out = {"distinct": len({tuple(r) for r in prompts.tolist()})}
    for name, temperature in (("greedy", 0.0), ("sample", 1.0)):
        responses = sample_responses(model, prompts, 1, max_new, temperature, seed=digits)
        out[name] = sum(parse(decode(r)) == a for r, a in zip(responses.tolist(), answers)) / PROBLEMS
        if name == "greedy":
            out["tokens"] = response_mask(responses).sum(1).float().mean().item()
    return out, prompts, answers


def run(job):
    fmt, seed = job
    torch.set_num_threads(1)
    train, parse, max_new = FORMATS[fmt]
    start = time.process_time()
    model, losses = train(STEPS, seed=seed)
    row = {"format": fmt, "seed": seed, "train_cpu_seconds": round(time.process_time() - start, 1),
           "final_loss": sum(losses[-100:]) / 100, "digits": {}}
    for d in DIGITS:
        row["digits"][str(d)], prompts, answers = evaluate(model, parse, max_new(d), d)
    if fmt == "answer-only":  # four samples cost about one scratchpad response's tokens at 4 digits
        prompts, answers = addition_problems(PROBLEMS, 4, held_out=True,
                                             generator=torch.Generator().manual_seed(1004))
        responses = sample_responses(model, prompts, 4, max_new(4), 1.0, seed=44)
        parsed = [parse(decode(r)) for r in responses.tolist()]
        row["vote4_at_4"] = sum(majority_vote(parsed[4 * i:4 * i + 4]) == a
                                for i, a in enumerate(answers)) / PROBLEMS
    print(f"{fmt:12s} seed {seed}: " + " ".join(f"{d}d {row['digits'][str(d)]['greedy']:.3f}" for d in DIGITS)
          + f" ({row['train_cpu_seconds']} CPU s)", flush=True)
    return row


def main(argv=None):
    import argparse

    workers = argparse.ArgumentParser(add_help=False)
    workers.add_argument("--workers", type=int, default=2, help="processes (one thread each)")
    known, rest = workers.parse_known_args(argv)
    args, elapsed = seed_sweep(__doc__, rest, seeds=5)
    jobs = [(fmt, s) for s in range(args.seeds) for fmt in FORMATS]
    runs_in_workers("scratchpad", run, jobs, {
        "steps": STEPS, "batch_size": 64, "lr": 3e-3, "warmup_steps": 20, "max_digits_trained": 4,
        "held_out_problems_per_length": PROBLEMS, "seeds": args.seeds}, elapsed, workers=known.workers)

if __name__ == "__main__":
    main()
