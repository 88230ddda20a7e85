"""Logit filters: from one step's logits to a next-token distribution and a token (chapter 17).

A decoder gives, at each step, logits z over the vocabulary; softmax(z) is its next-token
distribution. A decoding strategy reshapes it before a token is drawn:

* greedy: ``argmax z`` (temperature 0). Deterministic, often repetitive.
* temperature T: softmax(z / T). T < 1 sharpens the distribution toward greedy, T > 1 flattens it.
* top-k: keep the k most likely tokens, renormalize.
* top-p (nucleus, Holtzman et al. 2020): keep the *smallest* set of most likely tokens whose
  probabilities add up to at least p, renormalize. Adapts to how peaked the distribution is.
* repetition penalty (Keskar et al. 2019, CTRL, divided every repeated logit, which *raises* a
  negative one; the sign-aware form used here and in Hugging Face's ``transformers`` divides a
  positive logit and multiplies a negative one), making repeats less likely.

Filters return logits with removed tokens at ``-inf``; they work on (V,) or (B, V).
:func:`next_token_probs` chains them into the distribution a strategy samples from and
:func:`sample_next` draws from it; the generation loops that call them each step are in
:mod:`transformer_lib.sampling`.
"""
from __future__ import annotations

import torch

from ._checks import check_id_list, check_int, check_logits, check_number
from ._checks.sampling import check_temperature

__all__ = ["apply_temperature", "top_k_filter", "top_p_filter", "apply_repetition_penalty",
           "next_token_probs", "sample_next", "draw_token"]


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """z / T (T > 0). Use greedy (argmax) for T = 0."""
    check_logits(logits)
    check_temperature(temperature)
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


def draw_token(probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One token id from (V,) probabilities, drawn on the CPU (where a decoding loop's generator
    lives); a point mass (greedy) returns its token without touching the generator, so greedy and
    sampled runs can share one loop (speculative decoding's verification and its model drafts)."""
    top = int(probs.argmax())
    if float(probs[top]) == 1.0:
        return top
    return int(torch.multinomial(probs.float().cpu(), 1, generator=generator))
