"""Speculative decoding (speculative): distributions, drafts, a draft's proposal and the formulas'
arguments."""
from __future__ import annotations

import torch

from .scalars import check_int, check_number


def check_distribution_rows(name: str, probs, rows: int | None = None, vocab: int | None = None) -> None:
    """``probs`` (rows, V) or (V,): finite, non-negative floats, each row summing to one (to 1e-4:
    a float32 softmax over 49,152 tokens sums to 1 within about 1e-6)."""
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of probabilities, got {type(probs).__name__}")
    if not probs.dtype.is_floating_point or probs.dim() not in (1, 2) or probs.shape[-1] == 0:
        raise ValueError(f"{name} must be a float tensor (V,) or (rows, V) of probabilities, got "
                         f"{probs.dtype} {tuple(probs.shape)}")
    if rows is not None and (probs.dim() != 2 or probs.shape[0] != rows):
        raise ValueError(f"{name} must have {rows} rows (V,) each, got {tuple(probs.shape)}")
    if vocab is not None and probs.shape[-1] != vocab:
        raise ValueError(f"{name} must be over the same {vocab} tokens, got {probs.shape[-1]}")
    sums = probs.double().sum(-1)  # (rows,) or (): finite exactly when every entry is (no overflow in float64)
    if not bool(torch.isfinite(sums).all()) or bool((probs < 0).any()):
        raise ValueError(f"{name} must be finite and non-negative (probabilities)")
    if bool(((sums - 1).abs() > 1e-4).any()):
        raise ValueError(f"{name}: every row must sum to 1, got sums {sums.tolist()}")


def check_verify_args(p, q, drafts) -> None:
    """``drafts`` k token ids (1-D integer tensor), ``p`` (k + 1, V) the target's distributions at
    the k drafted positions and the one after, ``q`` (k, V) the draft's or None (point masses on
    the drafts: a deterministic draft)."""
    if not isinstance(drafts, torch.Tensor) or drafts.dim() != 1 or drafts.dtype.is_floating_point \
            or drafts.dtype == torch.bool:
        raise ValueError(f"drafts must be a 1-D integer tensor of token ids, got {drafts!r}")
    k = drafts.numel()
    check_distribution_rows("p", p, rows=k + 1)
    V = p.shape[-1]
    if k and (int(drafts.min()) < 0 or int(drafts.max()) >= V):
        raise ValueError(f"drafts must be ids in [0, {V}), got {drafts.tolist()}")
    if q is not None:
        check_distribution_rows("q", q, rows=k, vocab=V)
        if k and (q[torch.arange(k), drafts] <= 0).any():
            raise ValueError("q must give every drafted token a probability > 0 (the draft sampled it from q)")


def check_residual_args(p, q) -> None:
    """Two distributions over the same tokens, (V,) or (rows, V) each, of one shape."""
    check_distribution_rows("p", p)
    check_distribution_rows("q", q)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have one shape, got {tuple(p.shape)} and {tuple(q.shape)}")


def check_draft(draft) -> None:
    """A draft has ``propose(tokens, k, generator) -> (drafts (k',), q (k', V) or None)``."""
    if not callable(getattr(draft, "propose", None)):
        raise TypeError(f"draft must have a propose(tokens, k, generator) method (PromptLookup, ModelDraft), "
                        f"got {type(draft).__name__}")


def check_proposal(drafts, q, k: int, vocab: int) -> None:
    """What a draft's ``propose`` returned: at most ``k`` ids of the vocabulary, and q (k', V) or None."""
    if not isinstance(drafts, torch.Tensor) or drafts.dim() != 1 or drafts.numel() > k:
        raise ValueError(f"a draft must propose a 1-D tensor of at most k = {k} ids, got {drafts!r}")
    if drafts.numel() and (int(drafts.min()) < 0 or int(drafts.max()) >= vocab):
        raise ValueError(f"a draft proposed ids outside the target's vocabulary [0, {vocab}): {drafts.tolist()}")
    if q is not None:
        check_distribution_rows("the draft's q", q, rows=drafts.numel(), vocab=vocab)


def check_one_row(tokens) -> None:
    """Speculative decoding here runs one sequence: ``tokens`` (1, L), L >= 1 (rows of a batch would
    accept different numbers of tokens and their caches part ways)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[0] != 1 or tokens.shape[1] == 0:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be one row (1, L) with L >= 1 (speculative decoding runs one sequence), "
                         f"got {shape}")


def check_same_vocabulary(target, draft_model) -> None:
    """A draft model must speak the target's vocabulary: the same number of rows in ``embed``."""
    a, b = getattr(target, "embed", None), getattr(draft_model, "embed", None)
    if a is not None and b is not None and a.num_embeddings != b.num_embeddings:
        raise ValueError(f"the draft's vocabulary ({b.num_embeddings} tokens) must be the target's "
                         f"({a.num_embeddings}): q and p are compared token by token")


def check_ngram_sizes(max_ngram, min_ngram) -> None:
    """``1 <= min_ngram <= max_ngram``."""
    check_int("max_ngram", max_ngram)
    check_int("min_ngram", min_ngram, 1, max_ngram)


def check_shallow_exit(model, num_layers) -> int:
    """A decoder with ``blocks``, ``norm`` and ``head`` and ``num_layers`` in [1, its depth]."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or getattr(model, "head", None) is None or getattr(model, "config", None) is None:
        raise TypeError(f"model must be a DecoderOnlyLM (blocks, norm, head, config), got {type(model).__name__}")
    return check_int("num_layers", num_layers, 1, len(blocks))


def check_rates(alpha, k, cost_ratio=0.0, verify_cost=1.0) -> None:
    """``alpha`` an acceptance probability in [0, 1], ``k`` >= 0 drafted tokens, the draft's
    ``cost_ratio`` >= 0 and a verification's ``verify_cost`` > 0 (both in target steps)."""
    check_number("alpha", alpha, 0, 1)
    check_int("k", k, 0)
    check_number("cost_ratio", cost_ratio, 0)
    check_number("verify_cost", verify_cost, 0, low_open=True)
