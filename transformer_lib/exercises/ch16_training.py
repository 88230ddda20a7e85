"""Chapter 16 (Training a small GPT) exercises: the causal LM loss with shifted targets, the
warmup-cosine schedule, perplexity from per-token losses.

The checkers compare with :mod:`transformer_lib.training` (``causal_lm_loss``,
``warmup_cosine_schedule``, ``perplexity``) on unseen shapes and settings.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..training import causal_lm_loss, perplexity, warmup_cosine_schedule
from ._core import NotYet, compare_value, exercise, to_number

__all__ = []


# -- 1. the causal LM loss -------------------------------------------------------------------------

@exercise("training.causal_lm_loss",
          hint="position t predicts token t + 1: drop the last position of logits and the first token, "
               "flatten to (N, V) and (N,), and take F.cross_entropy",
          wrong_answers=lambda: [
              lambda logits, tokens: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)),  # no shift
              lambda logits, tokens: F.cross_entropy(logits[:, 1:].reshape(-1, logits.shape[-1]),
                                                     tokens[:, :-1].reshape(-1)),  # shifted the wrong way
              lambda logits, tokens: F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     tokens[:, 1:].reshape(-1), reduction="sum"),  # a sum
              lambda logits, tokens: F.cross_entropy(logits[0, :-1], tokens[0, 1:]),  # first row only
          ],
          solution=lambda: causal_lm_loss,
          alternative_answers=lambda: [
              lambda logits, tokens: -torch.log_softmax(logits, -1)[:, :-1].gather(-1, tokens[:, 1:, None]).mean(),
              lambda logits, tokens: torch.stack([F.cross_entropy(logits[b, :-1], tokens[b, 1:], reduction="sum")
                                                  for b in range(len(tokens))]).sum() / tokens[:, 1:].numel(),
          ])
def _check_loss(answer):
    g = torch.Generator().manual_seed(3)
    shapes = [(2, 6, 11), (1, 2, 5), (4, 9, 7)]
    for B, L, V in shapes:
        logits, tokens = torch.randn(B, L, V, generator=g), torch.randint(0, V, (B, L), generator=g)
        compare_value(answer(logits, tokens), causal_lm_loss(logits, tokens).item(),
                      what=f"the loss for logits of shape {(B, L, V)}", rtol=1e-5)
    return f"right for all {len(shapes)} shapes."


# -- 2. the warmup-cosine schedule -----------------------------------------------------------------

@exercise("training.warmup_cosine",
          hint="warmup: (step + 1) / warmup; after it t = (step - warmup) / (total - warmup), capped at 1, "
               "and the multiplier is min_ratio + (1 - min_ratio) * (1 + cos(pi t)) / 2",
          wrong_answers=lambda: [
              lambda s, w, T, m: s / w if s < w else m + (1 - m) * 0.5 * (1 + math.cos(math.pi * min(1, (s - w) / (T - w)))),
              lambda s, w, T, m: (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * min(1, (s - w) / (T - w)))),
              lambda s, w, T, m: (s + 1) / w if s < w else m + (1 - m) * (1 - min(1, (s - w) / (T - w))),
              lambda s, w, T, m: (s + 1) / w if s < w else m + (1 - m) * 0.5 * (1 + math.cos(math.pi * (s - w) / (T - w))),
          ],
          solution=lambda: (lambda s, w, T, m: warmup_cosine_schedule(w, T, m)(s)),
          alternative_answers=lambda: [
              lambda s, w, T, m: torch.tensor((s + 1) / w if s < w else m + (1 - m) * 0.5 * (
                  1 + math.cos(math.pi * min(1.0, (s - w) / (T - w))))),
              lambda s, w, T, m: min((s + 1) / w, m + (1 - m) * 0.5 * (1 + math.cos(math.pi * max(0.0, min(1.0, (s - w) / (T - w)))))),
          ])
def _check_schedule(answer):
    settings = [(10, 100, 0.1), (5, 20, 0.0), (3, 50, 0.5)]
    for warmup, total, min_ratio in settings:
        schedule = warmup_cosine_schedule(warmup, total, min_ratio)
        for step in sorted({0, warmup - 1, warmup, (warmup + total) // 2, total - 1, total, total + 7}):
            got = to_number(answer(step, warmup, total, min_ratio), "the multiplier")
            expected = schedule(step)
            if abs(got - expected) > 1e-6:  # float32 answers (a tensor) are off by up to ~6e-8
                raise NotYet(f"the multiplier at step {step} (warmup {warmup}, total {total}, min_ratio "
                             f"{min_ratio}) is too {'high' if got > expected else 'low'}")
    return f"right at every checked step of {len(settings)} schedules."


# -- 3. perplexity -----------------------------------------------------------------------------

@exercise("training.perplexity",
          hint="average the per-token losses (in nats) first, then exponentiate: exp(mean(losses))",
          wrong_answers=lambda: [
              lambda losses: sum(math.exp(x) for x in losses) / len(losses),  # mean of exps
              lambda losses: math.exp(sum(losses)),  # exp of the sum
              lambda losses: 2 ** (sum(losses) / len(losses)),  # base 2 with losses in nats
              lambda losses: sum(losses) / len(losses),  # the mean loss, not exponentiated
          ],
          solution=lambda: (lambda losses: perplexity(sum(losses) / len(losses))),
          alternative_answers=lambda: [lambda losses: torch.tensor(losses).mean().exp(),
                                       lambda losses: math.prod(math.exp(x) for x in losses) ** (1 / len(losses))])
def _check_perplexity(answer):
    cases = [[2.0, 2.0, 2.0], [0.1, 3.0, 1.2, 0.7], [math.log(50)] * 5, [4.5]]
    for losses in cases:
        compare_value(answer(list(losses)), perplexity(sum(losses) / len(losses)),
                      what=f"the perplexity of {len(losses)} token losses", rtol=1e-6)
    return f"right for all {len(cases)} lists of losses."
