"""Chapter 6's fact-memorisation models at three learning rates: benchmarks/results/ffn_memory_lr.json.

    python benchmarks/ffn_memory_lr.py              # 5 seeds x 3 rates x 3 models, some minutes of CPU
    python benchmarks/ffn_memory_lr.py --seeds 3
    python benchmarks/ffn_memory_lr.py --seeds 3 --out ffn_memory_lr_a &   # or split the seeds
    python benchmarks/ffn_memory_lr.py --first 3 --seeds 2 --out ffn_memory_lr_b
    python benchmarks/ffn_memory_lr.py --merge ffn_memory_lr_a ffn_memory_lr_b

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
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from _results import seed_sweep, write_results
from ffn_memory import MODELS, N_CLASSES, STEPS, data, fact_model
from transformer_lib.training import fit

LRS = (1e-3, 3e-3, 1e-2)
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


if __name__ == "__main__":
    raise SystemExit(main())
