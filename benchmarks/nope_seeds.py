"""Chapter 5's extrapolation experiment without any positional information (NoPE).

    python benchmarks/nope_seeds.py              # 5 seeds, about 40 s of CPU (measured: 38 s user, AMD EPYC)

The same model, task, seeds and measurement as the ``rope`` experiment of ``benchmarks/seeds.py``
(this script calls its ``rope_experiment``), with ``positional="none"``: the causal mask is the
only source of order (Haviv et al. 2022; Kazemnejad et al. 2023). It writes
``benchmarks/results/positional_nope.json`` and leaves ``seeds.json`` (shared with other chapters)
untouched; chapter 5 prints the NoPE row beside the other schemes' rows.
"""
from __future__ import annotations

from _results import seed_sweep, write_results
from seeds import rope_experiment


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    result = rope_experiment(list(range(args.seeds)), schemes=("none",))
    payload = {"ch05_rope_extrapolation": result, **elapsed()}
    s = result["schemes"]["none"]
    for m, v in s["loss"].items():
        print(f"none {m}x: {v['median']:.3f} [{v['min']:.3f}, {v['max']:.3f}]")
    print(f"holds up to {s['holds_up_to_multiple']}; {elapsed()}")
    write_results("positional_nope", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
