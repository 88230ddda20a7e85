"""Answers for the checkers of transformer_lib/exercises/ch04_masking.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch

from transformer_lib.masks import causal_mask, combine_masks, padding_mask
from transformer_lib.tasks import shift_right


def _decoder_mask(lengths, max_len):
    return combine_masks(causal_mask(max_len), padding_mask(lengths, max_len))  # (B, 1, L, L)


def _shift_by_assignment(y, bos):
    """A right answer: fill a new tensor column by column."""
    out = torch.empty_like(y)  # (B, L)
    out[:, 0] = bos
    out[:, 1:] = y[:, :-1]
    return out


ANSWERS = {
    'masking.causal_mask': {
        'solution': lambda: causal_mask,
        'alternatives': lambda: [
            lambda L: [[j <= i for j in range(L)] for i in range(L)],  # nested lists of booleans
            lambda L: np.tril(np.ones((L, L), dtype=bool)),  # NumPy
        ],
        'wrong': lambda: [
            lambda L: torch.ones(L, L, dtype=torch.bool),  # no mask at all
            lambda L: torch.ones(L, L, dtype=torch.bool).triu(),  # sees the future, not the past
            lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1),  # forgets the diagonal
            lambda L: torch.ones(L, L).tril(),  # float 0/1 instead of boolean
            lambda L: torch.ones(L, L, dtype=torch.bool).tril(1),  # also sees the next token
            lambda L: ~torch.ones(L, L, dtype=torch.bool).tril(),  # True = blocked (nn.Transformer's meaning)
        ],
    },
    'masking.padding_mask': {
        'solution': lambda: padding_mask,
        'alternatives': lambda: [
            lambda lengths, L: torch.tensor([[[[j < n for j in range(L)]]] for n in lengths.tolist()]),  # loops
            lambda lengths, L: (np.arange(L) < lengths.numpy()[:, None]).reshape(len(lengths), 1, 1, L),  # NumPy
        ],
        'wrong': lambda: [
            lambda lengths, L: (torch.arange(L)[None, :] <= lengths[:, None])[:, None, None, :],  # one too many
            lambda lengths, L: torch.arange(L)[None, :] < lengths[:, None],  # (B, L): does not broadcast
            lambda lengths, L: (torch.arange(L)[None, :] >= lengths[:, None])[:, None, None, :],  # torch's meaning
            lambda lengths, L: (torch.arange(L)[None, :] < lengths[:, None])[:, None, :, None],  # masks queries
            lambda lengths, L: (torch.arange(1, L + 1)[None, :] < lengths[:, None])[:, None, None, :],  # one too few
        ],
    },
    'masking.decoder_mask': {
        'solution': lambda: _decoder_mask,
        'alternatives': lambda: [
            lambda lengths, L: ((torch.arange(L)[None, :] <= torch.arange(L)[:, None])  # (L, L) causal
                                & (torch.arange(L) < lengths[:, None])[:, None, None, :]),  # (B, 1, 1, L)
            lambda lengths, L: np.logical_and(np.tril(np.ones((L, L), dtype=bool)),
                                              (np.arange(L) < lengths.numpy()[:, None])[:, None, None, :]),
        ],
        'wrong': lambda: [
            lambda lengths, L: causal_mask(L) | padding_mask(lengths, L),  # OR lets pads or the future in
            lambda lengths, L: padding_mask(lengths, L).expand(len(lengths), 1, L, L),  # forgets causality
            lambda lengths, L: causal_mask(L).expand(len(lengths), 1, L, L),  # forgets the padding
            lambda lengths, L: causal_mask(L) & padding_mask(lengths, L).transpose(-2, -1),  # pads the queries
            lambda lengths, L: torch.ones(L, L, dtype=torch.bool).tril(-1) & padding_mask(lengths, L),  # no diagonal
        ],
    },
    'masking.shift_right': {
        'solution': lambda: shift_right,
        'alternatives': lambda: [
            _shift_by_assignment,
            lambda y, bos: np.pad(y.numpy(), ((0, 0), (1, 0)), constant_values=bos)[:, :-1],  # NumPy
        ],
        'wrong': lambda: [
            lambda y, bos: y.clone(),  # no shift: the model would copy its own answer
            lambda y, bos: y.roll(1, dims=1),  # wraps the last target around to the front
            lambda y, bos: torch.cat([y[:, 1:], torch.full_like(y[:, :1], bos)], dim=1),  # shifted left
            lambda y, bos: torch.cat([torch.full_like(y[:, :1], bos), y], dim=1),  # keeps the last token: too long
            lambda y, bos: torch.cat([torch.full_like(y[:, :1], bos), y[:, 1:]], dim=1),  # drops the first token
        ],
    },
}
