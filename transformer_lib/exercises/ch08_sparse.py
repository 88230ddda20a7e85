"""Chapter 8 (sparse attention) exercises: the band mask, counting scores, gridding holes, and
dilated attention through interleaved subsequences."""

import torch

from ..masks import sliding_window_mask
from ..sparse import band_score_count, dilated_attention, gridding_holes
from ._core import compare_arrays, compare_function, compare_value, exercise, to_int


# -- 1. the band mask ----------------------------------------------------------------------------

def _band_inputs():
    return [(L, w, causal) for L, w in ((1, 1), (6, 2), (9, 4), (12, 5), (10, 30)) for causal in (False, True)]


def _describe_band(args):
    L, w, causal = args
    return f"L={L}, window={w}, causal={causal}"


@exercise("sparse.band_mask",
          hint="compare |i - j| with window // 2 on broadcast aranges; causal also needs j <= i")
def _check_band_mask(answer):
    return compare_function(answer, sliding_window_mask, _band_inputs(), what="mask", describe=_describe_band)


# -- 2. counting the band's scores ---------------------------------------------------------------

@exercise("sparse.band_count",
          hint="offset 0 gives n pairs; offset t (1 <= t <= window // 2) gives n - t pairs on each side; "
               "no offset can exceed n - 1",
          call="count(n, window)")
def _check_band_count(answer):
    cases = [(1, 1), (5, 2), (10, 4), (100, 9), (16384, 512), (7, 100)]
    for n, w in cases:
        what = f"count(n={n}, window={w})"
        compare_value(to_int(answer(n, w), what), band_score_count(n, w), what, rtol=0)
    return f"exact on all {len(cases)} (n, window) pairs, including a window wider than the sequence."


# -- 3. gridding holes ---------------------------------------------------------------------------


@exercise("sparse.gridding_holes",
          hint="compose the layers' masks with receptive_field, take row L // 2, and count the False "
               "entries between its first and last True",
          call="holes(L, dilations, window)")
def _check_gridding_holes(answer):
    cases = [(64, (1, 2, 4, 8), 2), (64, (2, 2, 2, 2), 2), (65, (3, 3), 2), (80, (4, 4, 4), 4),
             (64, (1, 2, 5), 2), (41, (2, 3), 2)]
    for L, dilations, w in cases:
        value = to_int(answer(L, dilations, w), "the number of holes")
        expected = gridding_holes(L, dilations, w)
        compare_value(value, expected, f"for L={L}, dilations={dilations}, window={w} your count", rtol=0)
    return f"right on all {len(cases)} stacks, with and without holes."


# -- 4. dilated attention by regrouping --------------------------------------------------------


@exercise("sparse.dilated_by_regrouping",
          hint="reshape (B, H, L, d) to (B, H, L // dilation, dilation, d) and swap the two middle axes, so "
               "that subsequence r = positions r, r + d, r + 2d, ... becomes one row of dense attention; undo it at the end")
def _check_dilated(answer):
    g = torch.Generator().manual_seed(8)
    cases = [(1, 1, 12, 4, 3), (2, 3, 24, 8, 4), (1, 2, 16, 5, 16), (2, 1, 10, 4, 1)]
    for B, H, L, d_k, dil in cases:
        q, k, v = (torch.randn(B, H, L, d_k, generator=g) for _ in range(3))
        atol = 1e-5
        if dil == 4:  # scores in the hundreds: a softmax written as exp / sum overflows
            q = 60.0 * q
            atol = 1e-4  # float32 rounds a score of ~500 by ~3e-5, and the softmax passes it on
        compare_arrays(answer(q, k, v, dil), dilated_attention(q, k, v, dil),
                       what=f"output for L={L}, dilation={dil}", atol=atol)
    return f"matches transformer_lib.dilated_attention on all {len(cases)} inputs."
