"""From logits to text: the generation loops of a language model (chapter 17).

Each step a decoding strategy turns the decoder's logits into one token: greedy, temperature,
top-k, top-p, repetition penalty (the filters of :mod:`transformer_lib.logit_filters`), or beam
search, which keeps the ``num_beams`` most likely partial continuations (sum of log-probs),
extends each by every token, keeps the best again and returns the best finished one.
:func:`generate` runs a decoder token by token on a batch, with or without its KV cache
(:mod:`transformer_lib.kv_cache`). One function per job, and one name per kind of argument
(``tokens``: a (B, L) tensor of ids; ``prompt``: one prompt, a 1-D list or tensor of ids):

===============================  ================================================================
:func:`generate`                 a batch: ``tokens`` (B, L) -> (B, L + n), prompt included
:func:`generate_ids`             one ``prompt`` -> its new ids (a list), the same loop on one row
:func:`generate_each`            one ``prompt`` under several strategies, one row each, one batch
:func:`beam_search`              one ``prompt`` -> the best beam's new ids and its score
:func:`continuation_log_probs`   one ``prompt`` -> the log-probability of each given continuation
===============================  ================================================================

They drive every decoder (``DecoderOnlyLM``, SmolLM2's, ``Seq2SeqTransformer.conditioned_on``)
through one protocol: ``model(tokens (B, L), cache=None) -> logits (B, L, V)`` and
``model.new_cache() -> KVCache``; model classes do not import this module. Ids are checked
against the model's vocabulary (its ``embed`` table) and, for a model with a position table,
the whole generation against its context, before the first forward pass.
"""
from __future__ import annotations

import math

import torch

from ._checks import check_int, check_number, check_prompt_ids
from ._checks.sampling import (check_continuations, check_decoder_ids, check_fits, check_prompt_rows, check_seed,
                               check_strategies, check_strategy)
from .logit_filters import apply_repetition_penalty, sample_next

__all__ = ["generate", "generate_ids", "generate_each", "continuation_log_probs", "beam_search"]


def _generator(seed: int | None, generator: torch.Generator | None, device) -> torch.Generator | None:
    if seed is None:
        return generator
    return torch.Generator(device=device).manual_seed(seed)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def generate(model, tokens: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, repetition_penalty: float = 1.0, seed: int | None = None,
             generator: torch.Generator | None = None, eos_id: int | None = None, use_cache: bool = True,
             context: int | None = None) -> torch.Tensor:
    """Extend every row of ``tokens`` (B, L) by up to ``max_new_tokens``: returns (B, L + n).

    With ``use_cache`` the prompt is run once (prefill) and each later step feeds only the newest
    token; without it every step re-runs the whole sequence (same tokens, more work). A row that
    has produced ``eos_id`` keeps producing it, and the loop stops once every row has. ``context``
    feeds the model only the last ``context`` tokens: once the sequence is longer, the cache is
    dropped, because a sliding window shifts every position (a cached key was computed at its old
    position). ``repetition_penalty`` looks at each row's own tokens, prompt included. A model with
    a position table (learned or sinusoidal) refuses, before the first step, to run past it
    without a ``context`` window."""
    check_decoder_ids(model, tokens, "tokens")
    check_int("max_new_tokens", max_new_tokens, 0)
    check_strategy(temperature, top_k, top_p, repetition_penalty)  # before any forward pass
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    if context is not None:
        check_int("context", context)
    check_prompt_rows(tokens)
    check_fits(model, tokens.shape[1], max_new_tokens, context)
    check_seed(seed, generator)
    tokens = tokens.to(_device(model))
    gen = _generator(seed, generator, tokens.device)

    def pick(logits, tokens):  # logits (B, V), tokens (B, L) -> (B,)
        if repetition_penalty != 1:
            logits = torch.stack([apply_repetition_penalty(row, seen, repetition_penalty)
                                  for row, seen in zip(logits, tokens)])  # each row's own history
        return sample_next(logits, temperature, top_k, top_p, gen)

    cache = model.new_cache() if use_cache else None
    return _decode(model, tokens, max_new_tokens, pick, eos_id, cache, context=context)


def _decode(model, tokens: torch.Tensor, max_new_tokens: int, pick, eos_id, cache, logits=None, context=None):
    """The loop of :func:`generate` and :func:`generate_each`: ``pick(logits (B, V), tokens (B, L))``
    chooses each step's tokens (B,); ``logits`` given = the prompt was already run (prefill)."""
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)  # (B,) rows past EOS
    feed = tokens  # what the next forward pass sees
    for _ in range(max_new_tokens):
        if logits is None:
            if context is not None and (0 if cache is None else cache.length) + feed.shape[1] > context:
                cache, feed = None, tokens[:, -context:]  # the window slides: recompute it whole
            logits = model(feed, cache=cache)[:, -1].float()  # (B, V)
        token = pick(logits, tokens)  # (B,)
        if eos_id is not None:
            token = token.masked_fill(done, eos_id)
            done = done | (token == eos_id)
        tokens = torch.cat([tokens, token[:, None]], dim=1)  # (B, L + 1)
        if bool(done.all()):
            break
        feed, logits = (tokens[:, -1:] if cache is not None else tokens), None
    return tokens


@torch.no_grad()
def generate_ids(model, prompt, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, repetition_penalty: float = 1.0, seed: int | None = None,
                 eos_id: int | None = None, use_cache: bool = True) -> list[int]:
    """New token ids after ``prompt`` (one 1-D prompt: a list or tensor of ids), stopping at
    ``eos_id`` (kept): a one-row :func:`generate`."""
    check_prompt_ids(prompt, name="prompt")
    ids = torch.as_tensor(prompt, dtype=torch.long)[None]  # (1, L)
    check_decoder_ids(model, ids, "prompt")
    out = generate(model, ids, max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed,
                   eos_id=eos_id, use_cache=use_cache)
    return out[0, ids.shape[1]:].tolist()


STRATEGY_KEYS = ("temperature", "top_k", "top_p", "repetition_penalty", "seed")


def _prefill_once(model, prompt: torch.Tensor, rows: int):
    """Run the prompt (L,) once and copy its cache to ``rows`` rows: (cache, last logits (rows, V))."""
    cache = model.new_cache()
    logits = model(prompt[None], cache=cache)[:, -1].float()  # (1, V)
    cache.reorder(torch.zeros(rows, dtype=torch.long, device=prompt.device))  # every row: the prompt's past
    return cache, logits.expand(rows, -1)


@torch.no_grad()
def generate_each(model, prompt, max_new_tokens: int, strategies, eos_id: int | None = None,
                  use_cache: bool = True) -> list[list[int]]:
    """One prompt decoded with several strategies at once: row i of one batch follows
    ``strategies[i]`` (a dict of :func:`generate_ids`' keywords: temperature, top_k, top_p,
    repetition_penalty, seed) with its own generator; returns each row's new ids, up to its first
    ``eos_id`` (kept). Why: a step of a small model on a CPU costs about one read of every weight,
    for one row or six, so six strategies cost about what one does, and row i gets the tokens of
    ``generate_ids(model, prompt, max_new_tokens, eos_id=eos_id, **strategies[i])`` (the same
    draws; the logits differ only by a batched matmul's rounding). The prompt runs once, its cache
    copied to every row. An unseeded sampling row draws from torch's global generator, shared."""
    check_prompt_ids(prompt, name="prompt")
    check_int("max_new_tokens", max_new_tokens, 0)
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    strategies = check_strategies(strategies, STRATEGY_KEYS)
    device = _device(model)
    prompt = torch.as_tensor(prompt, dtype=torch.long, device=device)
    check_decoder_ids(model, prompt[None], "prompt")
    check_fits(model, prompt.numel(), max_new_tokens, None)
    tokens = prompt[None].repeat(len(strategies), 1)  # (B, L): one row per strategy
    gens = [_generator(s.get("seed"), None, device) for s in strategies]
    cache, logits = _prefill_once(model, prompt, len(strategies)) if use_cache else (None, None)

    def pick(logits, tokens):  # row i its own strategy and generator -> (B,)
        return torch.stack([
            sample_next(apply_repetition_penalty(row, seen, s["repetition_penalty"]), s["temperature"],
                        s.get("top_k"), s.get("top_p"), gen)
            for row, seen, s, gen in zip(logits, tokens, strategies, gens)])

    tokens = _decode(model, tokens, max_new_tokens, pick, eos_id, cache, logits)
    new = tokens[:, prompt.numel():].tolist()
    return [row[:row.index(eos_id) + 1] if eos_id in row else row for row in new]


@torch.no_grad()
def continuation_log_probs(model, prompt, continuations, eos_id: int | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p (B,), lengths (B,))``: the model's log-probability of each continuation of one
    prompt (the sum over its tokens of log p(token | prompt, tokens before it)): the prompt runs
    once, its cache is copied to every row, and the continuations run as one batch.
    ``continuations`` is a list of id lists of any lengths, or a (B, n) tensor; tokens after a
    row's first ``eos_id`` are not counted. Rows are padded at the end, which a causal model never
    sees from the positions that count."""
    check_prompt_ids(prompt, name="prompt")
    rows = check_continuations(continuations)
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
        rows = [r[:r.index(eos_id) + 1] if eos_id in r else r for r in rows]
    device = _device(model)
    lengths = torch.tensor([len(r) for r in rows], device=device)  # (B,)
    n = int(lengths.max())
    new = torch.tensor([r + [0] * (n - len(r)) for r in rows], dtype=torch.long, device=device)  # (B, n)
    prompt = torch.as_tensor(prompt, dtype=torch.long, device=device)
    check_decoder_ids(model, prompt[None], "prompt")
    check_decoder_ids(model, new, "continuations")
    check_fits(model, prompt.numel(), n, None)
    cache, first = _prefill_once(model, prompt, len(rows))  # (B, V): predicts each row's token 0
    rest = [model(new[:, :-1], cache=cache).float()] if n > 1 else []  # (B, n - 1, V): tokens 1 .. n-1
    logp = torch.cat([first[:, None], *rest], dim=1).log_softmax(-1)  # (B, n, V)
    picked = logp.gather(-1, new[..., None])[..., 0]  # (B, n)
    counted = torch.arange(n, device=device)[None] < lengths[:, None]  # (B, n)
    return picked.masked_fill(~counted, 0.0).sum(-1), lengths


@torch.no_grad()
def beam_search(model, prompt, num_beams: int, max_new_tokens: int, eos_id: int | None = None,
                length_penalty: float = 1.0) -> tuple[list[int], float]:
    """Beam search with the KV cache; returns ``(best new ids, its score)``, score = sum of
    log-probs / (new length ** length_penalty). Finished beams (ending in ``eos_id``) leave the beam.

    The search stops once ``num_beams`` beams have finished and the best of them scores at least
    the best live beam. With ``length_penalty=0`` that is exact (a live beam's sum of log-probs
    can only fall); with a positive penalty a longer beam's normalized score can still rise, so
    the stop is a heuristic, like ``transformers``' default ``early_stopping=False``."""
    check_int("num_beams", num_beams)
    check_int("max_new_tokens", max_new_tokens)
    check_number("length_penalty", length_penalty)
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    check_prompt_ids(prompt, name="prompt")
    device = _device(model)
    prompt = torch.as_tensor(prompt, dtype=torch.long, device=device)[None]  # (1, L)
    check_decoder_ids(model, prompt, "prompt")
    check_fits(model, prompt.shape[1], max_new_tokens, None)
    cache = model.new_cache()
    log_probs = model(prompt, cache=cache)[:, -1].log_softmax(-1)  # (1, V)
    beams: list[list[int]] = [[]]
    scores = torch.zeros(1, device=device)  # (K,) sum of log-probs per live beam
    finished: list[tuple[float, list[int]]] = []

    def normalized(total: float, length: int) -> float:
        return total / (max(length, 1) ** length_penalty)

    for step in range(max_new_tokens):
        V = log_probs.shape[-1]
        total = (scores[:, None] + log_probs).reshape(-1)  # (K * V,) every one-token extension
        top_scores, top_index = total.topk(min(2 * num_beams, total.numel()))
        next_beams, next_scores, parents = [], [], []
        for s, i in zip(top_scores.tolist(), top_index.tolist()):
            parent, token = divmod(i, V)
            seq = beams[parent] + [token]
            if eos_id is not None and token == eos_id:
                finished.append((normalized(s, len(seq)), seq))
            else:
                next_beams.append(seq), next_scores.append(s), parents.append(parent)
            if len(next_beams) == num_beams:
                break
        best_alive = max(normalized(s, len(b)) for s, b in zip(next_scores, next_beams)) if next_beams else -math.inf
        if not next_beams or step == max_new_tokens - 1 or (
                len(finished) >= num_beams and max(f[0] for f in finished) >= best_alive):
            break
        cache.reorder(torch.tensor(parents, device=device))  # each beam keeps its parent's past
        beams, scores = next_beams, torch.tensor(next_scores, device=device)
        last = torch.tensor([[b[-1]] for b in beams], device=device)  # (K, 1)
        log_probs = model(last, cache=cache)[:, -1].log_softmax(-1)  # (K, V)
    candidates = finished + [(normalized(s, len(b)), b) for s, b in zip(next_scores, next_beams)]
    best = max(candidates, key=lambda c: c[0])
    return best[1], best[0]
