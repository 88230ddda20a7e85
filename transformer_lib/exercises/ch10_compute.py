"""Chapter 10 (Where the compute goes) exercises."""
import functools

import numpy as np
import torch

from ..cost import attention_ffn_crossover, block_macs
from ..layers import EncoderLayer
from ..probes import record_attention
from ..profiling import count_flops
from ._core import NotYet, compare_value, exercise, seed_cpu, to_number


def _number(answer, what):
    return to_number(answer, what)


def _share_reference(n, d, expansion):
    return block_macs(n, d, expansion).shares()["attention"]


def _share_by_hand(n, d, expansion):
    """A right answer written out term by term, as a NumPy float."""
    q_k_v_o = 4 * n * d * d  # four d x d projections of n tokens
    scores_and_mix = n * n * d + n * n * d  # Q K^T, then A V
    ffn = n * d * (expansion * d) + n * (expansion * d) * d  # up and down projections
    return np.float64(100.0) * (q_k_v_o + scores_and_mix) / (q_k_v_o + scores_and_mix + ffn)


def _share_as_fraction(n, d, expansion):  # 0 to 1 instead of percent
    return _share_reference(n, d, expansion) / 100


def _share_scores_once(n, d, expansion):  # counts Q K^T but forgets A V
    attn = 4 * n * d * d + n * n * d
    return 100 * attn / (attn + 2 * n * d * expansion * d)


def _share_without_output_projection(n, d, expansion):
    attn = 3 * n * d * d + 2 * n * n * d
    return 100 * attn / (attn + 2 * n * d * expansion * d)


def _share_scores_only(n, d, expansion):
    attn = 2 * n * n * d
    return 100 * attn / (attn + 2 * n * d * expansion * d)


def _share_one_ffn_matrix(n, d, expansion):
    attn = 4 * n * d * d + 2 * n * n * d
    return 100 * attn / (attn + n * d * expansion * d)


@exercise("compute.attention_share",
          hint="attention = 4 n d^2 (Q, K, V and output projections) + 2 n^2 d (Q K^T and A V); "
               "FFN = 2 n d (expansion d); return 100 * attention / (attention + FFN)",
          wrong_answers=lambda: [_share_without_output_projection, _share_scores_only, _share_one_ffn_matrix,
                                 lambda n, d, e: block_macs(n, d, e).shares()["ffn"],  # the FFN's share
                                 _share_as_fraction, _share_scores_once],
          solution=lambda: _share_reference,
          alternative_answers=lambda: [_share_by_hand,
                                       lambda n, d, e: torch.tensor(_share_reference(n, d, e))])
def _check_share(answer):
    cases = [(64, 512, 4), (1024, 512, 4), (4096, 512, 4), (300, 768, 4), (256, 512, 1), (100, 64, 8)]
    for n, d, e in cases:
        got = _number(answer(n, d, e), "the share")
        expected = block_macs(n, d, e).shares()["attention"]
        if abs(got - expected) > 1e-6 * max(1.0, abs(expected)):
            raise NotYet(f"the attention share for n={n}, d={d}, expansion={e} is too "
                         f"{'high' if got > expected else 'low'} (answer in percent, 0 to 100)")
    return f"right for all {len(cases)} (n, d, expansion) settings."


@exercise("compute.crossover",
          hint="set 4 n d^2 + 2 n^2 d equal to 2 e n d^2, divide by 2 n d and solve for n",
          wrong_answers=lambda: [lambda d, e: 2 * d, lambda d, e: e * d / 2, lambda d, e: e * d,
                                 lambda d, e: (e + 2) * d,  # a sign slip
                                 lambda d, e: e * d - 2],  # the 2 not multiplied by d
          solution=lambda: attention_ffn_crossover,
          alternative_answers=lambda: [lambda d, e: np.int64(e * d - 2 * d),
                                       lambda d, e: [(2 * e * d * d - 4 * d * d) / (2 * d)]])  # solved step by step
def _check_crossover(answer):
    cases = [(512, 4), (768, 4), (512, 8), (64, 3), (1024, 6)]
    for d, e in cases:
        got = _number(answer(d, e), "the crossover length")
        expected = attention_ffn_crossover(d, e)
        if abs(got - expected) > 1e-6 * expected:
            raise NotYet(f"the crossover for d={d}, expansion={e} is too {'high' if got > expected else 'low'}")
    return f"right for all {len(cases)} (d, expansion) settings."


@functools.lru_cache(maxsize=None)  # a measurement of fixed shapes: the same every time
def _measured_layer_flops(batch, n, d, d_ff, heads=4):
    seed_cpu(0)  # the layer's init and x draw from the global CPU generator (restored after every check)
    layer = EncoderLayer(d, heads, d_ff).eval()
    x = torch.randn(batch, n, d)
    with record_attention(layer, weights=True):  # the readable path: explicit QK^T and AV the counter sees
        return count_flops(layer, x).total


@exercise("compute.layer_flops",
          hint="FlopCounterMode counts 2 FLOPs per multiply-add, for every sequence in the batch: "
               "2 * batch * (4 n d^2 + 2 n^2 d + 2 n d d_ff)",
          wrong_answers=lambda: [lambda B, n, d, f: B * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # MACs
                                 lambda B, n, d, f: 2 * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # one sequence
                                 lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * d * f),  # no scores
                                 lambda B, n, d, f: 2 * B * (4 * n * d * d + n * n * d + 2 * n * d * f),  # A V forgotten
                                 lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * n * d + n * d * f)],  # one FFN matrix
          solution=lambda: lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),
          alternative_answers=lambda: [
              lambda B, n, d, f: np.int64(B) * 2 * (4 * n * d ** 2 + 2 * n ** 2 * d + 2 * n * d * f),
              lambda B, n, d, f: float(sum(2 * m for m in (n * d * d,) * 4 + (n * n * d,) * 2 + (n * d * f,) * 2) * B),
          ])
def _check_layer_flops(answer):
    cases = [(1, 8, 16, 64), (2, 12, 32, 80), (3, 40, 16, 16)]
    for B, n, d, f in cases:
        got = _number(answer(B, n, d, f), "the FLOP count")
        compare_value(got, _measured_layer_flops(B, n, d, f), what=f"the FLOPs for batch={B}, n={n}, d={d}, d_ff={f}",
                      rtol=1e-9)
    return f"matches FlopCounterMode on the library's EncoderLayer for all {len(cases)} shapes."
