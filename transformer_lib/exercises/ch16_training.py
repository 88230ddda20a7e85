"""Chapter 16 (Training a small GPT) exercises: the causal LM loss with shifted targets, the
warmup-cosine schedule, perplexity from per-token losses.

The checkers compare with :mod:`transformer_lib.training` (``causal_lm_loss``,
``warmup_cosine_schedule``, ``perplexity``) on unseen shapes and settings.
"""
from __future__ import annotations

import math

import torch

from ..training import causal_lm_loss, perplexity, warmup_cosine_schedule
from ._core import compare_value, exercise, to_number

__all__ = []


# -- 1. the causal LM loss -------------------------------------------------------------------------

@exercise("training.causal_lm_loss",
          hint="position t predicts token t + 1: drop the last position of logits and the first token, "
               "flatten to (N, V) and (N,), and take F.cross_entropy")
def _check_loss(answer):
    g = torch.Generator().manual_seed(3)
    shapes = [(2, 6, 11), (1, 2, 5), (4, 9, 7)]
    for B, L, V in shapes:
        logits, tokens = torch.randn(B, L, V, generator=g), torch.randint(0, V, (B, L), generator=g)
        if B == 4:  # large logits: some probabilities underflow to 0, so log(softmax(.)) gives -inf
            logits = 60.0 * logits
        expected = causal_lm_loss(logits, tokens).item()
        compare_value(answer(logits, tokens), expected, f"the loss for logits of shape {(B, L, V)}", rtol=1e-5)
    return f"right for all {len(shapes)} shapes."


# -- 2. the warmup-cosine schedule -----------------------------------------------------------------

@exercise("training.warmup_cosine",
          hint="warmup: (step + 1) / warmup; after it t = (step - warmup) / (total - warmup), capped at 1, "
               "and the multiplier is min_ratio + (1 - min_ratio) * (1 + cos(pi t)) / 2")
def _check_schedule(answer):
    settings = [(10, 100, 0.1), (5, 20, 0.0), (3, 50, 0.5)]
    for warmup, total, min_ratio in settings:
        schedule = warmup_cosine_schedule(warmup, total, min_ratio)
        for step in sorted({0, warmup - 1, warmup, (warmup + total) // 2, total - 1, total, total + 7}):
            got = to_number(answer(step, warmup, total, min_ratio), "the multiplier")
            expected = schedule(step)
            compare_value(got, expected, f"the multiplier at step {step} (warmup {warmup}, total {total}, "  # float32
                          f"min_ratio {min_ratio})", rtol=0, atol=1e-6)  # answers (a tensor) are off by up to ~6e-8
    return f"right at every checked step of {len(settings)} schedules."


# -- 3. perplexity -----------------------------------------------------------------------------

@exercise("training.perplexity",
          hint="average the per-token losses (in nats) first, then exponentiate: exp(mean(losses))")
def _check_perplexity(answer):
    # 400 tokens of loss log(50): a product of exp(loss) overflows float64 long before the mean does
    cases = [[2.0, 2.0, 2.0], [0.1, 3.0, 1.2, 0.7], [math.log(50)] * 400, [4.5]]
    for losses in cases:
        compare_value(answer(list(losses)), perplexity(sum(losses) / len(losses)),
                      what=f"the perplexity of {len(losses)} token losses", rtol=1e-6)
    return f"right for all {len(cases)} lists of losses."
