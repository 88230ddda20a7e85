"""Chapter 13's running-sum model trained longer, with a clean past and with a noisy one: which
route does it take, and does it recover from an error?

    nice -n 19 .venv/bin/python benchmarks/encoder_decoder_routes.py             # seeds 0-4
    nice -n 19 .venv/bin/python benchmarks/encoder_decoder_routes.py --seeds 1   # seed 0 only

Cost: about 210 CPU-seconds for five seeds, one process, one thread (measured: 210 s user at a
load of 12 on 2 cores; each run's training CPU time is in the results).

The chapter's running-sum model (``Seq2SeqTransformer(13, 13, d_model 64, 4 heads, 1 + 1 layers,
d_ff 128)``, 8 digits, target_t = source_1 + ... + source_t mod 10, Adam 3e-3 after a 20-step
warmup, batches of 64; ``benchmarks/encoder_decoder_seeds.py`` has its 300-step runs) is trained
here for ``STEPS`` steps, the same seeds 0 .. --seeds - 1 (initialisation and training data as in
that script), in two ways that differ only in the decoder's input during training:

* ``clean``: teacher forcing, the true target shifted right (the chapter's training);
* ``noisy past``: the same, but each input digit after BOS is replaced, with probability
  ``NOISE``, by a uniformly drawn digit (its own generator, seeded 1000 + seed); the targets stay
  the true running sums. A model that copies its past is now wrong where the past lies, so
  training pays for reading the source instead.

Each model is tested on the chapter's 500 test sequences (generator seed 123): token accuracy
under teacher forcing and under free running (greedy, KV cache); one forced error at position 3
(the model's own output shifted by 5 mod 10 and fed back), then the accuracy of positions 4-8
(``recovered``: right again after the error) and the share of positions 4-8 whose output equals
the model's own previous output plus the source digit (``follows_own_past``); and, without a
forced error, the model's own mistakes: over the free-running sequences whose first wrong token
comes before position 8, the share of the later positions that are right
(``right_after_own_first_mistake``, with the number of such sequences).

Prints a table, asserts nothing, writes benchmarks/results/encoder_decoder_routes.json (rewritten
after every run, so a cut sweep keeps what it finished).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import seed_sweep, write_results  # noqa: E402
from encoder_decoder_seeds import (  # noqa: E402
    BATCH, ERROR_AT, LENGTH, LR, TEST, VOCAB, WARMUP, free_run_with_error, per_position)

import transformer_lib as tl  # noqa: E402
from transformer_lib import tasks  # noqa: E402
from transformer_lib.sampling import generate  # noqa: E402
from transformer_lib.tasks import running_sum_batch  # noqa: E402
from transformer_lib.training import fit  # noqa: E402

STEPS, NOISE = 1000, 0.2
VARIANTS = ("clean", "noisy past")


def noisy(tgt_in: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    """``tgt_in`` (B, n) with each position after BOS replaced, with probability ``p``, by a
    uniformly drawn digit token."""
    replace = torch.rand(tgt_in.shape, generator=gen) < p  # (B, n)
    replace[:, 0] = False  # BOS stays
    digits = torch.randint(tasks.FIRST_TOKEN, VOCAB, tgt_in.shape, generator=gen)
    return torch.where(replace, digits, tgt_in)


def train(seed: int, variant: str):
    tl.seed_everything(seed)
    model = tl.Seq2SeqTransformer(VOCAB, VOCAB, d_model=64, num_heads=4, num_encoder_layers=1,
                                  num_decoder_layers=1, d_ff=128)
    data, noise = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(1000 + seed)

    def loss(model, batch):
        src, tgt = batch
        tgt_in = tasks.shift_right(tgt)
        if variant == "noisy past":
            tgt_in = noisy(tgt_in, NOISE, noise)
        logits = model(src, tgt_in)  # (B, n, V)
        return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())

    losses = fit(model, lambda step: running_sum_batch(BATCH, LENGTH, data), loss, steps=STEPS,
                 lr=LR, warmup_steps=WARMUP, progress=False)["loss"]
    return model, losses


def run(seed: int, variant: str) -> dict:
    cpu = time.process_time()
    model, losses = train(seed, variant)
    train_cpu = time.process_time() - cpu
    src, tgt = running_sum_batch(TEST, LENGTH, torch.Generator().manual_seed(123))
    model.eval()
    with torch.no_grad():
        forced = model(src, tasks.shift_right(tgt)).argmax(-1)  # (B, n)
        free = generate(model.conditioned_on(src), torch.full_like(src[:, :1], tasks.BOS),
                        LENGTH)[:, 1:]
    free_err = free_run_with_error(model, src, LENGTH, ERROR_AT)
    digit = lambda t: t - tasks.FIRST_TOKEN  # noqa: E731
    consistent = digit(free_err[:, 1:]) == (digit(free_err[:, :-1]) + digit(src[:, 1:])) % 10
    after = slice(ERROR_AT + 1, LENGTH)  # positions 4..8
    # own mistakes: the first wrong token of each free-running sequence, and what follows it
    wrong = free != tgt  # (B, n)
    first = torch.where(wrong.any(1), wrong.float().argmax(1), torch.full((TEST,), LENGTH))
    later = torch.arange(LENGTH)[None, :] > first[:, None]  # (B, n): positions after it
    n_later = int(later.sum())
    right_after = ((~wrong) & later).sum().item() / n_later if n_later else None
    return {"seed": seed, "variant": variant, "final_loss": round(sum(losses[-20:]) / 20, 5),
            "forced_token_accuracy": round((forced == tgt).float().mean().item(), 4),
            "free_token_accuracy": round((free == tgt).float().mean().item(), 4),
            "free_sequence_accuracy": round((free == tgt).all(1).float().mean().item(), 4),
            "free_error": per_position(free_err, tgt),
            "recovered": round((free_err == tgt)[:, after].float().mean().item(), 4),
            "follows_own_past": round(consistent[:, ERROR_AT:].float().mean().item(), 4),
            "sequences_with_own_mistake": int((first < LENGTH - 1).sum()),
            "right_after_own_first_mistake": None if right_after is None else round(right_after, 4),
            "train_cpu_seconds": round(train_cpu, 1)}


def main() -> None:
    args, elapsed = seed_sweep(__doc__.splitlines()[0])
    settings = {"steps": STEPS, "noise": NOISE, "length": LENGTH, "batch": BATCH, "lr": LR,
                "warmup_steps": WARMUP, "test_sequences": TEST, "test_seed": 123,
                "error_at_position": ERROR_AT + 1, "noise_seed": "1000 + seed"}
    runs = []
    for seed in range(args.seeds):
        for variant in VARIANTS:
            r = run(seed, variant)
            runs.append(r)
            print(f"seed {seed} {variant:<10}: loss {r['final_loss']:.3f}, tokens forced"
                  f" {r['forced_token_accuracy']:.1%} free {r['free_token_accuracy']:.1%}; after"
                  f" the error: right {r['recovered']:.1%}, follows own past"
                  f" {r['follows_own_past']:.1%}; own mistakes: {r['sequences_with_own_mistake']}"
                  f" sequences, right after {r['right_after_own_first_mistake']}"
                  f" ({r['train_cpu_seconds']} s)", flush=True)
            write_results("encoder_decoder_routes", {"settings": settings, "runs": runs, **elapsed()})


if __name__ == "__main__":
    main()
