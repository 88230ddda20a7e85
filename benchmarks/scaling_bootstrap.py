"""How much of chapter 31's bootstrap range is the optimiser, and how much the 50 resamples.

Chapter 31 refits the scaling law to 50 case-bootstrap resamples of the sweep's 16 seed-0 runs
(``scaling.json``), with 4 L-BFGS starts per refit to stay within its time, and reads the middle
80% of the refits as a rough interval. This script repeats that bootstrap

* with the chapter's resamples (NumPy generator seed 0) and 4 starts, exactly as the chapter runs it;
* with the same resamples and 16 starts, as the point fit uses: does a refit with 4 starts stop in
  a worse optimum, widening the range with the optimiser's failures rather than the data's looseness?
* with four more sets of 50 resamples (generator seeds 1-4), 4 starts: how far the ends of a
  middle-80% range of 50 refits move from one set of resamples to the next.

For every set it also records what the refits predict for the held-out run (``scaling.json``'s
``prediction.chosen``: its N and D), against the loss that run measured: the share of refits that
predict the measured loss or more, and their 90th percentile. The chapter's "the measured loss lies
above the middle 80% of the refits' predictions" rests on one set; these say whether it holds in others.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/scaling_bootstrap.py   # about 3.5 minutes of CPU

Prints the ranges, asserts nothing, writes benchmarks/results/scaling_bootstrap.json: the check
behind the chapter's "a rough interval ... another fifty resamples would move them".
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS, write_results  # noqa: E402

from transformer_lib.scaling import fit_scaling_law  # noqa: E402

REFITS = 50
OTHER_SEEDS = (1, 2, 3, 4)


def bootstrap(n, d, loss, seed: int, starts: int) -> list:
    rng = np.random.default_rng(seed)
    fits = []
    for _ in range(REFITS):
        idx = rng.integers(0, len(n), len(n))  # the runs, with replacement (as the chapter draws them)
        fits.append(fit_scaling_law(n[idx], d[idx], loss[idx], starts=starts))
    return fits


def summary(fits, heldout) -> dict:
    values = {"E": [f.E for f in fits], "alpha": [f.alpha for f in fits], "beta": [f.beta for f in fits],
              "allocation": [f.beta / (f.alpha + f.beta) for f in fits]}
    out = {k: [float(np.percentile(v, 10)), float(np.percentile(v, 90))] for k, v in values.items()}
    out["beta_above_alpha"] = float(np.mean([f.beta > f.alpha for f in fits]))
    n, tokens, measured = heldout
    predicted = np.array([float(f.predict(n, tokens)) for f in fits])  # (REFITS,) at the held-out run
    out["heldout_p90"] = float(np.percentile(predicted, 90))
    out["heldout_at_or_above"] = float(np.mean(predicted >= measured))
    return out


def main() -> int:
    results = json.loads((RESULTS / "scaling.json").read_text())
    runs = [r for r in results["runs"] if r["seed"] == 0]
    chosen = results["prediction"]["chosen"]
    heldout = (chosen["n"], chosen["tokens"], results["heldout"]["loss"])
    n, d, loss = (np.array([r[k] for r in runs], dtype=float) for k in ("n", "tokens", "loss"))
    start = time.process_time()
    four, sixteen = bootstrap(n, d, loss, 0, 4), bootstrap(n, d, loss, 0, 16)
    better = [b.objective < a.objective * (1 - 1e-6) for a, b in zip(four, sixteen)]
    change = {k: max(abs(getattr(a, k) - getattr(b, k)) for a, b in zip(four, sixteen))
              for k in ("E", "alpha", "beta")}
    other = {str(seed): summary(bootstrap(n, d, loss, seed, 4), heldout) for seed in OTHER_SEEDS}
    payload = {"refits": REFITS, "runs": len(runs), "chapter": summary(four, heldout), "sixteen_starts": summary(sixteen, heldout),
               "refits_improved_by_16_starts": int(sum(better)), "largest_change_16_vs_4": change,
               "other_resamples": other, "cpu_seconds": round(time.process_time() - start, 1)}
    for name, s in [("4 starts (the chapter's)", payload["chapter"]), ("16 starts", payload["sixteen_starts"]),
                    *[(f"4 starts, resamples seed {k}", v) for k, v in other.items()]]:
        print(f"{name:28}", "  ".join(f"{k} [{lo:.2f}, {hi:.2f}]" for k, (lo, hi) in
                                       ((k, s[k]) for k in ("E", "alpha", "beta", "allocation"))),
              f"beta > alpha {s['beta_above_alpha']:.0%}; held-out: p90 {s['heldout_p90']:.3f},"
              f" {s['heldout_at_or_above']:.0%} predict the measured {heldout[2]:.3f} or more")
    print(f"refits where 16 starts found a lower objective: {payload['refits_improved_by_16_starts']} of {REFITS};"
          f" largest change {change}")
    write_results("scaling_bootstrap", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
