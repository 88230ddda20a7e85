"""Chapter 13 exercises: encoder vs decoder.

The references are the library's own: :class:`~transformer_lib.model.Seq2SeqTransformer`'s
forward pass and greedy decoding (:func:`~transformer_lib.sampling.generate`), :func:`~transformer_lib.tasks.shift_right`,
:func:`~transformer_lib.masks.prefix_lm_mask` and ``count_parameters`` of the two layer classes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..cost import count_parameters
from ..layers import DecoderLayer, TransformerBlock
from ..masks import prefix_lm_mask
from ..model import Seq2SeqTransformer
from ..sampling import generate
from ..tasks import BOS, shift_right
from ._core import NotYet, compare_arrays, compare_function, compare_value, exercise, seed_cpu

__all__ = []


def _models_and_batches():
    """Small random encoder-decoders and batches with n_src != n_tgt (so a swap changes shapes)."""
    cases = []
    g = torch.Generator().manual_seed(12)
    for seed, (vocab, d, heads, B, n_src, n_tgt) in enumerate(((11, 16, 2, 2, 5, 4), (17, 24, 4, 3, 3, 6))):
        seed_cpu(seed)  # the init draws from the global CPU generator (restored after every check)
        model = Seq2SeqTransformer(vocab, vocab, d_model=d, num_heads=heads, num_encoder_layers=1,
                                   num_decoder_layers=2, d_ff=2 * d).eval()
        src = torch.randint(3, vocab, (B, n_src), generator=g)
        tgt = torch.randint(3, vocab, (B, n_tgt), generator=g)
        cases.append((model, src, tgt))
    return cases


# -- 1. the teacher-forcing loss ---------------------------------------------------------------------

@exercise("encdec.teacher_forcing_loss",
          hint="the decoder input is the target shifted right (start token first); the labels are the "
               "target itself; average the cross-entropy over every position of every sequence")
def _check_loss(answer):
    cases = _models_and_batches()
    for n, (model, src, tgt) in enumerate(cases, 1):
        with torch.no_grad():
            got = answer(model, src, tgt)
            logits = model(src, shift_right(tgt))  # (B, n, V): teacher forcing on the shifted target
            expected = F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).item()
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise NotYet(f"return one number (the mean loss), got a tensor of shape {tuple(got.shape)}")
            got = got.item()
        compare_value(got, expected, what=f"the loss on test batch #{n} (target length {tgt.shape[1]})",
                      rtol=1e-5, atol=1e-6)
    return f"matches the library's teacher-forced loss on all {len(cases)} batches."


# -- 2. generate one token at a time and keep the logits -------------------------------------------------

@exercise("encdec.generate_with_logits",
          hint="encode once; start from a (B, 1) column of the start token; at each step decode the "
               "tokens so far, keep the logits of the LAST position, append their argmax")
def _check_generate(answer):
    cases = _models_and_batches()
    for model, src, tgt in cases:
        n = tgt.shape[1]
        label = f"a batch of {src.shape[0]} sources of length {src.shape[1]}, max_len={n}"
        with torch.no_grad():
            got = answer(model, src, BOS, n)
            tokens = generate(model.conditioned_on(src), torch.full((len(src), 1), BOS), n)[:, 1:]  # (B, n)
            logits = model(src, shift_right(tokens, BOS))  # (B, n, V): re-scored in one parallel pass
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return a pair (tokens (B, max_len), logits (B, max_len, V))")
        compare_arrays(got[0], tokens, what=f"tokens for {label}", atol=0)
        compare_arrays(got[1], logits, what=f"logits for {label}", atol=1e-5)
    return (f"tokens equal greedy decoding and the logits equal one parallel pass over the shifted "
            f"output on all {len(cases)} batches.")


# -- 3. the prefix-LM mask --------------------------------------------------------------------------------


@exercise("encdec.prefix_lm_mask",
          hint="start from the causal mask (j <= i) and also allow every key j inside the prefix "
               "(j < n_prefix); shape (L, L), True = may attend")
def _check_prefix(answer):
    cases = [(2, 5), (0, 4), (4, 4), (3, 7), (1, 1), (1, 6)]
    return compare_function(answer, prefix_lm_mask, cases, what="mask",
                            describe=lambda a: f"n_prefix={a[0]}, L={a[1]}")


# -- 4. what the decoder layer adds ---------------------------------------------------------------------

@exercise("encdec.extra_decoder_parameters",
          hint="list the modules a DecoderLayer has and a TransformerBlock lacks; count every weight "
               "matrix, every bias and every LayerNorm scale and shift")
def _check_extra(answer):
    sizes = (8, 64, 512, 30)
    for d in sizes:
        dec = DecoderLayer(d, 1, 2 * d)  # the init's random draws are undone after every check
        expected = count_parameters(dec) - count_parameters(TransformerBlock(d, 1, 2 * d))
        compare_value(answer(d), expected, what=f"your count for d_model={d}", rtol=0)
    return f"matches count_parameters(DecoderLayer) - count_parameters(TransformerBlock) for all {len(sizes)} sizes."
