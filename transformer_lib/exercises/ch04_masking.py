"""Chapter 4 exercises: causal and padding masks, combining them, and shifted-right inputs."""
import torch

from ..masks import causal_mask, combine_masks, padding_mask
from ..tasks import shift_right
from ._core import compare_function, exercise


# -- causal mask --------------------------------------------------------------------------------

@exercise("masking.causal_mask",
          hint="compare the key index j with the query index i")
def _check_causal(answer):
    return compare_function(answer, causal_mask, [(n,) for n in (1, 2, 5, 8)], what="causal mask",
                            describe=lambda a: f"L = {a[0]}")


# -- padding mask -------------------------------------------------------------------------------

_LENGTH_CASES = [([3, 5, 1], 5), ([2], 4), ([4, 4], 4), ([0, 2, 6], 7)]


def _padding_inputs():
    return [(torch.tensor(lengths), max_len) for lengths, max_len in _LENGTH_CASES]


def _describe_lengths(args) -> str:
    return f"lengths {args[0].tolist()}, max_len {args[1]}"


@exercise("masking.padding_mask",
          hint="key j of sequence b is real when j < lengths[b]; return shape (B, 1, 1, max_len) so "
               "it broadcasts over heads and queries")
def _check_padding(answer):
    return compare_function(answer, padding_mask, _padding_inputs(), what="padding mask", describe=_describe_lengths)


# -- causal + padding ---------------------------------------------------------------------------

@exercise("masking.decoder_mask",
          hint="a key is visible only if both masks allow it; broadcasting (L, L) against "
               "(B, 1, 1, L) gives (B, 1, L, L)")
def _check_decoder(answer):
    decoder_mask = lambda lengths, L: combine_masks(causal_mask(L), padding_mask(lengths, L))  # (B, 1, L, L)
    return compare_function(answer, decoder_mask, _padding_inputs(), what="decoder self-attention mask",
                            describe=_describe_lengths)


# -- shift right --------------------------------------------------------------------------------

def _shift_inputs():
    g = torch.Generator().manual_seed(6)
    return [(torch.randint(3, 20, (2, 6), generator=g), 1), (torch.randint(3, 9, (1, 1), generator=g), 1),
            (torch.randint(3, 50, (3, 4), generator=g), 7)]


@exercise("masking.shift_right",
          hint="the decoder input at position t must hold the target token of position t - 1, "
               "and position 0 holds the start token")
def _check_shift(answer):
    return compare_function(answer, shift_right, _shift_inputs(),
                            what="decoder input", describe=lambda a: f"target of shape {tuple(a[0].shape)}, bos={a[1]}")
