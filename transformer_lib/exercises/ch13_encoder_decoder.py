"""Chapter 13 exercises: encoder vs decoder.

The references are the library's own: :class:`~transformer_lib.model.Seq2SeqTransformer`'s
forward pass and ``greedy_decode``, :func:`~transformer_lib.tasks.shift_right`,
:func:`~transformer_lib.masks.prefix_lm_mask` and ``count_parameters`` of the two layer classes.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from ..cost import count_parameters
from ..layers import DecoderLayer, EncoderLayer
from ..masks import causal_mask, prefix_lm_mask
from ..model import Seq2SeqTransformer
from ..tasks import BOS, shift_right
from ._core import NotYet, compare_arrays, compare_function, compare_value, exercise, seed_cpu

__all__ = []


def _models_and_batches():
    """Small random encoder-decoders and batches with n_src != n_tgt (so a swap changes shapes)."""
    cases = []
    g = torch.Generator().manual_seed(12)
    for seed, (vocab, d, heads, B, n_src, n_tgt) in enumerate(((11, 16, 2, 2, 5, 4), (17, 24, 4, 3, 3, 6))):
        seed_cpu(seed)  # the init draws from the global CPU generator (restored after every check)
        model = Seq2SeqTransformer(vocab, vocab, d_model=d, num_heads=heads, num_encoder_layers=1,
                                   num_decoder_layers=2, d_ff=2 * d).eval()
        src = torch.randint(3, vocab, (B, n_src), generator=g)
        tgt = torch.randint(3, vocab, (B, n_tgt), generator=g)
        cases.append((model, src, tgt))
    return cases


# -- 1. the teacher-forcing loss ---------------------------------------------------------------------

def _loss_reference(model, src, target):
    logits = model(src, shift_right(target))  # (B, n, V)
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


@exercise("encdec.teacher_forcing_loss",
          hint="the decoder input is the target shifted right (start token first); the labels are the "
               "target itself; average the cross-entropy over every position of every sequence",
          wrong_answers=lambda: [
              lambda m, s, t: F.cross_entropy(m(s, t).flatten(0, 1), t.flatten()),  # no shift: copying
              lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), shift_right(t).flatten()),
              lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), t.flatten(),
                                              reduction="sum"),
              lambda m, s, t: F.cross_entropy(m(s, t[:, :-1]).flatten(0, 1), t[:, 1:].flatten()),
              lambda m, s, t: F.cross_entropy(m(s, shift_right(t)).flatten(0, 1), t.flatten(),  # sum per sequence
                                              reduction="sum") / t.shape[0],
              lambda m, s, t: F.nll_loss(m(s, shift_right(t)).flatten(0, 1), t.flatten()),  # logits as log-probs
          ],
          solution=lambda: _loss_reference,
          alternative_answers=lambda: [_loss_by_gather,
                                       lambda m, s, t: np.float32(_loss_reference(m, s, t).item())])
def _check_loss(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    cases = _models_and_batches()
    for n, (model, src, tgt) in enumerate(cases, 1):
        with torch.no_grad():
            got = answer(model, src, tgt)
            expected = _loss_reference(model, src, tgt).item()
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise NotYet(f"return one number (the mean loss), got a tensor of shape {tuple(got.shape)}")
            got = got.item()
        compare_value(got, expected, what=f"the loss on test batch #{n} (target length {tgt.shape[1]})",
                      rtol=1e-5, atol=1e-6)
    return f"matches the library's teacher-forced loss on all {len(cases)} batches."


def _loss_by_gather(model, src, target):
    """A right answer: log-softmax, pick each target's log-probability with gather, average."""
    start = torch.full_like(target[:, :1], BOS)  # (B, 1)
    logits = model(src, torch.cat([start, target[:, :-1]], dim=1))  # (B, n, V)
    log_probs = logits.log_softmax(dim=-1)
    picked = log_probs.gather(-1, target[..., None]).squeeze(-1)  # (B, n)
    return float(-picked.mean())


# -- 2. generate one token at a time and keep the logits -------------------------------------------------

def _generate_reference(model, src, bos_id, max_len):
    tokens = model.greedy_decode(src, bos_id, max_len)  # (B, n)
    logits = model(src, shift_right(tokens, bos_id))  # (B, n, V): re-scored in one parallel pass
    return tokens, logits


def _generate_no_feedback(model, src, bos_id, max_len):
    memory = model.encode(src)
    start = torch.full((src.shape[0], max_len), bos_id, dtype=torch.long)  # never feeds predictions back
    logits = model.decode(start, memory)
    return logits.argmax(-1), logits


def _generate_unshifted(model, src, bos_id, max_len):
    tokens = model.greedy_decode(src, bos_id, max_len)
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


@exercise("encdec.generate_with_logits",
          hint="encode once; start from a (B, 1) column of the start token; at each step decode the "
               "tokens so far, keep the logits of the LAST position, append their argmax",
          wrong_answers=lambda: [_generate_no_feedback, _generate_unshifted, _generate_first_position,
                                 lambda m, s, b, n: (lambda t, lg: (t, lg.softmax(-1)))(*_generate_reference(m, s, b, n)),
                                 lambda m, s, b, n: (lambda t, lg: (torch.cat([torch.full_like(t[:, :1], b), t], 1)[:, :n],
                                                                    lg))(*_generate_reference(m, s, b, n))],  # BOS kept
          solution=lambda: _generate_reference,
          alternative_answers=lambda: [_generate_loop])
def _check_generate(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    cases = _models_and_batches()
    for model, src, tgt in cases:
        n = tgt.shape[1]
        label = f"a batch of {src.shape[0]} sources of length {src.shape[1]}, max_len={n}"
        with torch.no_grad():
            got = answer(model, src, BOS, n)
            tokens, logits = _generate_reference(model, src, BOS, n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return a pair (tokens (B, max_len), logits (B, max_len, V))")
        compare_arrays(got[0], tokens, what=f"tokens for {label}", atol=0)
        compare_arrays(got[1], logits, what=f"logits for {label}", atol=1e-5)
    return (f"tokens equal greedy_decode and the logits equal one parallel pass over the shifted "
            f"output on all {len(cases)} batches.")


# -- 3. the prefix-LM mask --------------------------------------------------------------------------------

def _prefix_transposed(n_prefix, L):
    i = torch.arange(L)[:, None]
    return causal_mask(L) | (i < n_prefix)  # prefix *queries* see everything: they read the future


def _prefix_off_by_one(n_prefix, L):
    j = torch.arange(L)[None, :]
    return causal_mask(L) | (j <= n_prefix)


@exercise("encdec.prefix_lm_mask",
          hint="start from the causal mask (j <= i) and also allow every key j inside the prefix "
               "(j < n_prefix); shape (L, L), True = may attend",
          wrong_answers=lambda: [lambda n_prefix, L: causal_mask(L),
                                 lambda n_prefix, L: torch.ones(L, L, dtype=torch.bool),
                                 _prefix_transposed, _prefix_off_by_one,
                                 lambda n_prefix, L: prefix_lm_mask(n_prefix, L).float(),
                                 lambda n_prefix, L: causal_mask(L) & (torch.arange(L)[None, :] < n_prefix),  # AND
                                 lambda n_prefix, L: causal_mask(L) | (torch.arange(L)[None, :] < n_prefix - 1)],
          solution=lambda: prefix_lm_mask,
          alternative_answers=lambda: [
              lambda n_prefix, L: [[j <= i or (i < n_prefix and j < n_prefix) for j in range(L)] for i in range(L)],
              lambda n_prefix, L: np.tril(np.ones((L, L), dtype=bool)) | (np.arange(L)[None, :] < n_prefix),
          ])
def _check_prefix(answer):
    cases = [(2, 5), (0, 4), (4, 4), (3, 7), (1, 1), (1, 6)]
    return compare_function(answer, prefix_lm_mask, cases, what="mask",
                            describe=lambda a: f"n_prefix={a[0]}, L={a[1]}")


# -- 4. what the decoder layer adds ---------------------------------------------------------------------

@functools.lru_cache(maxsize=None)  # a count: the same every time
def _extra_parameters(d_model: int) -> int:
    dec = DecoderLayer(d_model, 1, 2 * d_model)  # the init's random draws are undone after every check
    enc = EncoderLayer(d_model, 1, 2 * d_model)
    return count_parameters(dec) - count_parameters(enc)


@exercise("encdec.extra_decoder_parameters",
          hint="list the modules a DecoderLayer has and an EncoderLayer lacks; count every weight "
               "matrix, every bias and every LayerNorm scale and shift",
          wrong_answers=lambda: [lambda d: 4 * d * d,  # cross-attention weights only
                                 lambda d: 4 * (d * d + d),  # forgets the third LayerNorm
                                 lambda d: 3 * (d * d + d) + 2 * d,  # forgets W^O
                                 lambda d: 4 * (d * d + d) + d,  # a LayerNorm without its shift
                                 lambda d: 8 * (d * d + d) + 2 * d],  # counts the self-attention again
          solution=lambda: _extra_parameters,
          alternative_answers=lambda: [lambda d: np.int64(4 * d * d + 4 * d + 2 * d),
                                       lambda d: float(sum(d * d + d for _ in "QKVO") + 2 * d)])
def _check_extra(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    sizes = (8, 64, 512, 30)
    for d in sizes:
        compare_value(answer(d), _extra_parameters(d), what=f"your count for d_model={d}", rtol=0)
    return f"matches count_parameters(DecoderLayer) - count_parameters(EncoderLayer) for all {len(sizes)} sizes."
