"""GRPO on the addition task of chapters 26-27: held-out accuracy before and after,
over seeds, for the choices the chapter discusses.

    nice -n 10 .venv/bin/python benchmarks/grpo.py              # every setting, 3 seeds (~6 CPU-minutes)
    .venv/bin/python benchmarks/grpo.py --quick                 # GRPO only, 1 seed, 40 steps
    .venv/bin/python benchmarks/grpo.py --only flawed_verifier  # rerun one setting, keep the others' results
    .venv/bin/python benchmarks/grpo.py --pretrain              # rewrite transformer_lib/data/addition_lm.pt

Setting: the starting model is the shipped checkpoint (``load_addition_model``: 3000 steps of
``train_addition_model`` on 1- to 4-digit problems, seed 0). Every run trains on 4-digit training
problems (never a held-out one: ``is_held_out``), ``--steps`` steps; a GRPO step draws 16 problems
and samples 8 responses to each at temperature 1 (128 rollouts), AdamW lr 3e-4, one update per
batch. Settings: GRPO (beta 0.04, std scaling), no KL (beta 0), Dr. GRPO's unscaled advantages,
group sizes 4 and 16 (with 32 and 8 problems: the same 128 rollouts a step), supervised
fine-tuning on the same budget (128 labelled 4-digit problems a step, same optimizer), and GRPO
rewarded by the flawed ``verify_fail_open`` (the reward-hacking case). Measured: held-out accuracy
on 400 held-out 4-digit problems, greedy and one sample at temperature 1, before and after; per
step the mean reward, the true accuracy of the rollouts and their length; seconds per step.
Prints a table, asserts nothing, writes benchmarks/results/grpo.json for chapter 27.
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

from _results import describe, machine, write_results  # noqa: E402

from transformer_lib.reasoning import (accuracy, addition_problems, load_addition_model, sft_batch,  # noqa: E402
                                       sft_loss, train_addition_model, train_grpo, verify, verify_fail_open)
from transformer_lib.training import fit  # noqa: E402

DIGITS, LR, MAX_NEW = 4, 3e-4, 12
SETTINGS = {  # name: keyword arguments of train_grpo (None: supervised fine-tuning)
    "grpo": dict(beta=0.04),
    "no_kl": dict(beta=0.0),
    "dr_grpo_no_std": dict(beta=0.04, scale=False),
    "group_4": dict(beta=0.04, group_size=4, prompts_per_step=32),
    "group_16": dict(beta=0.04, group_size=16, prompts_per_step=8),
    "sft": None,
    "flawed_verifier": dict(beta=0.04, reward=verify_fail_open),
}


def held_out_accuracy(model) -> dict:
    prompts, answers = addition_problems(400, DIGITS, True, torch.Generator().manual_seed(1234))
    return {"greedy": accuracy(model, prompts, answers),
            "sampled": accuracy(model, prompts, answers, temperature=1.0, seed=99)}


def train_setting(settings: dict, name: str, seed: int, steps: int, clock=time.perf_counter):
    """Train a copy of the shipped addition model by ``settings[name]`` (keyword arguments of
    train_grpo, or None for supervised fine-tuning) for ``steps`` steps from ``seed``: the trained
    policy, its history rounded to 4 decimals, and the ``clock`` seconds it took."""
    base = load_addition_model()
    policy = copy.deepcopy(base)
    torch.manual_seed(seed)
    start = clock()
    if settings[name] is None:
        generator = torch.Generator().manual_seed(seed)
        history = fit(policy, lambda step: sft_batch(128, DIGITS, generator), sft_loss, steps, lr=LR,
                      progress=False)
    else:
        history = train_grpo(policy, base, DIGITS, steps, lr=LR, max_new_tokens=MAX_NEW, seed=seed, **settings[name])
    seconds = clock() - start
    return policy, {k: [round(v, 4) for v in values] for k, values in history.items()}, seconds


def run(name: str, seed: int, steps: int) -> dict:
    policy, history, seconds = train_setting(SETTINGS, name, seed, steps)
    return {"setting": name, "seed": seed, "after": held_out_accuracy(policy.eval()),
            "seconds_per_step": seconds / steps, "history": history}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pretrain", action="store_true")
    parser.add_argument("--only", choices=list(SETTINGS), help="rerun one setting and merge it into grpo.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a model this small gains nothing from threads
    if args.pretrain:
        model, losses = train_addition_model(3000)
        path = ROOT.parent / "transformer_lib" / "data" / "addition_lm.pt"
        torch.save(model.state_dict(), path)
        print(f"wrote {path} (final loss {losses[-1]:.3f})")
        return
    seeds, names, steps = ([0], ["grpo"], 40) if args.quick else ([0, 1, 2], list(SETTINGS), args.steps)
    kept = []
    if args.only:
        import json
        old = json.loads((ROOT / "results" / "grpo.json").read_text())
        if old["settings"]["steps"] != steps:
            raise SystemExit(f"grpo.json ran {old['settings']['steps']} steps, not {steps}: rerun everything")
        kept = [r for r in old["runs"] if r["setting"] != args.only]
        names = [args.only]
    before = held_out_accuracy(load_addition_model())
    runs = []
    for name in names:
        for seed in seeds:
            runs.append(run(name, seed, steps))
            r = runs[-1]
            print(f"{name:<16} seed {seed}: greedy {before['greedy']:.3f} -> {r['after']['greedy']:.3f}, "
                  f"sampled {before['sampled']:.3f} -> {r['after']['sampled']:.3f}, "
                  f"{r['seconds_per_step']:.3f} s/step", flush=True)
    runs = sorted(kept + runs, key=lambda r: (list(SETTINGS).index(r["setting"]), r["seed"]))
    names = [name for name in SETTINGS if any(r["setting"] == name for r in runs)]
    rows = []
    for name in names:
        mine = [r for r in runs if r["setting"] == name]
        row = {"setting": name}
        for key in ("greedy", "sampled"):
            values = [r["after"][key] for r in mine]
            row[key] = statistics.fmean(values)
            row[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
            row[f"{key}_runs"] = values
        row["seconds_per_step"] = statistics.fmean(r["seconds_per_step"] for r in mine)
        rows.append(row)
    info = machine()
    print(describe(info))
    write_results("grpo", {"settings": {"digits": DIGITS, "steps": steps, "lr": LR, "seeds": seeds,
                                        "max_new_tokens": MAX_NEW, "held_out_problems": 400,
                                        "configs": {k: (None if v is None else {a: (b.__name__ if callable(b) else b)
                                                                                for a, b in v.items()})
                                                    for k, v in SETTINGS.items() if k in names}},
                           "before": before, "rows": rows, "runs": runs, "machine": info})


if __name__ == "__main__":
    main()
