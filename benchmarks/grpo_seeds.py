"""GRPO's variants over five seeds, on the addition task of chapters 26-27: held-out accuracy and
pass@k before and after, for the choices chapter 27 discusses.

    nice -n 10 .venv/bin/python benchmarks/grpo_seeds.py             # every setting, 5 seeds
    .venv/bin/python benchmarks/grpo_seeds.py --seeds 1 --steps 40   # a quick look

Everything as in ``benchmarks/grpo.py`` (same starting model, training problems, 200 steps of 128
rollouts, AdamW lr 3e-4 for every setting, one update per batch, the same 400 held-out problems);
that script's 3-seed results (``grpo.json``) stay as chapter 30 reads them. Settings: "grpo"
(DeepSeekMath: beta 0.04, advantages divided by the group's std, each response's tokens averaged
over its own length), "no_kl" (beta 0), "no_std" (advantages not divided by the std), "dr_grpo"
(Liu et al. 2025: no std division *and* each response's token sum divided by one constant, the
12-token budget), group sizes 4 and 16 (32 and 8 problems: the same 128 rollouts a step), "sft"
(supervised fine-tuning, 128 labelled problems a step, same optimizer and steps) and
"flawed_verifier" (GRPO rewarded by ``verify_fail_open``). Every setting runs the same seeds, so
differences can be paired by seed. Measured per run: held-out accuracy, greedy and one sample at
temperature 1; the number of right answers among 16 samples per held-out problem (pass@k follows);
per step the reward, the rollouts' true accuracy, length, KL estimate and share of mixed groups.
Prints a line per run, asserts nothing, writes benchmarks/results/grpo_seeds.json for chapter 27.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, seed_sweep, write_results  # noqa: E402
from grpo import train_setting  # noqa: E402

from transformer_lib.reasoning import (accuracy, addition_problems, decode, load_addition_model,  # noqa: E402
                                       sample_responses, verify, verify_fail_open)

DIGITS, LR, MAX_NEW, SAMPLES = 4, 3e-4, 12, 16
SETTINGS = {  # name: keyword arguments of train_grpo (None: supervised fine-tuning)
    "grpo": dict(beta=0.04),
    "no_kl": dict(beta=0.0),
    "no_std": dict(beta=0.04, scale=False),
    "dr_grpo": dict(beta=0.04, scale=False, length_norm="constant"),
    "group_4": dict(beta=0.04, group_size=4, prompts_per_step=32),
    "group_16": dict(beta=0.04, group_size=16, prompts_per_step=8),
    "sft": None,
    "flawed_verifier": dict(beta=0.04, reward=verify_fail_open),
}


def held_out(model) -> dict:
    """Greedy and one-sample accuracy on the 400 held-out problems, and per problem the number of
    right answers among 16 samples at temperature 1."""
    prompts, answers = addition_problems(400, DIGITS, True, torch.Generator().manual_seed(1234))
    samples = sample_responses(model, prompts, SAMPLES, MAX_NEW, temperature=1.0, seed=5)
    right = [int(verify(decode(r), answers[i // SAMPLES])) for i, r in enumerate(samples.tolist())]
    return {"greedy": accuracy(model, prompts, answers),
            "sampled": accuracy(model, prompts, answers, temperature=1.0, seed=99),
            "right_of_16": [sum(right[i:i + SAMPLES]) for i in range(0, len(right), SAMPLES)]}


def run(name: str, seed: int, steps: int) -> dict:
    policy, history, cpu = train_setting(SETTINGS, name, seed, steps, clock=time.process_time)
    return {"setting": name, "seed": seed, "after": held_out(policy.eval()),
            "cpu_seconds_per_step": cpu / steps, "history": history}


def summarise(runs: list, names: list) -> list:
    rows = []
    for name in names:
        mine = [r for r in runs if r["setting"] == name]
        if not mine:
            continue
        row = {"setting": name, "seeds": [r["seed"] for r in mine]}
        for key in ("greedy", "sampled"):
            values = [r["after"][key] for r in mine]
            row[key] = statistics.fmean(values)
            row[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
            row[f"{key}_runs"] = values
        row["cpu_seconds_per_step"] = statistics.fmean(r["cpu_seconds_per_step"] for r in mine)
        rows.append(row)
    return rows


def main() -> None:
    import argparse
    import json

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--steps", type=int, default=200)
    extra.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    extra.add_argument("--first-seed", type=int, default=0)
    extra.add_argument("--merge", action="store_true", help="keep grpo_seeds.json's other runs")
    known, rest = extra.parse_known_args()
    args, elapsed = seed_sweep(__doc__, rest)
    seeds, steps = list(range(known.first_seed, known.first_seed + args.seeds)), known.steps
    kept, cpu_before = [], 0.0
    path = ROOT / "results" / "grpo_seeds.json"
    if known.merge and path.exists():
        old = json.loads(path.read_text())
        if old["settings"]["steps"] != steps:
            raise SystemExit(f"grpo_seeds.json ran {old['settings']['steps']} steps, not {steps}")
        kept = [r for r in old["runs"] if not (r["setting"] in known.only and r["seed"] in seeds)]
        cpu_before = old.get("cpu_seconds_all_runs", old.get("cpu_seconds", 0.0))
    before = held_out(load_addition_model())
    runs = []
    for name in known.only:
        for seed in seeds:
            runs.append(run(name, seed, steps))
            r = runs[-1]
            print(f"{name:<16} seed {seed}: greedy {before['greedy']:.3f} -> {r['after']['greedy']:.3f}, "
                  f"sampled {before['sampled']:.3f} -> {r['after']['sampled']:.3f}, "
                  f"{r['cpu_seconds_per_step']:.3f} CPU s/step", flush=True)
            everything = sorted(kept + runs, key=lambda r: (list(SETTINGS).index(r["setting"]), r["seed"]))
            names = [n for n in SETTINGS if any(r["setting"] == n for r in everything)]
            configs = {k: (None if v is None else {a: (b.__name__ if callable(b) else b) for a, b in v.items()})
                       for k, v in SETTINGS.items() if k in names}
            total = elapsed()
            write_results("grpo_seeds", {
                "settings": {"digits": DIGITS, "steps": steps, "lr": LR,
                             "seeds": sorted({r["seed"] for r in everything}), "max_new_tokens": MAX_NEW,
                             "held_out_problems": 400, "samples_per_problem": SAMPLES, "configs": configs},
                "before": before, "rows": summarise(everything, names), "runs": everything, "machine": machine(),
                "cpu_seconds_all_runs": round(cpu_before + total["cpu_seconds"], 1)})
    print(describe(machine()))
    print(f"{elapsed()['cpu_seconds']:.0f} CPU seconds in this call")


if __name__ == "__main__":
    main()
