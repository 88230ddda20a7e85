"""Chapter 5's RoPE extrapolation at a head dimension of 16 instead of 4.

    python benchmarks/rope_head_dim.py           # 5 seeds x 2 settings, about 4 minutes of CPU

The chapter's model has ``d_model=32`` and 8 heads, so each head has ``d_k = 4`` features: two
RoPE pairs, turning 1 and 0.01 radians per token. This script reruns the ``rope`` experiment of
``benchmarks/seeds.py`` (its ``rope_experiment``: same task, seeds, test draws and measurement,
each loss minus its draw's best possible loss) with ``d_k = 16`` (eight pairs) reached two ways,
each changing one more thing than the head dimension: 2 heads of ``d_model=32`` (fewer heads),
and 8 heads of ``d_model=128`` (a wider model). It writes ``benchmarks/results/rope_head_dim.json``
and leaves ``seeds.json`` untouched.
"""
from __future__ import annotations

from _results import seed_sweep, write_results
from seeds import rope_experiment

SETTINGS = {"2 heads, d_model 32": dict(d_model=32, num_heads=2),
            "8 heads, d_model 128": dict(d_model=128, num_heads=8)}


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    payload = {"ch05_rope_head_dim": {}}
    for name, sizes in SETTINGS.items():
        result = rope_experiment(list(range(args.seeds)), schemes=("rope",), **sizes)
        payload["ch05_rope_head_dim"][name] = result
        ex = result["schemes"]["rope"]["excess_over_1x"]
        print(f"{name}: excess over 1x " + ", ".join(f"{m}x {v['median']:+.2f} [{v['min']:+.2f}, {v['max']:+.2f}]"
                                                     for m, v in ex.items()), flush=True)
    payload.update(elapsed())
    print(elapsed())
    write_results("rope_head_dim", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
