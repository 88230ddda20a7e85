"""Drafts for speculative decoding (chapter 29): what proposes the k tokens the target verifies.

* :class:`PromptLookup`: no model; the tokens that followed the text's last n-gram where it occurred
  earlier (prompt lookup decoding), proposed as point masses.
* :class:`ModelDraft`: a smaller or cheaper decoder with the target's vocabulary and its own KV cache,
  such as a quantized copy of the target (chapter 19) or a :func:`shallow_exit` of it.

Every draft answers ``propose(tokens, k, ...) -> (drafts (k',), q (k', V) or None)``, which
:func:`~transformer_lib.speculative.speculative_generate` calls once per round.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from ._checks import check_int
from ._checks.speculative import check_ngram_sizes, check_shallow_exit
from .logit_filters import draw_token, next_token_probs
from .model import DecoderOnlyLM

__all__ = ["PromptLookup", "ModelDraft", "shallow_exit"]


class PromptLookup:
    """Prompt lookup decoding: find the latest earlier place where the text's last ``n`` tokens
    occurred (``n`` from ``max_ngram`` down to ``min_ngram``) and propose the up-to-k tokens that
    followed them there. No model, so no cost beyond a search, and a point mass as q (it is
    deterministic). It proposes nothing when no n-gram recurs; the step is then an ordinary one.

    A proposal is not free: the target's pass over it costs more than its one-token step, so a
    proposal the target rejects at once makes that token dearer than ordinary decoding. Two rules
    keep it from proposing where that is likely (the defaults keep neither: every match proposes):

    * ``min_ngram``: the shortest match that proposes. A match of one token (a common word seen
      before) predicts the next token badly outside a copied text; two or three tokens much better.
    * ``max_misses``: after that many proposals in a row of which the target kept nothing, propose
      only from matches of ``max_ngram`` tokens, until a proposal has a token kept (then back to
      ``min_ngram``). None: never back off. The draft learns what was kept from the text it is
      given next (its own last proposal against what followed), so one instance follows one text
      at a time; a text that does not continue the last one starts afresh.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, max_misses: int | None = None):
        check_ngram_sizes(max_ngram, min_ngram)
        if max_misses is not None:
            check_int("max_misses", max_misses, 1)
        self.max_ngram, self.min_ngram, self.max_misses = max_ngram, min_ngram, max_misses
        self.misses = 0  # proposals in a row of which nothing was kept
        self._last = None  # (the text it was given, its proposal) at the last call

    def _learn(self, tokens: torch.Tensor) -> None:
        """Count the last proposal as a miss (nothing kept) or a hit, from the text that followed it."""
        if self._last is None:
            return
        text, proposal = self._last
        L = text.numel()
        if tokens.numel() <= L or not torch.equal(tokens[:L], text):  # another text: start afresh
            self.misses = 0
        elif proposal.numel():
            self.misses = 0 if int(tokens[L]) == int(proposal[0]) else self.misses + 1

    def propose(self, tokens: torch.Tensor, k: int, generator=None, temperature: float = 0.0,
                top_k=None, top_p=None) -> tuple[torch.Tensor, None]:
        """``tokens`` (L,) the text so far -> (up to k ids, None)."""
        if self.max_misses is not None:
            self._learn(tokens)
        shortest = self.max_ngram if self.max_misses is not None and self.misses >= self.max_misses else self.min_ngram
        proposal = self.lookup(tokens, k, shortest)
        if self.max_misses is not None:
            self._last = (tokens.clone(), proposal)
        return proposal, None

    def lookup(self, tokens: torch.Tensor, k: int, shortest: int | None = None) -> torch.Tensor:
        """The up-to-k ids that followed the latest earlier occurrence of the longest recurring
        suffix of ``tokens`` (L,) of ``max_ngram`` down to ``shortest`` (``min_ngram``) tokens; no
        ids when none recurs."""
        L = tokens.numel()
        shortest = self.min_ngram if shortest is None else shortest
        for n in range(min(self.max_ngram, L - 1), shortest - 1, -1):
            windows = tokens.unfold(0, n, 1)[:-1]  # (L - n, n): every earlier n-gram, the suffix left out
            starts = (windows == tokens[-n:]).all(dim=1).nonzero()[:, 0]  # where the last n tokens occurred
            if starts.numel():
                start = int(starts[-1]) + n  # the latest occurrence: what followed it
                return tokens[start:start + k].clone()
        return tokens.new_empty(0)


class ModelDraft:
    """A draft model with the target's vocabulary: it decodes k tokens with its own KV cache,
    drawing each from its distribution q under the target's strategy (greedy: its argmax). Between
    calls it keeps the tokens its cache holds, and cuts the cache back to the longest prefix the
    new text shares with them (the tokens the target rejected leave it)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.cache, self.seen = None, []  # the ids the cache holds, in order

    @torch.no_grad()
    def propose(self, tokens: torch.Tensor, k: int, generator=None, temperature: float = 0.0,
                top_k=None, top_p=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` (L,) -> (k ids, q (k, V))."""
        if k == 0:
            return tokens.new_empty(0), None
        text = tokens.tolist()
        if self.cache is None:
            self.cache = self.model.new_cache()
        keep = 0
        while keep < min(len(self.seen), len(text) - 1) and self.seen[keep] == text[keep]:
            keep += 1
        self.cache.truncate(min(keep, self.cache.length))  # what the cache holds of this text
        keep = self.cache.length
        logits = self.model(tokens[keep:][None], cache=self.cache)[0, -1]  # (V,): the unseen tail, then next
        drafts, qs = [], []
        for i in range(k):
            q = next_token_probs(logits.float(), temperature, top_k, top_p)  # (V,)
            drafts.append(draw_token(q, generator))
            qs.append(q)
            if i < k - 1:
                logits = self.model(torch.tensor([[drafts[-1]]], device=tokens.device), cache=self.cache)[0, -1]
        self.seen = text + drafts[:-1]  # the last draft was never fed
        return torch.tensor(drafts, device=tokens.device), torch.stack(qs)  # (k,), (k, V)


def shallow_exit(model: DecoderOnlyLM, num_layers: int) -> DecoderOnlyLM:
    """The first ``num_layers`` blocks of ``model`` with its final norm and head: a
    :class:`~transformer_lib.model.DecoderOnlyLM` that shares the target's modules (no weight is
    copied), a draft whose cost is about ``num_layers / depth`` of the blocks plus the head.
    Untrained for this: an early block's residual stream read through the final head is a poor guess
    (chapter 24's logit lens), which is what its acceptance rate measures. Its one-token steps run
    its modules: the fused quantized step (chapter 19) would fuse the shared layers' rows anew."""
    n = check_shallow_exit(model, num_layers)
    with torch.device("meta"):  # the structure only: every module is replaced by the target's below
        draft = DecoderOnlyLM(dataclasses.replace(model.config, num_layers=n))
    draft.embed, draft.pos, draft.norm, draft.head = model.embed, model.pos, model.norm, model.head
    draft.blocks = nn.ModuleList(list(model.blocks[:n]))
    return draft.train(model.training)
