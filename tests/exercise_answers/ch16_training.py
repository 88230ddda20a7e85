"""Answers for the checkers of transformer_lib/exercises/ch16_training.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from transformer_lib.training import causal_lm_loss, perplexity, warmup_cosine_schedule


ANSWERS = {
    'training.causal_lm_loss': {
        'solution': lambda: causal_lm_loss,
        'alternatives': lambda: [
            lambda logits, tokens: -torch.log_softmax(logits, -1)[:, :-1].gather(-1, tokens[:, 1:, None]).mean(),
            lambda logits, tokens: torch.stack([F.cross_entropy(logits[b, :-1], tokens[b, 1:], reduction="sum")
                                                for b in range(len(tokens))]).sum() / tokens[:, 1:].numel(),
        ],
        'wrong': lambda: [
            lambda logits, tokens: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)),  # no shift
            lambda logits, tokens: F.cross_entropy(logits[:, 1:].reshape(-1, logits.shape[-1]),
                                                   tokens[:, :-1].reshape(-1)),  # shifted the wrong way
            lambda logits, tokens: F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                   tokens[:, 1:].reshape(-1), reduction="sum"),  # a sum
            lambda logits, tokens: F.cross_entropy(logits[0, :-1], tokens[0, 1:]),  # first row only
            # log of the softmax instead of log_softmax: equal in exact arithmetic, but a
            # probability that underflows to 0 gives log 0 = -inf on large logits
            lambda logits, tokens: -torch.log(torch.softmax(logits[:, :-1], -1)).gather(-1, tokens[:, 1:, None]).mean(),
        ],
    },
    'training.warmup_cosine': {
        'solution': lambda: (lambda s, w, T, m: warmup_cosine_schedule(w, T, m)(s)),
        'alternatives': lambda: [
            lambda s, w, T, m: torch.tensor((s + 1) / w if s < w else m + (1 - m) * 0.5 * (
                1 + math.cos(math.pi * min(1.0, (s - w) / (T - w))))),
            lambda s, w, T, m: min((s + 1) / w, m + (1 - m) * 0.5 * (1 + math.cos(math.pi * max(0.0, min(1.0, (s - w) / (T - w)))))),
        ],
        'wrong': lambda: [
            lambda s, w, T, m: s / w if s < w else m + (1 - m) * 0.5 * (1 + math.cos(math.pi * min(1, (s - w) / (T - w)))),
            lambda s, w, T, m: (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * min(1, (s - w) / (T - w)))),
            lambda s, w, T, m: (s + 1) / w if s < w else m + (1 - m) * (1 - min(1, (s - w) / (T - w))),
            lambda s, w, T, m: (s + 1) / w if s < w else m + (1 - m) * 0.5 * (1 + math.cos(math.pi * (s - w) / (T - w))),
        ],
    },
    'training.perplexity': {
        'solution': lambda: (lambda losses: perplexity(sum(losses) / len(losses))),
        'alternatives': lambda: [lambda losses: torch.tensor(losses).mean().exp(),
                                 lambda losses: np.exp(np.mean(losses))],  # NumPy
        'wrong': lambda: [
            lambda losses: sum(math.exp(x) for x in losses) / len(losses),  # mean of exps
            lambda losses: math.exp(sum(losses)),  # exp of the sum
            lambda losses: 2 ** (sum(losses) / len(losses)),  # base 2 with losses in nats
            lambda losses: sum(losses) / len(losses),  # the mean loss, not exponentiated
            # the geometric mean of exp(loss): equal in exact arithmetic, but the product
            # overflows float64 (inf) once the losses add up to more than about 709
            lambda losses: math.prod(math.exp(x) for x in losses) ** (1 / len(losses)),
        ],
    },
}
