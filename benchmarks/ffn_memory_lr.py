"""Chapter 6's fact-memorisation models at three learning rates: benchmarks/results/ffn_memory_lr.json.

    python benchmarks/ffn_memory_lr.py              # 5 seeds x 3 rates x 3 models, some minutes of CPU
    python benchmarks/ffn_memory_lr.py --seeds 3
    python benchmarks/ffn_memory_lr.py --seeds 3 --out ffn_memory_lr_a &   # or split the seeds
    python benchmarks/ffn_memory_lr.py --first 3 --seeds 2 --out ffn_memory_lr_b
    python benchmarks/ffn_memory_lr.py --merge ffn_memory_lr_a ffn_memory_lr_b
    python benchmarks/ffn_memory_lr.py --edge      # then: a model whose best rate is an edge of the grid

`benchmarks/ffn_memory.py` trains the three models of chapter 6 (one block with its FFN, one and
four attention-only blocks) at one learning rate, 3e-3, for all of them. A comparison of
architectures at one hand-set rate cannot tell "this model is weak at the task" from "this rate
suits the other model". This script trains every model at 1e-3, 3e-3 and 1e-2 (Adam, 400 steps,
the same data, batches and initialisation per seed as `ffn_memory.py`; seed 0 at 3e-3 is the
chapter's run) and records, per (model, rate, seed), the accuracy on all 1,024 facts after 300 and
after 400 steps and the final training loss.

The rule, applied by the chapter: for each model, the rate with the highest mean accuracy after
400 steps over the seeds (ties broken by the lower mean final loss). The task is memorisation, so
the facts it is scored on are the facts it trains on; the question is how many a model can store
in the budget, not how it generalises.

A best rate at an edge of the grid may only be the best of the rates tried. ``--edge`` reads the
results file, applies the rule, and for each model whose chosen rate is the largest (smallest)
of the grid trains it once more on every seed at the next rate out of the grid's half-decade
steps (3e-2 above 1e-2, 3e-4 below 1e-3); the runs are stored under ``edge`` in the same file.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from _results import seed_sweep, write_results
from ffn_memory import MODELS, N_CLASSES, STEPS, data, fact_model
from transformer_lib.training import fit

LRS = (1e-3, 3e-3, 1e-2)
BEYOND = {1e-2: 3e-2, 1e-3: 3e-4}  # the next rate out of the grid's half-decade steps
CHECKPOINT = 300  # accuracy here and at STEPS: is a model still improving at the end?


def one_run(name: str, layers: int, with_ffn: bool, lr: float, seed: int) -> dict:
    attribute, train, every = data(seed)
    model = fact_model(layers, with_ffn, seed)

    def loss(m, seqs):
        return F.cross_entropy(m(seqs).reshape(-1, N_CLASSES), attribute[seqs].reshape(-1))

    @torch.no_grad()
    def accuracy() -> float:
        return (model(every).argmax(-1) == attribute[every]).float().mean().item()

    at = {}

    def record(step, history):
        if step + 1 == CHECKPOINT:
            at["checkpoint"] = accuracy()

    fit(model, lambda step: train[step], loss, steps=STEPS, lr=lr, progress=False, callback=record)
    with torch.no_grad():
        full_loss = loss(model, every).item()  # on all 1,024 facts
    return {"model": name, "lr": lr, "seed": seed, "accuracy": accuracy(),
            f"accuracy_at_{CHECKPOINT}": at["checkpoint"], "loss": full_loss}


def main(argv=None) -> int:
    import argparse
    import json

    from _results import RESULTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first", type=int, default=0, help="first seed (to split the seeds over processes)")
    parser.add_argument("--out", default="ffn_memory_lr", help="results name (a part, when split)")
    parser.add_argument("--edge", action="store_true",
                        help="train each model whose chosen rate is an edge of the grid at the next rate out")
    parser.add_argument("--merge", nargs="*", metavar="PART",
                        help="join part files (results names) into ffn_memory_lr.json and stop")
    args = parser.parse_args(argv)
    settings = {"steps": STEPS, "checkpoint": CHECKPOINT, "lrs": list(LRS), "models": [m[0] for m in MODELS],
                "rule": "per model: the learning rate with the highest mean accuracy on all 1,024 facts after "
                        f"{STEPS} steps over the seeds, ties broken by the lower mean loss on them"}
    if args.merge is not None:
        parts = [json.loads((RESULTS / f"{name}.json").read_text()) for name in args.merge]
        runs = sorted((r for part in parts for r in part["runs"]), key=lambda r: r["seed"])  # stable
        write_results("ffn_memory_lr", {"seeds": sorted({r["seed"] for r in runs}), **settings, "runs": runs,
                                        "seconds": sum(p["seconds"] for p in parts),
                                        "cpu_seconds": round(sum(p["cpu_seconds"] for p in parts), 1)})
        return 0
    if args.edge:
        return edge(json.loads((RESULTS / "ffn_memory_lr.json").read_text()))
    _, elapsed = seed_sweep(__doc__, [])
    runs = []
    for seed in range(args.first, args.first + args.seeds):
        for name, layers, with_ffn in MODELS:
            for lr in LRS:
                runs.append(one_run(name, layers, with_ffn, lr, seed))
                print(runs[-1], flush=True)
        write_results(args.out, {"seeds": list(range(args.first, seed + 1)), **settings, "runs": runs,
                                 **elapsed()})
    return 0


def chosen_rate(result: dict, model: str) -> float:
    """The rule of the module docstring, applied to ``result["runs"]``."""
    def key(lr):
        runs = [r for r in result["runs"] if r["model"] == model and r["lr"] == lr]
        return (sum(r["accuracy"] for r in runs) / len(runs), -sum(r["loss"] for r in runs) / len(runs))
    return max(result["lrs"], key=key)


def edge(result: dict) -> int:
    """``--edge``: the next rate out for every model whose chosen rate is an edge of the grid."""
    import time

    from _results import machine
    cpu0, wall0 = time.process_time(), time.perf_counter()
    runs = []
    for name, layers, with_ffn in MODELS:
        lr = chosen_rate(result, name)
        if lr in (min(result["lrs"]), max(result["lrs"])):
            for seed in result["seeds"]:
                runs.append(one_run(name, layers, with_ffn, BEYOND[lr], seed))
                print(runs[-1], flush=True)
    result["edge"] = {"rule": "each model whose chosen rate is an edge of the grid, once more at the next "
                              "rate out (3e-2 above 1e-2, 3e-4 below 1e-3), every seed",
                      "runs": runs, "machine": machine(), "seconds": round(time.perf_counter() - wall0, 1),
                      "cpu_seconds": round(time.process_time() - cpu0, 1)}
    write_results("ffn_memory_lr", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
