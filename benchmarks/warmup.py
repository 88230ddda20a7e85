"""Chapter 7's warmup experiment over seeds: benchmarks/results/warmup.json.

    python benchmarks/warmup.py            # 5 seeds x 4 settings, about a minute of CPU
    python benchmarks/warmup.py --seeds 3

The chapter's copy task (6 random tokens, a separator, the same 6 tokens; loss on the copy) and
model (6-layer ``DecoderOnlyLM``, d_model 32, 4 heads, learned positions). Every setting gets the
same rule: AdamW at a peak learning rate of 1e-2, 150 steps, gradient clipping at 1, and either
no warmup or a linear warmup over the first 75 steps. Seed ``s`` sets the initialisation and the
training batches (seed 0 is the chapter's run); the held-out sequences are the chapter's.
Recorded per setting and seed: the mean training loss over the last 15 steps, the held-out copy
accuracy, and the first step at which the 5-step moving-average loss falls below 0.5 (None if
never).
"""
from __future__ import annotations


import numpy as np
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.tasks import EOS, random_tokens
from transformer_lib.training import fit
from _results import seed_sweep, write_results

VOCAB, N_COPY, BATCH, STEPS, LR, WARMUP = 16, 6, 32, 150, 1e-2, 75


def copy_sequences(batch_size, generator):
    src = random_tokens(batch_size, N_COPY, VOCAB, generator)
    return torch.cat([src, torch.full((batch_size, 1), EOS), src], dim=1)


def copy_loss(model, seq):
    logits = model(seq[:, :-1])
    return F.cross_entropy(logits[:, N_COPY:].reshape(-1, VOCAB), seq[:, 1:][:, N_COPY:].reshape(-1))


@torch.no_grad()
def copy_accuracy(model):
    seq = copy_sequences(512, torch.Generator().manual_seed(99))
    return (model(seq[:, :-1])[:, N_COPY:].argmax(-1) == seq[:, N_COPY + 1:]).float().mean().item()


def first_step_below(losses, level=0.5, window=5):
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    below = np.flatnonzero(smooth < level)
    return int(below[0]) + window - 1 if below.size else None


def train_copy(norm_first, warmup_steps, seed, lr=LR):
    tl.seed_everything(seed)
    model = tl.DecoderOnlyLM(VOCAB, d_model=32, num_heads=4, num_layers=6, max_len=16, norm_first=norm_first,
                             activation="relu", tie_weights=False)
    data = torch.Generator().manual_seed(seed)
    losses = fit(model, lambda step: copy_sequences(BATCH, data), copy_loss, STEPS, lr=lr,
                 warmup_steps=warmup_steps, grad_clip=1.0, progress=False)["loss"]
    return {"final_loss": float(np.mean(losses[-15:])), "accuracy": copy_accuracy(model),
            "first_step_below_0.5": first_step_below(losses)}


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    settings = {}
    for norm_first in (False, True):
        for warmup in (0, WARMUP):
            key = f"{'pre' if norm_first else 'post'}_ln_warmup_{warmup}"
            settings[key] = [train_copy(norm_first, warmup, seed) for seed in range(args.seeds)]
            print(key, settings[key], flush=True)
    write_results("warmup", {"seeds": list(range(args.seeds)), "steps": STEPS, "lr": LR, "warmup_steps": WARMUP,
                             "settings": settings, **elapsed()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
