"""Answers for the checkers of transformer_lib/exercises/ch08_sparse.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np
import torch

from transformer_lib.masks import sliding_window_mask
from transformer_lib.sparse import band_score_count, dilated_attention, dilated_window_mask, gridding_holes, receptive_field


def _wrong_band_strict(L, window, causal=False):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    band = (i - j).abs() < window // 2  # misses the two edges of the window
    return band & (j <= i) if causal else band


def _wrong_band_ignores_causal(L, window, causal=False):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return (i - j).abs() <= window // 2


def _wrong_band_future(L, window, causal=False):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    band = (i - j).abs() <= window // 2
    return band & (j >= i) if causal else band  # keeps the future half instead of the past


def _wrong_band_full_window(L, window, causal=False):  # window keys on *each* side
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    band = (i - j).abs() <= window
    return band & (j <= i) if causal else band


def _wrong_band_causal_no_diagonal(L, window, causal=False):  # causal, but a token may not see itself
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    band = (i - j).abs() <= window // 2
    return band & (j < i) if causal else band


def _band_loops(L, window, causal=False):
    """A right answer with Python loops, returned as nested lists."""
    h = window // 2
    return [[abs(i - j) <= h and (not causal or j <= i) for j in range(L)] for i in range(L)]


def _band_numpy(L, window, causal=False):
    """A right answer in NumPy: the band between two diagonals."""
    ones = np.ones((L, L), dtype=bool)
    h = window // 2
    return np.tril(np.triu(ones, -h), 0 if causal else h)


def _wrong_holes_all_unreached(L, dilations, window):
    reach = receptive_field([dilated_window_mask(L, window, d) for d in dilations])[L // 2]
    return L - int(reach.sum())  # counts positions outside the span too


def _wrong_holes_last_layer(L, dilations, window):
    row = dilated_window_mask(L, window, dilations[-1])[L // 2]  # forgets the layers below
    hit = row.nonzero().flatten()
    return int(hit.max() - hit.min()) + 1 - int(row.sum())


def _holes_by_offsets(L, dilations, window):
    """A right answer with sets: the offsets one layer adds, summed layer after layer (no masks)."""
    c = L // 2
    reach = {c}
    for d in dilations:
        taps = range(-(window // 2) * d, (window // 2) * d + 1, d)  # the offsets of one dilated window
        reach = {p + t for p in reach for t in taps if 0 <= p + t < L}
    return max(reach) - min(reach) + 1 - len(reach)


def _wrong_dilated_chunks(q, k, v, dilation):
    B, H, L, d_k = q.shape
    def chunks(x):  # contiguous chunks instead of interleaved subsequences
        return x.reshape(B, H, dilation, L // dilation, x.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(chunks(q), chunks(k), chunks(v))
    return out.reshape(B, H, L, -1)


def _wrong_dilated_unscaled(q, k, v, dilation):
    B, H, L, d_k = q.shape
    def regroup(x):
        return x.reshape(B, H, L // dilation, dilation, x.shape[-1]).transpose(2, 3)
    scores = regroup(q) @ regroup(k).transpose(-2, -1)  # forgets 1 / sqrt(d_k)
    out = torch.softmax(scores, dim=-1) @ regroup(v)
    return out.transpose(2, 3).reshape(B, H, L, -1)


def _wrong_dilated_not_regrouped_back(q, k, v, dilation):  # forgets to swap the axes back
    B, H, L, d_k = q.shape
    def regroup(x):
        return x.reshape(B, H, L // dilation, dilation, x.shape[-1]).transpose(2, 3)
    out = torch.nn.functional.scaled_dot_product_attention(regroup(q), regroup(k), regroup(v))
    return out.reshape(B, H, L, -1)


def _wrong_dilated_axis(q, k, v, dilation):  # softmax over the queries of each subsequence
    B, H, L, d_k = q.shape
    def regroup(x):
        return x.reshape(B, H, L // dilation, dilation, x.shape[-1]).transpose(2, 3)
    scores = regroup(q) @ regroup(k).transpose(-2, -1) / math.sqrt(d_k)
    out = torch.softmax(scores, dim=-2) @ regroup(v)
    return out.transpose(2, 3).reshape(B, H, L, -1)


def _wrong_dilated_naive_exp(q, k, v, dilation):  # exp / sum without the row max: overflows on large scores
    out = torch.empty_like(v)
    for r in range(dilation):
        qs, ks, vs = q[..., r::dilation, :], k[..., r::dilation, :], v[..., r::dilation, :]
        e = torch.exp(qs @ ks.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        out[..., r::dilation, :] = (e / e.sum(-1, keepdim=True)) @ vs
    return out


def _dilated_by_slicing(q, k, v, dilation):
    """A right answer: a loop over the subsequences r, r + d, r + 2d, ... with strided slices."""
    out = torch.empty_like(v)
    for r in range(dilation):
        qs, ks, vs = q[..., r::dilation, :], k[..., r::dilation, :], v[..., r::dilation, :]
        w = torch.softmax(qs @ ks.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        out[..., r::dilation, :] = w @ vs
    return out


def _dilated_masked(q, k, v, dilation):
    """A right answer without regrouping: dense attention with the residue mask (j - i) % d == 0."""
    L = q.shape[-2]
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill((j - i) % dilation != 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


ANSWERS = {
    'sparse.band_mask': {
        'solution': lambda: sliding_window_mask,
        'alternatives': lambda: [_band_loops, _band_numpy],
        'wrong': lambda: [_wrong_band_strict, _wrong_band_ignores_causal, _wrong_band_future,
                          _wrong_band_full_window, _wrong_band_causal_no_diagonal],
    },
    'sparse.band_count': {
        'solution': lambda: band_score_count,
        'alternatives': lambda: [
            lambda n, window: np.int64(n * (2 * min(window // 2, n - 1) + 1)
                                       - min(window // 2, n - 1) * (min(window // 2, n - 1) + 1)),  # closed form
            lambda n, window: float(sum(min(i + window // 2, n - 1) - max(i - window // 2, 0) + 1
                                        for i in range(n))),  # row by row, as a float
        ],
        'wrong': lambda: [lambda n, window: n * window,
                          lambda n, window: n * (2 * (window // 2) + 1),
                          lambda n, window: n + 2 * sum(n - t for t in range(1, window // 2 + 1)),
                          lambda n, window: n + sum(n - t for t in range(1, min(window // 2, n - 1) + 1)),  # one side
                          lambda n, window: n * n],  # dense
    },
    'sparse.gridding_holes': {
        'solution': lambda: gridding_holes,
        'alternatives': lambda: [_holes_by_offsets,
                                 lambda L, d, w: np.int64(gridding_holes(L, tuple(d), w))],
        'wrong': lambda: [_wrong_holes_all_unreached, _wrong_holes_last_layer, lambda L, d, w: 0,
                          lambda L, d, w: gridding_holes(L, d[1:], w) if len(d) > 1 else 0,  # skips layer 1
                          lambda L, d, w: gridding_holes(L, d, w) + 1],  # counts one end as a hole
    },
    'sparse.dilated_by_regrouping': {
        'solution': lambda: dilated_attention,
        'alternatives': lambda: [_dilated_by_slicing, _dilated_masked],
        'wrong': lambda: [_wrong_dilated_chunks, _wrong_dilated_unscaled,
                          lambda q, k, v, dilation: dilated_attention(q, k, v, 1),
                          _wrong_dilated_not_regrouped_back, _wrong_dilated_axis,
                          _wrong_dilated_naive_exp],
    },
}
