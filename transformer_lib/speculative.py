"""Speculative decoding, exact (chapter 29): a cheap draft guesses k tokens, the model checks them in one pass.

A decoding step of a small batch reads every weight of the model once and does little arithmetic
with each (chapter 19: it is bound by memory), so a forward pass over k + 1 tokens costs not much
more than over one. Speculative decoding (Leviathan et al. 2023; Chen et al. 2023) spends that
slack: a *draft* proposes k tokens, the *target* runs once over them with its KV cache, and the
longest prefix the target agrees with is kept, plus one token of the target's own. What comes out
is distributed exactly as the target's own generation:

* the rule (:func:`verify`): draft token x, drawn from the draft's distribution q, is kept with
  probability min(1, p(x) / q(x)), p the target's; at the first rejection the token is drawn from
  the residual norm(max(0, p - q)) (:func:`residual_distribution`) and the rest is dropped; after k
  acceptances a bonus token comes from the target's next distribution. Each position's token is
  then distributed as p: P(x) = min(p(x), q(x)) + (1 - sum_y min(p(y), q(y))) * residual(x) = p(x).
* greedy is the same rule with point masses: p is the one-hot of the target's argmax, so a draft
  token is kept iff it is the argmax, and the first disagreement is replaced by the argmax. The ids
  are :func:`~transformer_lib.sampling.generate`'s unless two candidates nearly tie: the target's
  logits over k + 1 tokens in one pass equal one-at-a-time's only to float32 rounding (the two
  sums run in another order), so a top-two gap within that rounding can flip the argmax
  (Chen et al. 2023: equal "within hardware numerics"; chapter 29 prints both sizes).

A draft is anything with ``propose(tokens, k, generator=None, temperature=0.0, top_k=None,
top_p=None) -> (drafts (k',) ids, q (k', V) or None)``, k' <= k (None: point masses on the drafts,
a deterministic draft). The library's two, in :mod:`transformer_lib.drafts` and re-exported here:

* :class:`PromptLookup` (prompt lookup decoding, Saxena 2023): the tokens that followed the latest
  earlier occurrence of the text's last n-gram. Free to run, and often right where an answer copies
  its prompt (summaries, edits, quotes) or a greedy model repeats itself; silent elsewhere. Its
  ``min_ngram`` and ``max_misses`` keep it from proposing where it is rarely right (a one-token
  match; after proposals the target rejected), since every proposal costs a pass over it.
* :class:`ModelDraft`: a smaller decoder with the same vocabulary and its own KV cache, such as a
  :func:`shallow_exit` of the target (its first blocks, its final norm and head: no new weights)
  or a quantized copy of the target (chapter 19).

On a CPU a pass over a few tokens through torch's default float32 kernel costs nearly two
one-token steps; ``speculative_generate(..., pack_linears=...)`` runs the target's linear layers
through :mod:`~transformer_lib.serving.packed_linear` (a kernel that reads each weight once for up
to 8 rows, oneDNN-packed weights beyond), where a pass over a few tokens costs little more than one
token's.

Rejected tokens leave both caches by :meth:`~transformer_lib.kv_cache.KVCache.truncate`: the
buffers stay, and the next pass overwrites the rejected positions.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn as nn

from ._checks import check_int
from ._checks.sampling import check_decoder_ids, check_fits, check_seed, check_strategy
from ._checks.speculative import (check_draft, check_one_row, check_proposal, check_rates, check_residual_args,
                                  check_same_vocabulary, check_verify_args)
from .drafts import ModelDraft, PromptLookup, shallow_exit  # noqa: F401 - the drafts, re-exported
from .logit_filters import draw_token, next_token_probs

__all__ = ["residual_distribution", "acceptance_probability", "verify", "PromptLookup", "ModelDraft",
           "shallow_exit", "speculative_generate", "Speculation", "expected_tokens", "expected_speedup"]


# -- the rule -----------------------------------------------------------------------------------

def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last dimension: where the target wants more mass than the draft
    gave. (V,) or (rows, V). A row with p = q has no residual (a draft token is then always kept,
    so it is never drawn from): p is returned for it."""
    check_residual_args(p, q)
    excess = (p - q).clamp(min=0)  # (..., V)
    total = excess.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(total > 0, excess / total.clamp(min=torch.finfo(p.dtype).tiny), p)


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The chance a draft token x ~ q is kept: sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)),
    one minus the total variation distance between p and q (Leviathan et al.'s beta). (V,) -> (),
    (rows, V) -> (rows,)."""
    check_residual_args(p, q)
    return torch.minimum(p, q).sum(-1)


def verify(p: torch.Tensor, q: torch.Tensor | None, drafts: torch.Tensor,
           generator: torch.Generator | None = None) -> tuple[int, int]:
    """The accept/reject rule on k drafted tokens: returns ``(m, token)``, the number of drafts kept
    (the first m) and the token that follows them (drawn from the residual at the first rejection,
    or from ``p[k]`` when all k are kept).

    ``p`` (k + 1, V): the target's distributions at the drafted positions and the one after them;
    ``q`` (k, V): the draft's distributions the drafts were drawn from, or None for a deterministic
    draft (point masses: q(x) = 1 for the drafted x). Draft i is kept with probability
    min(1, p_i(x) / q_i(x)): always when p_i(x) >= q_i(x), else after one uniform draw."""
    check_verify_args(p, q, drafts)
    for i, x in enumerate(drafts.tolist()):
        p_x, q_x = float(p[i, x]), (1.0 if q is None else float(q[i, x]))
        if p_x >= q_x or (p_x > 0 and float(torch.rand((), generator=generator)) * q_x < p_x):
            continue  # kept (a point mass p, greedy, decides without a draw)
        if q is None:
            q_i = torch.zeros_like(p[i])
            q_i[x] = 1.0  # (V,): the deterministic draft's point mass
        else:
            q_i = q[i]
        return i, draw_token(residual_distribution(p[i], q_i), generator)
    return drafts.numel(), draw_token(p[-1], generator)


# -- the loop -----------------------------------------------------------------------------------

@dataclass
class Speculation:
    """What :func:`speculative_generate` returns: ``tokens`` (1, L + n), the prompt (its first
    ``prompt_length`` ids) and the new ids; ``proposed`` draft tokens offered, ``accepted`` of them
    kept, ``target_calls`` forward passes of the target (the first reads the prompt too)."""
    tokens: torch.Tensor
    prompt_length: int
    proposed: int
    accepted: int
    target_calls: int

    @property
    def new_ids(self) -> list[int]:
        return self.tokens[0, self.prompt_length:].tolist()

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens (0 when none were proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_call(self) -> float:
        """New tokens per forward pass of the target (1.0: ordinary decoding)."""
        return (self.tokens.shape[1] - self.prompt_length) / self.target_calls if self.target_calls else 0.0


@torch.no_grad()
def speculative_generate(target: nn.Module, draft, tokens: torch.Tensor, max_new_tokens: int, k: int = 4,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, generator: torch.Generator | None = None,
                         eos_id: int | None = None, pack_linears=False) -> Speculation:
    """Extend one row ``tokens`` (1, L) by up to ``max_new_tokens`` target tokens, ``k`` drafted per
    target pass. Greedy (``temperature=0``) gives the ids of ``sampling.generate(target, tokens,
    max_new_tokens, eos_id=eos_id)``; with sampling (temperature, top_k, top_p as in ``generate``)
    every token is distributed as the target's (draws on the CPU: ``seed``, or a CPU ``generator``).

    Each round: the draft proposes k' <= k tokens; the target reads the tokens its cache lacks (the
    whole prompt in the first round, else the last kept token) and the drafts, in one pass, giving
    its distributions at each drafted position and the one after; :func:`verify` keeps m drafts and
    adds one token; the cache is cut back to the kept text. Stops after ``max_new_tokens`` or at
    ``eos_id`` (kept).

    ``pack_linears``: the target's float32 linear layers run inside
    :class:`~transformer_lib.serving.packed_linear.PackedLinears` (up to 8 rows: a kernel reading
    each weight once; more: oneDNN-packed weights): a pass over k + 1 tokens then costs close to one
    token's, where torch's default kernel costs nearly twice as much for a few rows. True packs the
    target's float32 ``nn.Linear`` weights for this call (a second copy of them, and the time to
    reorder it); a ``PackedLinears`` of the target is reused as it is (pack
    once, decode many times); False (the default) runs the modules as they are. The whole loop runs
    inside it, so a draft that shares the target's layers (:func:`shallow_exit`) runs them packed too. Quantized layers
    are left alone: their own kernel reads a few rows in one pass over the weights already, and
    one-token passes take the target's fused step, as ``generate``'s do. The ids are the same either
    way (a pass's logits differ from the default kernel's only by float32 rounding)."""
    check_draft(draft)
    check_one_row(tokens)
    check_decoder_ids(target, tokens, "tokens")
    check_int("max_new_tokens", max_new_tokens, 0)
    check_int("k", k, 0)
    check_strategy(temperature, top_k, top_p, 1.0)
    if eos_id is not None:
        check_int("eos_id", eos_id, 0)
    check_seed(seed, generator)
    check_fits(target, tokens.shape[1], max_new_tokens, None)
    packs = _target_packs(target, pack_linears)
    draft_model = getattr(draft, "model", None)
    if draft_model is not None:
        check_same_vocabulary(target, draft_model)
        check_fits(draft_model, tokens.shape[1], max_new_tokens, None)
    device = next(target.parameters()).device
    tokens = tokens.to(device)
    gen = torch.Generator(device="cpu").manual_seed(seed) if seed is not None else generator
    V = target.embed.num_embeddings
    text = tokens[0].tolist()
    cache = target.new_cache()
    proposed = accepted = calls = 0
    new = 0
    with packs:  # float32 linear layers: the few-rows kernel up to 8 rows, oneDNN beyond; quantized: the fused step
        while new < max_new_tokens:
            budget = max_new_tokens - new  # this round yields at most k' + 1 tokens
            drafts, q = draft.propose(torch.tensor(text, device=device), min(k, budget - 1), generator=gen,
                                      temperature=temperature, top_k=top_k, top_p=top_p)
            check_proposal(drafts, q, min(k, budget - 1), V)
            drafts = drafts.to(device)
            feed = torch.cat([torch.tensor(text[cache.length:], device=device), drafts])[None]  # (1, unseen + k')
            logits = target(feed, cache=cache)[0, -(drafts.numel() + 1):].float()  # (k' + 1, V)
            calls += 1
            p = next_token_probs(logits, temperature, top_k, top_p)  # (k' + 1, V); greedy: one-hot argmax
            m, token = verify(p, None if q is None else q.to(device).float(), drafts, gen)
            proposed, accepted = proposed + drafts.numel(), accepted + m
            kept = drafts[:m].tolist() + [token]
            if eos_id is not None and eos_id in kept:
                kept = kept[:kept.index(eos_id) + 1]
            text += kept
            new += len(kept)
            cache.truncate(len(text) - 1)  # the rejected drafts leave; the last kept token is read next round
            if eos_id is not None and text[-1] == eos_id:
                break
    return Speculation(torch.tensor([text], device=device), tokens.shape[1], proposed, accepted, calls)


def _target_packs(target: nn.Module, pack_linears):
    """The context the target's passes run in: a PackedLinears (given, or built from ``target``) or
    a context that changes nothing."""
    from .serving.packed_linear import PackedLinears  # the serving package only where packing is asked for
    if isinstance(pack_linears, PackedLinears):
        own = {id(m) for m in target.modules()}
        if any(id(m) not in own for m in pack_linears.modules):
            raise ValueError("pack_linears must be PackedLinears(target): it holds layers the target does not have")
        return pack_linears
    if not isinstance(pack_linears, bool):
        raise ValueError(f"pack_linears must be True, False or a PackedLinears of the target, got "
                         f"{type(pack_linears).__name__}")
    return PackedLinears(target) if pack_linears else contextlib.nullcontext()


# -- how much it gains --------------------------------------------------------------------------

def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one target pass yields when each draft token is kept with probability ``alpha``,
    independently, until the first rejection: 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)
    (k + 1 at alpha = 1)."""
    check_rates(alpha, k)
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha: float, k: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """Tokens per unit of time against ordinary decoding: ``expected_tokens(alpha, k) / (k * cost_ratio
    + verify_cost)``. ``cost_ratio``: one draft step's time over one target step's (c in Leviathan et
    al.); ``verify_cost``: the target's pass over k + 1 tokens over its one-token step (1 in their
    formula, where the pass is free up to the memory bound; measure it on your machine)."""
    check_rates(alpha, k, cost_ratio, verify_cost)
    return expected_tokens(alpha, k) / (k * cost_ratio + verify_cost)
