"""Chapter 4 exercises: causal and padding masks, combining them, and shifted-right inputs."""
import torch

from ..masks import causal_mask, combine_masks, padding_mask
from ..tasks import shift_right
from ._core import NotYet, compare_function, exercise


# -- causal mask --------------------------------------------------------------------------------

@exercise("masking.causal_mask", hint="compare the key index j with the query index i",
          wrong_answers=lambda: [
              lambda L: torch.ones(L, L, dtype=torch.bool),  # no mask at all
              lambda L: torch.ones(L, L, dtype=torch.bool).triu(),  # sees the future, not the past
              lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1),  # forgets the diagonal
              lambda L: torch.ones(L, L).tril(),  # float 0/1 instead of boolean
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
          ])
def _check_decoder(answer):
    return compare_function(answer, _decoder_mask, _padding_inputs(), what="decoder self-attention mask",
                            describe=lambda a: f"lengths {a[0].tolist()}, max_len {a[1]}")


# -- shift right --------------------------------------------------------------------------------

def _shift_inputs():
    g = torch.Generator().manual_seed(6)
    return [(torch.randint(3, 20, (2, 6), generator=g), 1), (torch.randint(3, 9, (1, 1), generator=g), 1),
            (torch.randint(3, 50, (3, 4), generator=g), 7)]


def _check_is_tensor(fn):
    def wrapped(*args):
        out = fn(*args)
        if not isinstance(out, torch.Tensor):
            raise NotYet(f"return a tensor, got {type(out).__name__}")
        return out
    return wrapped


@exercise("masking.shift_right",
          hint="the decoder input at position t must hold the target token of position t - 1, "
               "and position 0 holds the start token",
          wrong_answers=lambda: [
              lambda y, bos: y.clone(),  # no shift: the model would copy its own answer
              lambda y, bos: y.roll(1, dims=1),  # wraps the last target around to the front
              lambda y, bos: torch.cat([y[:, 1:], torch.full_like(y[:, :1], bos)], dim=1),  # shifted left
          ])
def _check_shift(answer):
    return compare_function(_check_is_tensor(answer), lambda y, bos: shift_right(y, bos), _shift_inputs(),
                            what="decoder input", describe=lambda a: f"target of shape {tuple(a[0].shape)}, bos={a[1]}")
