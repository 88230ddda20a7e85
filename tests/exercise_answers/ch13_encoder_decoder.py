"""Answers for the checkers of transformer_lib/exercises/ch13_encoder_decoder.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from transformer_lib.cost import count_parameters
from transformer_lib.layers import DecoderLayer, TransformerBlock
from transformer_lib.masks import causal_mask, prefix_lm_mask
from transformer_lib.sampling import generate
from transformer_lib.tasks import BOS, shift_right


def greedy_decode(model, src, bos_id, max_len):  # the library's greedy decoding, BOS dropped
    return generate(model.conditioned_on(src), torch.full((len(src), 1), bos_id), max_len)[:, 1:]


def _loss_reference(model, src, target):
    logits = model(src, shift_right(target))  # (B, n, V)
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def _generate_reference(model, src, bos_id, max_len):
    tokens = greedy_decode(model, src, bos_id, max_len)  # (B, n)
    logits = model(src, shift_right(tokens, bos_id))  # (B, n, V): re-scored in one parallel pass
    return tokens, logits


@functools.lru_cache(maxsize=None)  # a count: the same every time


def _extra_parameters(d_model: int) -> int:
    dec = DecoderLayer(d_model, 1, 2 * d_model)  # the init's random draws are undone after every check
    enc = TransformerBlock(d_model, 1, 2 * d_model)
    return count_parameters(dec) - count_parameters(enc)


def _loss_by_gather(model, src, target):
    """A right answer: log-softmax, pick each target's log-probability with gather, average."""
    start = torch.full_like(target[:, :1], BOS)  # (B, 1)
    logits = model(src, torch.cat([start, target[:, :-1]], dim=1))  # (B, n, V)
    log_probs = logits.log_softmax(dim=-1)
    picked = log_probs.gather(-1, target[..., None]).squeeze(-1)  # (B, n)
    return float(-picked.mean())


def _generate_no_feedback(model, src, bos_id, max_len):
    memory = model.encode(src)
    start = torch.full((src.shape[0], max_len), bos_id, dtype=torch.long)  # never feeds predictions back
    logits = model.decode(start, memory)
    return logits.argmax(-1), logits


def _generate_unshifted(model, src, bos_id, max_len):
    tokens = greedy_decode(model, src, bos_id, max_len)
    return tokens, model(src, tokens)  # scores position t with the token of position t visible


def _generate_first_position(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    steps = []
    for _ in range(max_len):
        logits = model.decode(ys, memory)[:, 0]  # the start position every time, not the newest
        steps.append(logits)
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:], torch.stack(steps, dim=1)


def _generate_loop(model, src, bos_id, max_len):
    """A right answer: encode once, then decode step by step, keeping the last position's logits."""
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)  # (B, 1)
    steps = []
    for _ in range(max_len):
        last = model.decode(ys, memory)[:, -1]  # (B, V)
        steps.append(last)
        ys = torch.cat([ys, last.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:].tolist(), torch.stack(steps, dim=1).numpy()  # a list of lists and an array


def _prefix_transposed(n_prefix, L):
    i = torch.arange(L)[:, None]
    return causal_mask(L) | (i < n_prefix)  # prefix *queries* see everything: they read the future


def _prefix_off_by_one(n_prefix, L):
    j = torch.arange(L)[None, :]
    return causal_mask(L) | (j <= n_prefix)


ANSWERS = {
    'encdec.teacher_forcing_loss': {
        'solution': lambda: _loss_reference,
        'alternatives': lambda: [_loss_by_gather,
                                 lambda m, s, t: np.float32(_loss_reference(m, s, t).item())],
        'wrong': lambda: [
            lambda m, s, t: F.cross_entropy(m(s, t).flatten(0, 1), t.flatten()),  # no shift: copying
            lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), shift_right(t).flatten()),
            lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), t.flatten(),
                                            reduction="sum"),
            lambda m, s, t: F.cross_entropy(m(s, t[:, :-1]).flatten(0, 1), t[:, 1:].flatten()),
            lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), t.flatten(),  # sum per sequence
                                            reduction="sum") / t.shape[0],
            lambda m, s, t: F.nll_loss(m(s, shift_right(t)).flatten(0, 1), t.flatten()),  # logits as log-probs
        ],
    },
    'encdec.generate_with_logits': {
        'solution': lambda: _generate_reference,
        'alternatives': lambda: [_generate_loop],
        'wrong': lambda: [_generate_no_feedback, _generate_unshifted, _generate_first_position,
                          lambda m, s, b, n: (lambda t, lg: (t, lg.softmax(-1)))(*_generate_reference(m, s, b, n)),
                          lambda m, s, b, n: (lambda t, lg: (torch.cat([torch.full_like(t[:, :1], b), t], 1)[:, :n],
                                                             lg))(*_generate_reference(m, s, b, n))],  # BOS kept
    },
    'encdec.prefix_lm_mask': {
        'solution': lambda: prefix_lm_mask,
        'alternatives': lambda: [
            lambda n_prefix, L: [[j <= i or (i < n_prefix and j < n_prefix) for j in range(L)] for i in range(L)],
            lambda n_prefix, L: np.tril(np.ones((L, L), dtype=bool)) | (np.arange(L)[None, :] < n_prefix),
        ],
        'wrong': lambda: [lambda n_prefix, L: causal_mask(L),
                          lambda n_prefix, L: torch.ones(L, L, dtype=torch.bool),
                          _prefix_transposed, _prefix_off_by_one,
                          lambda n_prefix, L: prefix_lm_mask(n_prefix, L).float(),
                          lambda n_prefix, L: causal_mask(L) & (torch.arange(L)[None, :] < n_prefix),  # AND
                          lambda n_prefix, L: causal_mask(L) | (torch.arange(L)[None, :] < n_prefix - 1)],
    },
    'encdec.extra_decoder_parameters': {
        'solution': lambda: _extra_parameters,
        'alternatives': lambda: [lambda d: np.int64(4 * d * d + 4 * d + 2 * d),
                                 lambda d: float(sum(d * d + d for _ in "QKVO") + 2 * d)],
        'wrong': lambda: [lambda d: 4 * d * d,  # cross-attention weights only
                          lambda d: 4 * (d * d + d),  # forgets the third LayerNorm
                          lambda d: 3 * (d * d + d) + 2 * d,  # forgets W^O
                          lambda d: 4 * (d * d + d) + d,  # a LayerNorm without its shift
                          lambda d: 8 * (d * d + d) + 2 * d],  # counts the self-attention again
    },
}
