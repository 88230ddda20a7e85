"""Head scores: turn a head's (L, L) weight map into one number, so that all heads can be ranked
instead of hand-picked (chapters 2, 3, 14). A head that spreads its weight evenly scores about
1/L on each. The induction chapter's scores (previous token, prefix matching, copying) build on
:func:`diagonal_score` in :mod:`transformer_lib.induction`.
"""
from __future__ import annotations

import torch

from .._checks import check_int, check_lookup_maps, check_square_maps
from ..tasks import LOOKUP_TASKS, answer_keys

__all__ = ["head_scores", "diagonal_score", "column_score", "head_pattern_scores"]



def head_scores(weights: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """How much each head looks at each lookup task's answer (chapter 3): ``{task: (H,)}``.

    The score is the attention weight a head puts on the answer keys of :func:`answer_keys`,
    averaged over queries ``t >= 1`` and the batch (at t = 0 a causal head can only look at key 0,
    which would flatter every head). A head that does one lookup perfectly scores 1.0 on it.
    """
    check_lookup_maps(weights, tokens)
    keys = answer_keys(tokens)
    return {task: (weights * keys[task][:, None].to(weights.dtype)).sum(-1)[:, :, 1:].mean(dim=(0, 2))
            for task in LOOKUP_TASKS}  # (B, H, L_q) -> (H,)


def diagonal_score(weights: torch.Tensor, offset: int = -1) -> torch.Tensor:
    """Mean weight on the diagonal ``j = i + offset``: (..., L, L) -> (...).

    ``offset=-1`` scores a previous-token head (query i looks at key i-1), ``+1`` a next-token
    head, ``0`` a head that looks at itself. The mean runs over the L - |offset| queries that
    have such a key.
    """
    L = check_square_maps(weights)
    check_int("offset", offset, 1 - L, L - 1)
    return torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1).mean(dim=-1)  # (..., L - |offset|) -> (...)


def column_score(weights: torch.Tensor, key: int) -> torch.Tensor:
    """Mean weight that all queries put on one key position: (..., L, L) -> (...).

    ``key=0`` measures attention to [CLS], ``key=-1`` to the final [SEP].
    """
    L = check_square_maps(weights)
    check_int("key", key, -L, L - 1)
    return weights[..., :, key].mean(dim=-1)  # (..., L_q) -> (...)


def head_pattern_scores(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every named score of :func:`diagonal_score` / :func:`column_score` for (..., L, L) maps."""
    return {"previous token": diagonal_score(weights, -1), "next token": diagonal_score(weights, 1),
            "same token": diagonal_score(weights, 0), "[CLS]": column_score(weights, 0),
            "[SEP]": column_score(weights, -1)}


