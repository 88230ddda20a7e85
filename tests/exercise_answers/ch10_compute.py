"""Answers for the checkers of transformer_lib/exercises/ch10_compute.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch

from transformer_lib.cost import attention_ffn_crossover, block_macs


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


ANSWERS = {
    'compute.attention_share': {
        'solution': lambda: _share_reference,
        'alternatives': lambda: [_share_by_hand,
                                 lambda n, d, e: torch.tensor(_share_reference(n, d, e))],
        'wrong': lambda: [_share_without_output_projection, _share_scores_only, _share_one_ffn_matrix,
                          lambda n, d, e: block_macs(n, d, e).shares()["ffn"],  # the FFN's share
                          _share_as_fraction, _share_scores_once],
    },
    'compute.crossover': {
        'solution': lambda: attention_ffn_crossover,
        'alternatives': lambda: [lambda d, e: np.int64(e * d - 2 * d),
                                 lambda d, e: [(2 * e * d * d - 4 * d * d) / (2 * d)]],  # solved step by step
        'wrong': lambda: [lambda d, e: 2 * d, lambda d, e: e * d / 2, lambda d, e: e * d,
                          lambda d, e: (e + 2) * d,  # a sign slip
                          lambda d, e: e * d - 2],  # the 2 not multiplied by d
    },
    'compute.layer_flops': {
        'solution': lambda: lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),
        'alternatives': lambda: [
            lambda B, n, d, f: np.int64(B) * 2 * (4 * n * d ** 2 + 2 * n ** 2 * d + 2 * n * d * f),
            lambda B, n, d, f: float(sum(2 * m for m in (n * d * d,) * 4 + (n * n * d,) * 2 + (n * d * f,) * 2) * B),
        ],
        'wrong': lambda: [lambda B, n, d, f: B * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # MACs
                          lambda B, n, d, f: 2 * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # one sequence
                          lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * d * f),  # no scores
                          lambda B, n, d, f: 2 * B * (4 * n * d * d + n * n * d + 2 * n * d * f),  # A V forgotten
                          lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * n * d + n * d * f)],  # one FFN matrix
    },
}
