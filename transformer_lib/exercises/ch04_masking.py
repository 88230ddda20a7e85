"""Chapter 4 exercises: causal and padding masks, combining them, and shifted-right inputs."""
import numpy as np
import torch

from ..masks import causal_mask, combine_masks, padding_mask
from ..tasks import shift_right
from ._core import compare_function, exercise


# -- causal mask --------------------------------------------------------------------------------

@exercise("masking.causal_mask", hint="compare the key index j with the query index i",
          wrong_answers=lambda: [
              lambda L: torch.ones(L, L, dtype=torch.bool),  # no mask at all
              lambda L: torch.ones(L, L, dtype=torch.bool).triu(),  # sees the future, not the past
              lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1),  # forgets the diagonal
              lambda L: torch.ones(L, L).tril(),  # float 0/1 instead of boolean
              lambda L: torch.ones(L, L, dtype=torch.bool).tril(1),  # also sees the next token
              lambda L: ~torch.ones(L, L, dtype=torch.bool).tril(),  # True = blocked (nn.Transformer's meaning)
          ],
          solution=lambda: causal_mask,
          alternative_answers=lambda: [
              lambda L: [[j <= i for j in range(L)] for i in range(L)],  # nested lists of booleans
              lambda L: np.tril(np.ones((L, L), dtype=bool)),  # NumPy
          ])
def _check_causal(answer):
    return compare_function(answer, causal_mask, [(n,) for n in (1, 2, 5, 8)], what="causal mask",
                            describe=lambda a: f"L = {a[0]}")


# -- padding mask -------------------------------------------------------------------------------

_LENGTH_CASES = [([3, 5, 1], 5), ([2], 4), ([4, 4], 4), ([0, 2, 6], 7)]


def _padding_inputs():
    return [(torch.tensor(lengths), max_len) for lengths, max_len in _LENGTH_CASES]


@exercise("masking.padding_mask",
          hint="key j of sequence b is real when j < lengths[b]; return shape (B, 1, 1, max_len) so "
               "it broadcasts over heads and queries",
          wrong_answers=lambda: [
              lambda lengths, L: (torch.arange(L)[None, :] <= lengths[:, None])[:, None, None, :],  # one too many
              lambda lengths, L: torch.arange(L)[None, :] < lengths[:, None],  # (B, L): does not broadcast
              lambda lengths, L: (torch.arange(L)[None, :] >= lengths[:, None])[:, None, None, :],  # torch's meaning
              lambda lengths, L: (torch.arange(L)[None, :] < lengths[:, None])[:, None, :, None],  # masks queries
              lambda lengths, L: (torch.arange(1, L + 1)[None, :] < lengths[:, None])[:, None, None, :],  # one too few
          ],
          solution=lambda: padding_mask,
          alternative_answers=lambda: [
              lambda lengths, L: torch.tensor([[[[j < n for j in range(L)]]] for n in lengths.tolist()]),  # loops
              lambda lengths, L: (np.arange(L) < lengths.numpy()[:, None]).reshape(len(lengths), 1, 1, L),  # NumPy
          ])
def _check_padding(answer):
    return compare_function(answer, lambda lengths, L: padding_mask(lengths, L), _padding_inputs(),
                            what="padding mask", describe=lambda a: f"lengths {a[0].tolist()}, max_len {a[1]}")


# -- causal + padding ---------------------------------------------------------------------------

def _decoder_mask(lengths, max_len):
    return combine_masks(causal_mask(max_len), padding_mask(lengths, max_len))  # (B, 1, L, L)


@exercise("masking.decoder_mask",
          hint="a key is visible only if both masks allow it; broadcasting (L, L) against "
               "(B, 1, 1, L) gives (B, 1, L, L)",
          wrong_answers=lambda: [
              lambda lengths, L: causal_mask(L) | padding_mask(lengths, L),  # OR lets pads or the future in
              lambda lengths, L: padding_mask(lengths, L).expand(len(lengths), 1, L, L),  # forgets causality
              lambda lengths, L: causal_mask(L).expand(len(lengths), 1, L, L),  # forgets the padding
              lambda lengths, L: causal_mask(L) & padding_mask(lengths, L).transpose(-2, -1),  # pads the queries
              lambda lengths, L: torch.ones(L, L, dtype=torch.bool).tril(-1) & padding_mask(lengths, L),  # no diagonal
          ],
          solution=lambda: _decoder_mask,
          alternative_answers=lambda: [
              lambda lengths, L: ((torch.arange(L)[None, :] <= torch.arange(L)[:, None])  # (L, L) causal
                                  & (torch.arange(L) < lengths[:, None])[:, None, None, :]),  # (B, 1, 1, L)
              lambda lengths, L: np.logical_and(np.tril(np.ones((L, L), dtype=bool)),
                                                (np.arange(L) < lengths.numpy()[:, None])[:, None, None, :]),
          ])
def _check_decoder(answer):
    return compare_function(answer, _decoder_mask, _padding_inputs(), what="decoder self-attention mask",
                            describe=lambda a: f"lengths {a[0].tolist()}, max_len {a[1]}")


# -- shift right --------------------------------------------------------------------------------

def _shift_inputs():
    g = torch.Generator().manual_seed(6)
    return [(torch.randint(3, 20, (2, 6), generator=g), 1), (torch.randint(3, 9, (1, 1), generator=g), 1),
            (torch.randint(3, 50, (3, 4), generator=g), 7)]


def _shift_by_assignment(y, bos):
    """A right answer: fill a new tensor column by column."""
    out = torch.empty_like(y)  # (B, L)
    out[:, 0] = bos
    out[:, 1:] = y[:, :-1]
    return out


@exercise("masking.shift_right",
          hint="the decoder input at position t must hold the target token of position t - 1, "
               "and position 0 holds the start token",
          wrong_answers=lambda: [
              lambda y, bos: y.clone(),  # no shift: the model would copy its own answer
              lambda y, bos: y.roll(1, dims=1),  # wraps the last target around to the front
              lambda y, bos: torch.cat([y[:, 1:], torch.full_like(y[:, :1], bos)], dim=1),  # shifted left
              lambda y, bos: torch.cat([torch.full_like(y[:, :1], bos), y], dim=1),  # keeps the last token: too long
              lambda y, bos: torch.cat([torch.full_like(y[:, :1], bos), y[:, 1:]], dim=1),  # drops the first token
          ],
          solution=lambda: shift_right,
          alternative_answers=lambda: [
              _shift_by_assignment,
              lambda y, bos: np.pad(y.numpy(), ((0, 0), (1, 0)), constant_values=bos)[:, :-1],  # NumPy
          ])
def _check_shift(answer):
    return compare_function(answer, lambda y, bos: shift_right(y, bos), _shift_inputs(),
                            what="decoder input", describe=lambda a: f"target of shape {tuple(a[0].shape)}, bos={a[1]}")
