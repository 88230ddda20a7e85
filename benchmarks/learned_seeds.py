"""Chapter 5's extrapolation experiment for the learned position table, inside its training length.

    python benchmarks/learned_seeds.py           # 5 seeds, under a minute of CPU

The same model, task, seeds and measurement as the ``rope`` experiment of ``benchmarks/seeds.py``
(this script calls its ``rope_experiment``), with ``positional="learned"``. A learned table has
no rows past its 32 training positions, so only the loss at 1x (the last 24 of 32 tokens) is
measured: the chapter compares it with the other schemes' losses at 1x, seed by seed. It writes
``benchmarks/results/positional_learned.json`` and leaves ``seeds.json`` untouched.
"""
from __future__ import annotations

import seeds
from _results import seed_sweep, write_results


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    # the table has no vector for position 32 and beyond: the training length only
    result = seeds.rope_experiment(list(range(args.seeds)), schemes=("learned",), multiples=(1,))
    payload = {"ch05_rope_extrapolation": result, **elapsed()}
    v = result["schemes"]["learned"]["loss"]["1"]
    print(f"learned 1x: {v['median']:.3f} [{v['min']:.3f}, {v['max']:.3f}]; {elapsed()}")
    write_results("positional_learned", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
