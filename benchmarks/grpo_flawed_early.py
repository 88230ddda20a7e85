"""The first steps of chapter 27's "flawed_verifier" runs again, recording what ``grpo_seeds.py``
keeps only as a mean: which unparsable responses the fail-open verifier paid for, and whether
each one's group gave it an advantage.

    nice -n 10 .venv/bin/python benchmarks/grpo_flawed_early.py     # ~2 CPU-minutes

``grpo_seeds.py`` stores per step the mean reward and the true accuracy (strict verifier) of the
128 rollouts; their difference times 128 counts the responses paid for although unparsable, but
not where they fell. A paid response in a group the verifier rates all 1 gets advantage 0 and is
pushed nowhere; one among siblings rated 0 gets a large positive advantage. This script reruns
seeds 0-4 of that setting (``grpo.py``'s ``train_setting``, the same code, seeds and settings) for
the steps before the earliest hack (76 by default: no run paid more than 0.1 above the true
accuracy before step 76), records every reward call, and counts per step the paid unparsable
responses and those of them whose advantage is not 0. It also stores each step's mean reward and
true accuracy, so a reader can check that the rerun followed the stored runs (sampling is
reproducible on one kind of processor; another can part from them after some steps). Asserts
nothing; writes benchmarks/results/grpo_flawed_early.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, seed_sweep, write_results  # noqa: E402
from grpo import train_setting  # noqa: E402
from grpo_seeds import SETTINGS  # noqa: E402

from transformer_lib.reasoning import group_advantages, verify, verify_fail_open  # noqa: E402

EARLY = 76  # the first step in which any flawed run paid more than 0.1 above the true accuracy


def run(seed: int, steps: int) -> dict:
    calls = []

    def recording(text, answer):
        calls.append((text, answer))
        return verify_fail_open(text, answer)

    kwargs = dict(SETTINGS["flawed_verifier"], reward=recording)
    group = kwargs.get("group_size", 8)
    batch = kwargs.get("prompts_per_step", 16) * group
    _, history, seconds = train_setting({"flawed": kwargs}, "flawed", seed, steps, clock=time.process_time)
    paid, pushed = [], []
    for step in range(steps):
        texts, answers = zip(*calls[step * batch:(step + 1) * batch])
        rewards = torch.tensor([verify_fail_open(t, a) for t, a in zip(texts, answers)], dtype=torch.float32)
        unparsed = torch.tensor([r == 1 and not verify(t, a) for r, t, a in zip(rewards.tolist(), texts, answers)])
        adv = group_advantages(rewards, group)
        paid.append(int(unparsed.sum()))
        pushed.append(int((unparsed & (adv != 0)).sum()))
    return {"seed": seed, "paid": paid, "paid_with_advantage": pushed,
            "reward": history["reward"], "correct": history["correct"], "train_cpu_seconds": round(seconds, 1)}


def main() -> None:
    known, rest = argparse.ArgumentParser(add_help=False), None
    known.add_argument("--steps", type=int, default=EARLY)
    known, rest = known.parse_known_args()
    args, elapsed = seed_sweep(__doc__, rest)
    runs = []
    for seed in range(args.seeds):
        runs.append(run(seed, known.steps))
        r = runs[-1]
        print(f"seed {seed}: paid unparsable {sum(r['paid'])}, of them with an advantage "
              f"{sum(r['paid_with_advantage'])} ({r['train_cpu_seconds']} CPU s)", flush=True)
    write_results("grpo_flawed_early", {
        "settings": {"setting": "flawed_verifier", "steps": known.steps, "seeds": list(range(args.seeds)),
                     "rollouts_per_step": 128},
        "runs": runs, "cpu_seconds": round(elapsed()["cpu_seconds"], 1)})
    print(describe(machine()))


if __name__ == "__main__":
    main()
