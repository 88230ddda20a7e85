"""Counting what a sparse pattern costs, and what a stack of patterns reaches.

The masks themselves live in :mod:`transformer_lib.masks` (one home for masks). Here: the exact
number of scores a pattern keeps (chapter 8, "268M versus 8.4M scores"), the number a tiled
kernel really computes (whole tiles, a little more), the tile layout of the window
(:func:`window_block_layout`, which flex_attention's block mask is built from), and the
receptive field of stacked layers with its gridding holes (chapter 8, "Stacking windows").
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..masks import dilated_window_mask
from .._checks import check_bool, check_dilations, check_int, check_mask_stack

__all__ = ["band_score_count", "dilated_score_count", "blocked_score_count", "fused_score_count", "flex_score_count",
           "window_block_layout", "receptive_field", "gridding_holes",
           "DEFAULT_BLOCK_SIZE", "FLEX_CPU_BLOCK_SIZE", "FLEX_GPU_BLOCK_SIZE"]

DEFAULT_BLOCK_SIZE = 32  # query rows per tile in the blocked kernel (see blocked_score_count)
# flex_attention's tile: BlockMask entries are b x b blocks. 64 on a CPU (fewer wasted scores
# along the band's edges than torch's default 128; CHANGELOG.md has the measurement); GPUs keep 128.
FLEX_CPU_BLOCK_SIZE = 64
FLEX_GPU_BLOCK_SIZE = 128


def band_score_count(n: int, window: int, causal: bool = False) -> int:
    """Exact number of (i, j) pairs with ``|i - j| <= window // 2`` (causal: ``0 <= i - j <= window // 2``).

    Offset 0 gives n pairs, each offset t = 1..h gives n - t pairs per side, so the count is
    ``n + 2 * sum_t (n - t) = n (2h + 1) - h (h + 1)`` for h < n: about n * w, minus the corners.
    """
    check_bool("causal", causal)
    return _band_count(check_int("n", n), check_int("window", window) // 2, causal)


def _band_count(n: int, half: int, causal: bool) -> int:
    h = min(half, n - 1)  # no offset can exceed n - 1
    one_side = h * n - h * (h + 1) // 2  # sum_{t=1..h} (n - t)
    return n + one_side if causal else n + 2 * one_side


def dilated_score_count(n: int, dilation: int, causal: bool = False) -> int:
    """Exact number of pairs with ``(j - i) % dilation == 0`` (and ``j <= i`` if causal).

    Residue class r holds ``len_r`` positions (ceil or floor of n / d) and is a dense block of
    len_r^2 pairs: about n^2 / d in total, n / d per query row.
    """
    check_int("n", n)
    check_bool("causal", causal)
    d = check_int("dilation", dilation)
    lengths = [len(range(r, n, d)) for r in range(min(d, n))]
    return sum(m * (m + 1) // 2 if causal else m * m for m in lengths)


def blocked_score_count(n: int, window: int, causal: bool = False, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Scores the ``"blocked"`` kernel computes per head (without padding).

    Each interior block of b queries (one whose tile lies inside the sequence) scores its whole
    tile of ``b + window // 2 (+ window // 2 if not causal)`` keys: roughly ``(b + w) / (w + 1)``
    times the exact band's work. The queries before and after the interior blocks go in one
    call per end, against every key any of them can see. A sequence too short for interior
    blocks goes block by block, each block against its tile clipped to the sequence.
    """
    check_int("n", n)
    check_bool("causal", causal)
    h = check_int("window", window) // 2
    b = check_int("block_size", block_size)
    right = 0 if causal else h

    def keys(s: int, e: int) -> int:  # keys the queries [s, e) can see: [s - h, e + right) clipped
        return min(n, e + right) - max(0, s - h)

    first, stop = -(-h // b), (n - right) // b  # interior blocks: first <= block < stop
    if stop <= first:
        return sum((min(n, s + b) - s) * keys(s, min(n, s + b)) for s in range(0, n, b))
    ends = [(0, first * b), (stop * b, n)]
    return (stop - first) * b * (b + h + right) + sum((e - s) * keys(s, e) for s, e in ends if e > s)


def fused_score_count(n: int, window: int, causal: bool = False, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Scores the ``"fused"`` kernel computes per head: every block of b queries (the last one
    possibly shorter) against its tile clipped to the sequence, ``[s - h, s + b + right)``."""
    check_int("n", n)
    check_bool("causal", causal)
    h = check_int("window", window) // 2
    b = check_int("block_size", block_size)
    right = 0 if causal else h
    return sum((min(n, s + b) - s) * (min(n, s + b + right) - max(0, s - h)) for s in range(0, n, b))


def flex_score_count(n: int, window: int, causal: bool = False, block_size: int = FLEX_CPU_BLOCK_SIZE) -> int:
    """Scores flex_attention computes: every b x b tile that holds at least one band pair
    (b = 64, the library's choice on a CPU; pass 128 for a GPU)."""
    check_int("n", n)
    check_bool("causal", causal)
    any_blocks, _ = _window_block_layout(n, check_int("window", window) // 2, causal,
                                         check_int("block_size", block_size))
    rows = torch.full((any_blocks.shape[0],), block_size)
    rows[-1] = n - block_size * (any_blocks.shape[0] - 1)  # the last block may be short
    return int((any_blocks.long() * rows[:, None] * rows[None, :]).sum())


def window_block_layout(L: int, window: int, causal: bool = False,
                        block_size: int = FLEX_CPU_BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ``block_size`` x ``block_size`` tiles of the (L, L) score matrix the window touches.

    Returns two (nb, nb) boolean tensors, nb = ceil(L / block_size): ``touched`` (the tile holds
    at least one band pair: a tiled kernel must compute it) and ``full`` (every pair of the tile
    is in the band: no mask is needed there). Chapter 8 draws them; flex_attention's block mask
    (:func:`~transformer_lib.sparse.window_block_mask`) is built from them.
    """
    check_bool("causal", causal)
    return _window_block_layout(check_int("L", L), check_int("window", window) // 2, causal,
                                check_int("block_size", block_size))


def _window_block_layout(L: int, half: int, causal: bool, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked core of :func:`window_block_layout`, from the window's arithmetic.

    Query tile [qs, qe] and key tile [ks, ke] give differences i - j in [qs - ke, qe - ks]. The
    band is -right <= i - j <= half. A tile is touched when the two intervals meet and full when
    the first lies inside the second. Only tiles within ``half / block_size + 1`` of the
    diagonal can be touched, so those are the only ones examined: O(nb * w / b) work, never L^2.
    """
    right = 0 if causal else half
    nb = -(-L // block_size)
    reach = half // block_size + 1
    qb = torch.arange(nb).unsqueeze(1)  # (nb, 1) query tile
    kb = qb + torch.arange(-reach, (0 if causal else reach) + 1).unsqueeze(0)  # (nb, offsets) key tiles
    valid = (kb >= 0) & (kb < nb)
    qs, ks = qb * block_size, kb * block_size
    qe, ke = (qs + block_size - 1).clamp(max=L - 1), (ks + block_size - 1).clamp(max=L - 1)
    lo, hi = qs - ke, qe - ks  # the range of i - j inside the tile pair
    touched = valid & (hi >= -right) & (lo <= half)
    # a short last tile (query or key) is never "full", as in create_block_mask: flex masks its tail
    full = valid & (lo >= -right) & (hi <= half) & (ke - ks + 1 == block_size) & (qe - qs + 1 == block_size)
    any_blocks = torch.zeros(nb, nb, dtype=torch.bool)
    full_blocks = torch.zeros(nb, nb, dtype=torch.bool)
    kb = kb.clamp(0, nb - 1)
    rows = qb.expand_as(kb)
    any_blocks[rows[touched], kb[touched]] = True
    full_blocks[rows[full], kb[full]] = True
    return any_blocks, full_blocks


def receptive_field(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """Which inputs each output can depend on after stacking layers with these masks.

    ``masks[0]`` is the first layer. Position i of layer l mixes the positions j of layer l-1
    with ``mask_l[i, j]``, so the reach composes as a boolean matrix product:
    ``reach = mask_L @ ... @ mask_2 @ mask_1`` (an entry is True when some path connects them).
    """
    check_mask_stack(masks)
    return _compose(masks)


def _compose(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    reach = masks[0]
    for m in masks[1:]:
        # float matmul counts paths; > 0 turns the count back into "reachable"
        reach = (m.float() @ reach.float()) > 0  # (L, L) @ (L, L) -> (L, L)
    return reach


def gridding_holes(L: int, dilations: Sequence[int], window: int) -> int:
    """Holes in the receptive field of a stack of dilated windows (the gridding artifact).

    Stack ``dilated_window_mask(L, window, d)`` for ``d`` in ``dilations`` (first layer first)
    and look at the middle output, position ``L // 2``: the number of inputs between the leftmost
    and the rightmost one it reaches that it does *not* reach. 0 for rates 1, 2, 4, 8; 8 for a
    rate 2 repeated four times (every odd offset is missing).
    """
    check_dilations(dilations)
    reach = _compose([dilated_window_mask(L, window, d) for d in dilations])[L // 2]  # (L,)
    hit = reach.nonzero().flatten()
    return int(hit.max() - hit.min()) + 1 - int(reach.sum())
