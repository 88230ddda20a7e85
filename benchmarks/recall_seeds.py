"""Chapter 9's recall task over seeds: GRU against a one-layer Transformer at lengths 8 and 40.

    nice .venv/bin/python benchmarks/recall_seeds.py        # about 2 min of CPU on one thread

The task (``transformer_lib.tasks.recall_first_batch``): a sequence of random tokens, the label is
the class of the *first* token, read from the last position. The chapter trains seed 0 of each
model live (150 Adam steps of 32 sequences) and shows its gradient profile; one
seed is no evidence that one model learns the task and the other does not, so this script repeats
the comparison over ``--seeds`` seeds, with the learning rate of each (model, length) chosen by
one rule:

* the same budget for both models: ``--steps`` steps of ``--batch`` sequences;
* a learning rate from ``--lrs`` (default 1e-3, 3e-3, 1e-2, 3e-2 and 1e-1, the grid the chapter
  reads)
  per (model, length): the one with the highest mean accuracy on a
  validation set of 1,000 sequences (generator seed 5) over the seeds, ties broken by the lower
  mean validation loss;
* seed s: the model's initialization (``tl.seed_everything(s)``) and its training batches
  (``torch.Generator().manual_seed(1 + s)``; s = 0 is the chapter's run); the test set is the
  chapter's, 1,000 sequences from generator seed 7.

It writes ``benchmarks/results/recall_seeds.json``: the rule, every run's validation and test
accuracy, and the chosen learning rates. Models as in the chapter: width 32, vocabulary 11 (3
reserved + 8 content tokens), 8 classes; the Transformer has 4 heads and one layer.
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import transformer_lib as tl
from _results import write_results
from transformer_lib.rnn import RNNClassifier
from transformer_lib.tasks import recall_first_batch
from transformer_lib.toy_models import TransformerClassifier
from transformer_lib.training import fit

V, C, H = 11, 8, 32


def make_model(kind: str, seed: int) -> torch.nn.Module:
    tl.seed_everything(seed)
    if kind == "transformer":
        return TransformerClassifier(V, H, C, num_heads=4, num_layers=1, max_len=64)
    return RNNClassifier(V, H, C, kind=kind)


def evaluate(model, n: int, seed: int) -> tuple[float, float]:
    tokens, labels = recall_first_batch(1000, n, V, C, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = model(tokens)
    return (logits.argmax(-1) == labels).float().mean().item(), F.cross_entropy(logits, labels).item()


def train(kind: str, n: int, seed: int, lr: float, steps: int, batch: int) -> dict:
    model = make_model(kind, seed)
    batches = torch.Generator().manual_seed(1 + seed)
    fit(model, lambda step: recall_first_batch(batch, n, V, C, generator=batches),
        lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps, lr=lr, progress=False)
    model.eval()
    val_acc, val_loss = evaluate(model, n, 5)
    test_acc, _ = evaluate(model, n, 7)
    return {"seed": seed, "val_accuracy": val_acc, "val_loss": val_loss, "test_accuracy": test_acc}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 40])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # tiny models: one thread, the same numbers on every machine

    runs, chosen = [], {}
    for kind in ("gru", "transformer"):
        for n in args.lengths:
            by_lr = {}
            for lr in args.lrs:
                by_lr[lr] = [train(kind, n, s, lr, args.steps, args.batch) for s in range(args.seeds)]
                for r in by_lr[lr]:
                    runs.append({"model": kind, "n": n, "lr": lr, **r})
                print(f"{kind:>11} n={n:>3} lr={lr:g}: val accuracy "
                      f"{statistics.mean(r['val_accuracy'] for r in by_lr[lr]):.3f}, test "
                      + ", ".join(f"{r['test_accuracy']:.3f}" for r in by_lr[lr]), flush=True)
            best = max(args.lrs, key=lambda lr: (statistics.mean(r["val_accuracy"] for r in by_lr[lr]),
                                                 -statistics.mean(r["val_loss"] for r in by_lr[lr])))
            chosen[f"{kind}/{n}"] = best
            print(f"{kind:>11} n={n:>3}: chosen lr {best:g}")
    write_results("recall_seeds", {
        "rule": "per (model, length): the learning rate with the highest mean validation accuracy over the "
                "seeds (1,000 sequences, generator seed 5), ties broken by the lower mean validation loss",
        "steps": args.steps, "batch": args.batch, "lrs": args.lrs, "seeds": args.seeds,
        "lengths": args.lengths, "chosen_lr": chosen, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
