"""Chapter 7's warmup experiment at a ten times smaller learning rate: benchmarks/results/warmup_low_lr.json.

    python benchmarks/warmup_low_lr.py     # 5 seeds x 2 settings, under a minute of CPU

The model, task, seeds, step count and measurements of ``benchmarks/warmup.py`` (this script
calls its ``train_copy``), at a constant learning rate of 1e-3 instead of 1e-2 and without
warmup, for Post-LN and Pre-LN. It tests the chapter's reading of the 1e-2 runs: that Post-LN
fails without warmup because the rate is high, not because Post-LN cannot learn the task.
"""
from __future__ import annotations

import warmup
from _results import seed_sweep, write_results

LR = 1e-3


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    settings = {}
    for norm_first in (False, True):
        key = f"{'pre' if norm_first else 'post'}_ln_warmup_0"
        settings[key] = [warmup.train_copy(norm_first, 0, seed, lr=LR) for seed in range(args.seeds)]
        print(key, settings[key], flush=True)
    write_results("warmup_low_lr", {"seeds": list(range(args.seeds)), "steps": warmup.STEPS, "lr": LR,
                                    "warmup_steps": 0, "settings": settings, **elapsed()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
