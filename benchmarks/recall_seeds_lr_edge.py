"""Chapter 9's recall sweep with its learning-rate grid extended at an edge.

    nice .venv/bin/python benchmarks/recall_seeds_lr_edge.py     # 20 runs, about 40 s of CPU

``benchmarks/recall_seeds.py``, first run with three learning rates (3e-3 to 3e-2), chose 3e-2, the
largest, for every (model, length): a choice at the edge of a grid says nothing about the rates
beyond it. This script was run with the default (1e-1, the top edge) and then with ``--extra 1e-3``
(the bottom edge: the Transformer learned at 3e-3, the smallest rate tried, at both lengths).
(``recall_seeds.py``'s default grid now holds all five rates, so run alone it writes the same 100
runs.) It trains the same runs at ``--extra`` learning rates (default 1e-1), with the same seeds, budget and
data as ``recall_seeds.train`` (one thread, so the runs already stored are reproduced exactly and
need not be re-run), adds them to ``benchmarks/results/recall_seeds.json`` and applies the same
rule to the extended grid: per (model, length) the rate with the highest mean validation accuracy,
ties broken by the lower mean validation loss.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from _results import RESULTS, write_results
from recall_seeds import train


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extra", type=float, nargs="+", default=[1e-1])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    old = json.loads((RESULTS / "recall_seeds.json").read_text())
    runs = [r for r in old["runs"] if r["lr"] not in args.extra]
    for kind in ("gru", "transformer"):
        for n in old["lengths"]:
            for lr in args.extra:
                new = [train(kind, n, s, lr, old["steps"], old["batch"]) for s in range(old["seeds"])]
                runs += [{"model": kind, "n": n, "lr": lr, **r} for r in new]
                print(f"{kind:>11} n={n:>3} lr={lr:g}: test " + ", ".join(f"{r['test_accuracy']:.3f}" for r in new),
                      flush=True)
    lrs = sorted({*old["lrs"], *args.extra})
    chosen = {}
    for kind in ("gru", "transformer"):
        for n in old["lengths"]:
            def score(lr):
                rs = [r for r in runs if (r["model"], r["n"], r["lr"]) == (kind, n, lr)]
                return statistics.mean(r["val_accuracy"] for r in rs), -statistics.mean(r["val_loss"] for r in rs)
            chosen[f"{kind}/{n}"] = max(lrs, key=score)
    print("chosen:", chosen)
    write_results("recall_seeds", {**{k: v for k, v in old.items() if k not in ("machine", "runs")},
                                   "lrs": lrs, "chosen_lr": chosen, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
