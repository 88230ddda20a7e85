"""Chapter 8 (sparse attention) exercises: the band mask, counting scores, gridding holes, and
dilated attention through interleaved subsequences."""
import torch

from ..masks import sliding_window_mask
from ..sparse import band_score_count, dilated_attention, dilated_window_mask, gridding_holes, receptive_field
from ._core import NotYet, compare_arrays, compare_function, exercise


# -- 1. the band mask ----------------------------------------------------------------------------

def _band_inputs():
    return [(L, w, causal) for L, w in ((1, 1), (6, 2), (9, 4), (12, 5), (10, 30)) for causal in (False, True)]


def _describe_band(args):
    L, w, causal = args
    return f"L={L}, window={w}, causal={causal}"


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


@exercise("sparse.band_mask", hint="compare |i - j| with window // 2 on broadcast aranges; causal also needs j <= i",
          wrong_answers=lambda: [_wrong_band_strict, _wrong_band_ignores_causal, _wrong_band_future])
def _check_band_mask(answer):
    return compare_function(answer, sliding_window_mask, _band_inputs(), what="mask", describe=_describe_band)


# -- 2. counting the band's scores ---------------------------------------------------------------

@exercise("sparse.band_count",
          hint="offset 0 gives n pairs; offset t (1 <= t <= window // 2) gives n - t pairs on each side; "
               "no offset can exceed n - 1",
          wrong_answers=lambda: [lambda n, window: n * window,
                                 lambda n, window: n * (2 * (window // 2) + 1),
                                 lambda n, window: n + 2 * sum(n - t for t in range(1, window // 2 + 1))])
def _check_band_count(answer):
    if not callable(answer):
        raise NotYet(f"expected a function count(n, window), got {type(answer).__name__}")
    cases = [(1, 1), (5, 2), (10, 4), (100, 9), (16384, 512), (7, 100)]
    for n, w in cases:
        got = answer(n, w)
        try:
            value = int(got)
        except (TypeError, ValueError):
            raise NotYet(f"count({n}, {w}) should be an integer, got {type(got).__name__}") from None
        expected = band_score_count(n, w)
        if value != expected:
            raise NotYet(f"count(n={n}, window={w}) is too {'high' if value > expected else 'low'}")
    return f"exact on all {len(cases)} (n, window) pairs, including a window wider than the sequence."


# -- 3. gridding holes ---------------------------------------------------------------------------

def _wrong_holes_all_unreached(L, dilations, window):
    reach = receptive_field([dilated_window_mask(L, window, d) for d in dilations])[L // 2]
    return L - int(reach.sum())  # counts positions outside the span too


def _wrong_holes_last_layer(L, dilations, window):
    row = dilated_window_mask(L, window, dilations[-1])[L // 2]  # forgets the layers below
    hit = row.nonzero().flatten()
    return int(hit.max() - hit.min()) + 1 - int(row.sum())


@exercise("sparse.gridding_holes",
          hint="compose the layers' masks with receptive_field, take row L // 2, and count the False "
               "entries between its first and last True",
          wrong_answers=lambda: [_wrong_holes_all_unreached, _wrong_holes_last_layer, lambda L, d, w: 0])
def _check_gridding_holes(answer):
    if not callable(answer):
        raise NotYet(f"expected a function holes(L, dilations, window), got {type(answer).__name__}")
    cases = [(64, (1, 2, 4, 8), 2), (64, (2, 2, 2, 2), 2), (65, (3, 3), 2), (80, (4, 4, 4), 4),
             (64, (1, 2, 5), 2), (41, (2, 3), 2)]
    for L, dilations, w in cases:
        got = answer(L, dilations, w)
        try:
            value = int(got)
        except (TypeError, ValueError):
            raise NotYet(f"holes should be an integer, got {type(got).__name__}") from None
        expected = gridding_holes(L, dilations, w)
        if value != expected:
            raise NotYet(f"for L={L}, dilations={dilations}, window={w} your count is too "
                         f"{'high' if value > expected else 'low'}")
    return f"right on all {len(cases)} stacks, with and without holes."


# -- 4. dilated attention by regrouping --------------------------------------------------------

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


@exercise("sparse.dilated_by_regrouping",
          hint="reshape (B, H, L, d) to (B, H, L // dilation, dilation, d) and swap the two middle axes, so "
               "that subsequence r = positions r, r + d, r + 2d, ... becomes one row of dense attention; undo it at the end",
          wrong_answers=lambda: [_wrong_dilated_chunks, _wrong_dilated_unscaled,
                                 lambda q, k, v, dilation: dilated_attention(q, k, v, 1)])
def _check_dilated(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    g = torch.Generator().manual_seed(8)
    cases = [(1, 1, 12, 4, 3), (2, 3, 24, 8, 4), (1, 2, 16, 5, 16), (2, 1, 10, 4, 1)]
    for B, H, L, d_k, dil in cases:
        q, k, v = (torch.randn(B, H, L, d_k, generator=g) for _ in range(3))
        compare_arrays(answer(q, k, v, dil), dilated_attention(q, k, v, dil),
                       what=f"output for L={L}, dilation={dil}")
    return f"matches transformer_lib.dilated_attention on all {len(cases)} inputs."
