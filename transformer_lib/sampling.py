"""From logits to text: decoding strategies for a language model (chapter 17).

A decoder gives, at each step, logits z over the vocabulary; softmax(z) is its next-token
distribution. A decoding strategy turns that into one token:

* greedy: ``argmax z`` (temperature 0). Deterministic, often repetitive.
* temperature T: softmax(z / T). T < 1 sharpens the distribution toward greedy, T > 1 flattens it.
* top-k: keep the k most likely tokens, renormalize.
* top-p (nucleus, Holtzman et al. 2020): keep the *smallest* set of most likely tokens whose
  probabilities add up to at least p, renormalize. Adapts to how peaked the distribution is.
* repetition penalty (Keskar et al. 2019, CTRL, divided every repeated logit, which *raises* a
  negative one; the sign-aware form used here and in Hugging Face's ``transformers`` divides a
  positive logit and multiplies a negative one), making repeats less likely.
* beam search: keep the ``num_beams`` most likely partial continuations (sum of log-probs),
  extend each by every token, keep the best again; returns the best finished one.

Filters return logits with removed tokens at ``-inf``; they work on (V,) or (B, V).
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

from ._checks import (check_id_list, check_int, check_logits, check_prompt_ids, check_number, check_token_ids)

__all__ = ["apply_temperature", "top_k_filter", "top_p_filter", "apply_repetition_penalty",
           "next_token_probs", "sample_next", "generate", "generate_ids", "generate_each",
           "continuation_log_probs", "beam_search"]


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """z / T (T > 0). Use greedy (argmax) for T = 0."""
    check_logits(logits)
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0:
        raise ValueError("temperature must be > 0 here (0 means greedy: take the argmax), got 0")
    check_number("temperature", temperature, 0, low_open=True)
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits per row (ties with the k-th are kept), others -> -inf."""
    check_logits(logits)
    check_int("top_k", k)
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens with total probability >= p, others -> -inf.

    Sort descending (among ties the lower id first, as argmax); token i in sorted order is kept
    when the mass *before* it is < p: the shortest prefix whose mass reaches p (the top token
    always). The running sum is taken in float64: in float32 it saturates below 1 after a few
    thousand small probabilities, and p = 1 would then drop tokens; p = 1 keeps every token."""
    check_logits(logits)
    check_number("top_p", p, 0, 1, low_open=True)
    if p == 1:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)  # (..., V); ties: lower id first
    probs = sorted_logits.double().softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (..., V): mass of the tokens ranked above
    keep_sorted = mass_before < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
    return logits.masked_fill(~keep, float("-inf"))


def apply_repetition_penalty(logits: torch.Tensor, previous_ids, penalty: float) -> torch.Tensor:
    """The sign-aware repetition penalty on the tokens in ``previous_ids`` (1-D ids, for a (V,) row
    or every row): positive logits are divided by ``penalty``, negative ones multiplied (CTRL's
    original divided both). ``penalty=1`` is a no-op."""
    check_logits(logits)
    check_number("repetition_penalty", penalty, 0, low_open=True)
    ids = check_id_list("previous_ids", previous_ids, logits.shape[-1]).to(logits.device).unique()
    if penalty == 1 or ids.numel() == 0:
        return logits
    seen = logits[..., ids]
    out = logits.clone()
    out[..., ids] = torch.where(seen > 0, seen / penalty, seen * penalty)
    return out


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None, repetition_penalty: float = 1.0, previous_ids=()) -> torch.Tensor:
    """The distribution a strategy samples from (what chapter 17 plots). ``temperature=0``: a
    one-hot vector on the argmax (greedy)."""
    check_logits(logits)
    check_number("temperature", temperature, 0)
    logits = apply_repetition_penalty(logits, previous_ids, repetition_penalty)
    if temperature == 0:
        return torch.zeros_like(logits).scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None,
                repetition_penalty: float = 1.0, previous_ids=()) -> torch.Tensor:
    """One token per row: (V,) -> () or (B, V) -> (B,). Greedy when ``temperature == 0``."""
    probs = next_token_probs(logits, temperature, top_k, top_p, repetition_penalty, previous_ids)
    if temperature == 0:
        return probs.argmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])  # (B, V)
    if generator is not None and generator.device != flat.device:  # draw where the generator lives
        return torch.multinomial(flat.to(generator.device), 1, generator=generator).to(flat.device).reshape(
            probs.shape[:-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def _generator(seed: int | None, generator: torch.Generator | None, device) -> torch.Generator | None:
    if seed is not None and generator is not None:
        raise ValueError("pass seed or generator, not both")
    if seed is None:
        return generator
    check_int("seed", seed, 0)
    return torch.Generator(device=device).manual_seed(seed)


def _check_strategy(temperature, top_k, top_p, repetition_penalty) -> None:
    check_number("temperature", temperature, 0)
    check_number("repetition_penalty", repetition_penalty, 0, low_open=True)
    if top_k is not None:
        check_int("top_k", top_k)
    if top_p is not None:
        check_number("top_p", top_p, 0, 1, low_open=True)


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _check_ids(model, tokens: torch.Tensor, name: str) -> None:
    """``tokens`` (B, L) must be ids of ``model``'s vocabulary (the rows of its token table
    ``embed``); for a decoder without one, at least non-negative."""
    table = getattr(model, "embed", None)
    if isinstance(table, torch.nn.Embedding):
        check_token_ids(tokens, table.num_embeddings, name)
        return
    check_token_ids(tokens, torch.iinfo(torch.long).max, name)  # dtype and shape
    if tokens.numel() and int(tokens.min()) < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {int(tokens.min())}")


def _check_fits(model, length: int, max_new_tokens: int, context: int | None) -> None:
    """Refuse, before the first forward pass, a generation that would read past a position table:
    a learned or sinusoidal table (``model.pos.max_len``) has no row for a later position. The
    model reads the prompt and every new token but the last: ``length + max_new_tokens - 1``
    positions. A ``context`` window (at most the table) slides instead."""
    table = getattr(getattr(model, "pos", None), "max_len", None)
    if table is None:
        return
    if context is not None:
        check_int("context", context, 1, table)
    elif length + max_new_tokens - 1 > table:
        raise ValueError(f"a prompt of {length} tokens and max_new_tokens = {max_new_tokens} need "
                         f"{length + max_new_tokens - 1} positions, past the model's context of {table} "
                         f"(its position table): shorten the prompt, lower max_new_tokens, or pass "
                         f"context={table} to slide a window over the last {table} tokens")


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
    _check_ids(model, tokens, "tokens")
    check_int("max_new_tokens", max_new_tokens, 0)
    _check_strategy(temperature, top_k, top_p, repetition_penalty)  # before any forward pass
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    if context is not None:
        check_int("context", context)
    if tokens.shape[1] == 0:
        raise ValueError("tokens must hold at least one token per row (the prompt)")
    _check_fits(model, tokens.shape[1], max_new_tokens, context)
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
    _check_ids(model, ids, "prompt")
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
    if isinstance(strategies, dict) or not list(strategies):
        raise ValueError("strategies must be a non-empty list of dicts of generate_ids' keywords")
    strategies = [dict(s) for s in strategies]
    for s in strategies:
        unknown = set(s) - set(STRATEGY_KEYS)
        if unknown:
            raise ValueError(f"strategies: unknown keyword(s) {sorted(unknown)}; expected some of {STRATEGY_KEYS}")
        s.setdefault("temperature", 0.0)
        s.setdefault("repetition_penalty", 1.0)
        _check_strategy(s["temperature"], s.get("top_k"), s.get("top_p"), s["repetition_penalty"])
    device = _device(model)
    prompt = torch.as_tensor(prompt, dtype=torch.long, device=device)
    _check_ids(model, prompt[None], "prompt")
    _check_fits(model, prompt.numel(), max_new_tokens, None)
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
    rows = continuations.tolist() if isinstance(continuations, torch.Tensor) else [list(c) for c in continuations]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("continuations must hold at least one non-empty continuation")
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
        rows = [r[:r.index(eos_id) + 1] if eos_id in r else r for r in rows]
    device = _device(model)
    lengths = torch.tensor([len(r) for r in rows], device=device)  # (B,)
    n = int(lengths.max())
    new = torch.tensor([r + [0] * (n - len(r)) for r in rows], dtype=torch.long, device=device)  # (B, n)
    prompt = torch.as_tensor(prompt, dtype=torch.long, device=device)
    _check_ids(model, prompt[None], "prompt")
    _check_ids(model, new, "continuations")
    _check_fits(model, prompt.numel(), n, None)
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
    _check_ids(model, prompt, "prompt")
    _check_fits(model, prompt.shape[1], max_new_tokens, None)
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
