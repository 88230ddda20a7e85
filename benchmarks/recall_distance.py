"""Chapter 9's recall task with the distance separated from the number of distractors.

    nice .venv/bin/python benchmarks/recall_distance.py     # 40 runs, about 2 to 3 min of CPU

Going from length 8 to length 40 in ``recall_seeds.py`` changes two things at once: the distance
from the token to recall to the read-out (7 to 39 steps) and the number of distractor tokens
(7 to 39). This control keeps the length at 40 (39 other tokens in every sequence) and moves the
token instead: ``recall_first_batch``'s first token is swapped to position ``p`` and a reserved
token (BOS, never a distractor) is put just before it, so a model can find the token without
counting positions. ``p = 32`` puts it 7 steps from the end, ``p = 1`` 38 steps.

Everything else is ``recall_seeds.train``: width 32, 150 Adam steps of 32 sequences, seed s for
the initialization and ``manual_seed(1 + s)`` for the batches, 1,000 test sequences from generator
seed 7, one thread. Models: the GRU and the one-layer Transformer, at the two learning rates of the
main grid where the distance matters for the GRU (1e-2: at chance on the first-token task at
length 40; 3e-2: learns it); no rate is chosen here, both are reported. Writes
``benchmarks/results/recall_distance.json``.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from _results import seed_sweep, write_results
from recall_seeds import C, V, make_model
from transformer_lib.tasks import BOS, recall_first_batch
from transformer_lib.training import fit

LENGTH, LRS, MODELS = 40, (1e-2, 3e-2), ("gru", "transformer")
POSITIONS = {7: 32, 38: 1}  # steps from the token to the last position -> its index


def marked_batch(batch: int, position: int, generator: torch.Generator):
    """recall_first_batch at LENGTH with the token to recall moved to ``position``, BOS before it."""
    tokens, labels = recall_first_batch(batch, LENGTH, V, C, generator=generator)
    tokens[:, [0, position]] = tokens[:, [position, 0]]
    tokens[:, position - 1] = BOS
    return tokens, labels


def train(kind: str, distance: int, seed: int, lr: float, steps: int = 150, batch: int = 32) -> dict:
    position = POSITIONS[distance]
    start = time.process_time()
    model = make_model(kind, seed)
    batches = torch.Generator().manual_seed(1 + seed)
    fit(model, lambda step: marked_batch(batch, position, batches),
        lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps, lr=lr, progress=False)
    model.eval()
    tokens, labels = marked_batch(1000, position, torch.Generator().manual_seed(7))
    with torch.no_grad():
        accuracy = (model(tokens).argmax(-1) == labels).float().mean().item()
    return {"model": kind, "distance": distance, "lr": lr, "seed": seed, "test_accuracy": accuracy,
            "train_cpu_seconds": round(time.process_time() - start, 2)}


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    runs = []
    for kind in MODELS:
        for lr in LRS:
            for distance in POSITIONS:
                new = [train(kind, distance, s, lr) for s in range(args.seeds)]
                runs += new
                print(f"{kind:>11} lr={lr:g} distance {distance:>2}: test "
                      + ", ".join(f"{r['test_accuracy']:.3f}" for r in new), flush=True)
    write_results("recall_distance", {
        "length": LENGTH, "positions": {str(k): v for k, v in POSITIONS.items()}, "lrs": list(LRS),
        "seeds": args.seeds, "steps": 150, "batch": 32, "marker": "BOS just before the token to recall",
        "runs": runs, **elapsed()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
