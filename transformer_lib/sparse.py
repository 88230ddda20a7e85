"""Sparse attention: a sliding window, dilation, global tokens and BigBird's block pattern.

Full attention scores every query against every key: n^2 scores per head. A sparse pattern keeps
a fixed number of keys per query, so the cost becomes linear in n, *provided the kernel never
forms the n x n matrix*. Passing a band mask to dense attention gives the right answer at the
full quadratic cost (the mask itself is n^2 booleans), which is why this module exists.

Patterns (each also available as a boolean mask, ``True = may attend``):

* sliding window: query i sees keys with ``|i - j| <= window // 2`` (causal: ``i - window // 2 <= j <= i``);
* dilated: ``(j - i) % dilation == 0`` (the seed's strided pattern; ``dilation = 1`` is full attention);
* dilated window (Longformer / WaveNet): the window's taps spaced ``dilation`` apart;
* Longformer: a window plus a few global tokens that see, and are seen by, every position;
* BigBird: query blocks see a window of blocks, global blocks and a few random blocks.

Kernels for the sliding window (``kernel=`` argument of :func:`sliding_window_attention`):

* ``"blocked"`` - the readable fast path that works everywhere: cut the queries into blocks of
  ``block_size`` rows; block ``[s, s + b)`` needs only the keys ``[s - w/2, s + b + w/2)``, so one
  call of ``F.scaled_dot_product_attention`` per block on a (b x (b + w)) tile. Time and memory
  grow linearly in n. Every interior block shares one precomputed tile mask.
* ``"flex"`` - ``torch.nn.attention.flex_attention`` compiled with a window ``BlockMask`` (tiles
  of 64 x 64 on a CPU, 128 x 128 elsewhere). The
  block mask is built from the window's arithmetic in O(number of blocks x blocks per window)
  steps and cached (``create_block_mask`` would evaluate the mask on all n^2 pairs). Compiling
  takes 10-40 s the first time on a CPU, so the flex path is opt-in; if torch.compile, a C
  compiler or the device cannot run it, it warns once and falls back to ``"blocked"``.
* ``"dense"`` - the reference: dense SDPA with the (n, n) band mask. Quadratic.
* ``"auto"`` - ``"dense"`` when the band covers most of the matrix anyway, else ``"blocked"``.

Dilated attention is exact and dense *within* each of the ``d`` interleaved subsequences
``r, r + d, r + 2d, ...``: reshape, run dense SDPA on each, reshape back (``kernel="strided"``).

Every kernel returns only the output and equals the dense masked reference
(:func:`transformer_lib.scaled_dot_product_attention` with the pattern's mask); the tests hold
them to 1e-5 in float32. Padded batches pass ``key_mask`` (B, L) with ``True = real token``; a
query that can see no real key gets a zero output, as everywhere in the library.
"""
from __future__ import annotations

import ctypes
import functools
import os
import statistics
import sys
import time
import warnings
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from .attention import attention_fast
from .masks import global_tokens_mask, sliding_window_mask

__all__ = [
    "sliding_window_attention", "dilated_attention", "longformer_attention", "block_sparse_attention",
    "longformer_mask", "dilated_window_mask", "bigbird_block_layout", "bigbird_mask", "layout_to_mask",
    "band_score_count", "dilated_score_count", "blocked_score_count", "flex_score_count",
    "receptive_field", "gridding_holes", "window_block_mask", "flex_available", "median_time", "peak_memory",
    "WINDOW_KERNELS", "DILATED_KERNELS",
]

WINDOW_KERNELS = ("auto", "blocked", "flex", "dense")
DILATED_KERNELS = ("auto", "strided", "dense")
DEFAULT_BLOCK_SIZE = 32  # query rows per tile in the blocked kernel (see blocked_score_count)
# flex_attention's tile: BlockMask entries are b x b blocks. 64 measured ~10% faster than the
# default 128 on a CPU (fewer wasted scores along the band's edges); GPUs keep torch's 128.
FLEX_CPU_BLOCK_SIZE = 64
FLEX_GPU_BLOCK_SIZE = 128


def _flex_block_size(device) -> int:
    return FLEX_CPU_BLOCK_SIZE if torch.device(device).type == "cpu" else FLEX_GPU_BLOCK_SIZE


# -- validation ----------------------------------------------------------------------------------

def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """Self-attention shapes: q, k, v all (B, H, L, d) with the same B, H and L."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, L, d_k), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError("sparse self-attention needs q, k, v with the same (B, H, L); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, L, _ = q.shape
    if L < 1:
        raise ValueError("the sequence length L must be >= 1")
    return B, H, L, q.shape[-1]


def _check_key_mask(key_mask: torch.Tensor | None, B: int, L: int, device) -> torch.Tensor | None:
    """Accept (B, L) or the (B, 1, 1, L) of :func:`~transformer_lib.masks.padding_mask`; return (B, L)."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise ValueError(f"key_mask must be a boolean tensor with True = real token, got {got}")
    if key_mask.dim() == 4 and key_mask.shape[1:3] == (1, 1):
        key_mask = key_mask[:, 0, 0, :]  # (B, 1, 1, L) -> (B, L)
    if key_mask.dim() != 2 or key_mask.shape[1] != L or key_mask.shape[0] not in (1, B):
        raise ValueError(f"key_mask must have shape (B, L) = ({B}, {L}) or (B, 1, 1, L), "
                         f"got {tuple(key_mask.shape)}")
    return key_mask.to(device).expand(B, L)


def _check_kernel(kernel: str, allowed: Sequence[str]) -> str:
    if kernel not in allowed:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, allowed))}, got {kernel!r}")
    return kernel


# -- masks ---------------------------------------------------------------------------------------

def dilated_window_mask(L: int, window: int, dilation: int, causal: bool = False, device=None) -> torch.Tensor:
    """(L, L) dilated sliding window: keys ``j = i + t * dilation`` for ``|t| <= window // 2``.

    The window keeps ``window // 2`` taps on each side (like a convolution kernel of size
    ``2 * (window // 2) + 1``) but spaces them ``dilation`` apart, so one layer reaches
    ``(window // 2) * dilation`` positions away at the same cost. ``dilation = 1`` is
    :func:`~transformer_lib.masks.sliding_window_mask`. Stacking such layers is where dilation
    pays off (and where a fixed rate leaves holes: see :func:`receptive_field`).
    """
    _positive_int("L", L)
    _positive_int("window", window)
    _positive_int("dilation", dilation)
    i = torch.arange(L, device=device).unsqueeze(1)  # (L, 1) query index
    j = torch.arange(L, device=device).unsqueeze(0)  # (1, L) key index
    mask = ((j - i) % dilation == 0) & ((j - i).abs() <= (window // 2) * dilation)
    return mask & (j <= i) if causal else mask


def longformer_mask(L: int, window: int, global_positions: Iterable[int], causal: bool = False,
                    device=None) -> torch.Tensor:
    """(L, L) Longformer pattern: the sliding window OR the global tokens' rows and columns.

    With ``causal=True`` everything is also restricted to ``j <= i`` (a global token then sees
    the whole past and is seen by the whole future).
    """
    mask = sliding_window_mask(L, window, device=device) | global_tokens_mask(L, list(global_positions), device=device)
    if causal:
        i = torch.arange(L, device=device).unsqueeze(1)
        mask = mask & (torch.arange(L, device=device).unsqueeze(0) <= i)
    return mask


def bigbird_block_layout(num_blocks: int, window_blocks: int = 3, global_blocks: int = 1,
                         random_blocks: int = 1, seed: int = 0) -> torch.Tensor:
    """(num_blocks, num_blocks) boolean block layout of BigBird (Zaheer et al., 2020).

    Query block r sees: the ``window_blocks`` blocks centred on it (r - w//2 .. r + w//2), the
    first ``global_blocks`` blocks (which also see everything), and ``random_blocks`` other
    blocks drawn at random (seeded, so the pattern is reproducible) among those it does not
    already see.
    """
    _positive_int("num_blocks", num_blocks)
    _positive_int("window_blocks", window_blocks)
    for name, value in (("global_blocks", global_blocks), ("random_blocks", random_blocks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if global_blocks > num_blocks:
        raise ValueError(f"global_blocks={global_blocks} exceeds num_blocks={num_blocks}")
    r = torch.arange(num_blocks)
    layout = (r[:, None] - r[None, :]).abs() <= window_blocks // 2  # (nb, nb) window of blocks
    layout[:global_blocks, :] = True  # global blocks see everything ...
    layout[:, :global_blocks] = True  # ... and are seen by everything
    gen = torch.Generator().manual_seed(seed)
    for row in range(global_blocks, num_blocks):
        free = (~layout[row]).nonzero().flatten()
        take = free[torch.randperm(free.numel(), generator=gen)[:random_blocks]]
        layout[row, take] = True
    return layout


def layout_to_mask(layout: torch.Tensor, block_size: int, L: int | None = None) -> torch.Tensor:
    """Expand a (nb, nb) block layout to an (L, L) token mask (cut to ``L`` if given)."""
    if layout.dtype != torch.bool or layout.dim() != 2 or layout.shape[0] != layout.shape[1]:
        raise ValueError(f"layout must be a square boolean (nb, nb) tensor, got {layout.dtype} {tuple(layout.shape)}")
    _positive_int("block_size", block_size)
    mask = layout.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)  # (nb*b, nb*b)
    if L is not None:
        if not 1 <= L <= mask.shape[0]:
            raise ValueError(f"L must lie in [1, {mask.shape[0]}] for this layout, got {L}")
        mask = mask[:L, :L]
    return mask


def bigbird_mask(L: int, block_size: int, window_blocks: int = 3, global_blocks: int = 1,
                 random_blocks: int = 1, seed: int = 0) -> torch.Tensor:
    """(L, L) BigBird mask: :func:`bigbird_block_layout` expanded to tokens."""
    _positive_int("L", L)
    nb = -(-L // _positive_int("block_size", block_size))  # ceil(L / block_size)
    layout = bigbird_block_layout(nb, window_blocks, global_blocks, random_blocks, seed)
    return layout_to_mask(layout, block_size, L)


def receptive_field(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """Which inputs each output can depend on after stacking layers with these masks.

    ``masks[0]`` is the first layer. Position i of layer l mixes the positions j of layer l-1
    with ``mask_l[i, j]``, so the reach composes as a boolean matrix product:
    ``reach = mask_L @ ... @ mask_2 @ mask_1`` (an entry is True when some path connects them).
    """
    if not masks:
        raise ValueError("receptive_field needs at least one mask")
    reach = None
    for m in masks:
        if m.dtype != torch.bool or m.dim() != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"each mask must be a square boolean (L, L) tensor, got {m.dtype} {tuple(m.shape)}")
        if reach is not None and m.shape != reach.shape:
            raise ValueError(f"masks must share one shape, got {tuple(reach.shape)} and {tuple(m.shape)}")
        # float matmul counts paths; > 0 turns the count back into "reachable"
        reach = m if reach is None else (m.float() @ reach.float()) > 0  # (L, L) @ (L, L) -> (L, L)
    return reach


def gridding_holes(L: int, dilations: Sequence[int], window: int) -> int:
    """Holes in the receptive field of a stack of dilated windows (the gridding artifact).

    Stack ``dilated_window_mask(L, window, d)`` for ``d`` in ``dilations`` (first layer first)
    and look at the middle output, position ``L // 2``: the number of inputs between the leftmost
    and the rightmost one it reaches that it does *not* reach. 0 for rates 1, 2, 4, 8; 8 for a
    rate 2 repeated four times (every odd offset is missing).
    """
    if not dilations:
        raise ValueError("gridding_holes needs at least one dilation")
    reach = receptive_field([dilated_window_mask(L, window, d) for d in dilations])[L // 2]  # (L,)
    hit = reach.nonzero().flatten()
    return int(hit.max() - hit.min()) + 1 - int(reach.sum())


# -- counting scores ---------------------------------------------------------------------------------

def band_score_count(n: int, window: int, causal: bool = False) -> int:
    """Exact number of (i, j) pairs with ``|i - j| <= window // 2`` (causal: ``0 <= i - j <= window // 2``).

    Offset 0 gives n pairs, each offset t = 1..h gives n - t pairs per side, so the count is
    ``n + 2 * sum_t (n - t) = n (2h + 1) - h (h + 1)`` for h < n: about n * w, minus the corners.
    """
    _positive_int("n", n)
    h = min(_positive_int("window", window) // 2, n - 1)
    one_side = h * n - h * (h + 1) // 2  # sum_{t=1..h} (n - t)
    return n + one_side if causal else n + 2 * one_side


def dilated_score_count(n: int, dilation: int, causal: bool = False) -> int:
    """Exact number of pairs with ``(j - i) % dilation == 0`` (and ``j <= i`` if causal).

    Residue class r holds ``len_r`` positions (ceil or floor of n / d) and is a dense block of
    len_r^2 pairs: about n^2 / d in total, n / d per query row.
    """
    _positive_int("n", n)
    d = _positive_int("dilation", dilation)
    lengths = [len(range(r, n, d)) for r in range(min(d, n))]
    return sum(m * (m + 1) // 2 if causal else m * m for m in lengths)


def blocked_score_count(n: int, window: int, causal: bool = False, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Scores the ``"blocked"`` kernel computes: each query block scores its whole key tile.

    A block of b queries scores ``b + window // 2 (+ window // 2 if not causal)`` keys (fewer at
    the ends), so it does roughly ``(b + w) / (w + 1)`` times the exact band's work.
    """
    _positive_int("n", n)
    h = _positive_int("window", window) // 2
    b = _positive_int("block_size", block_size)
    total = 0
    for s in range(0, n, b):
        e = min(n, s + b)
        ke = e if causal else min(n, e + h)
        total += (e - s) * (ke - max(0, s - h))
    return total


def flex_score_count(n: int, window: int, causal: bool = False, block_size: int = FLEX_CPU_BLOCK_SIZE) -> int:
    """Scores flex_attention computes: every b x b tile that holds at least one band pair
    (b = 64, the library's choice on a CPU; pass 128 for a GPU)."""
    any_blocks, _ = _window_block_layout(n, _positive_int("window", window) // 2, causal, block_size)
    rows = torch.full((any_blocks.shape[0],), block_size)
    rows[-1] = n - block_size * (any_blocks.shape[0] - 1)  # the last block may be short
    return int((any_blocks.long() * rows[:, None] * rows[None, :]).sum())


# -- the sliding window ----------------------------------------------------------------------------

def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             causal: bool = False, *, key_mask: torch.Tensor | None = None,
                             kernel: str = "auto", block_size: int = DEFAULT_BLOCK_SIZE,
                             scale: float | None = None) -> torch.Tensor:
    """Each query i attends to keys with ``|i - j| <= window // 2`` (causal: ``i - window // 2 <= j <= i``).

    Args:
        q, k, v: (B, H, L, d_k), (B, H, L, d_k), (B, H, L, d_v).
        window: the band's width w >= 1; a query sees ``2 * (w // 2) + 1`` keys (``w // 2 + 1`` causal).
        causal: keep only the past half of the band.
        key_mask: optional (B, L) boolean, ``True = real token`` (padding is False).
        kernel: ``"auto"``, ``"blocked"``, ``"flex"`` or ``"dense"`` (see the module docstring).
        block_size: query rows per SDPA call in the ``"blocked"`` kernel.
        scale: score multiplier, default ``1 / sqrt(d_k)``.

    Returns:
        (B, H, L, d_v), equal to dense attention with ``sliding_window_mask(L, window, causal)``.
    """
    B, H, L, _ = _check_qkv(q, k, v)
    _positive_int("window", window)
    _positive_int("block_size", block_size)
    _check_kernel(kernel, WINDOW_KERNELS)
    key_mask = _check_key_mask(key_mask, B, L, q.device)
    half = window // 2
    if kernel == "auto":
        # when the band covers most of the matrix, skipping the rest saves little: one dense call
        kernel = "dense" if band_score_count(L, window, causal) > 0.5 * L * L else "blocked"
    if kernel == "flex":
        out = _flex_window(q, k, v, half, causal, key_mask, scale)
        if out is not None:
            return out
        kernel = "blocked"  # flex unavailable here: _flex_window has warned once
    if kernel == "dense":
        mask = _band_mask(L, half, 0 if causal else half, q.device)  # (L, L): quadratic memory
        if key_mask is None:  # every row sees at least itself: plain SDPA is safe
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return attention_fast(q, k, v, mask & key_mask[:, None, None, :], scale=scale)  # (B, 1, L, L)
    return _blocked_window(q, k, v, half, causal, key_mask, block_size, scale)


def _band_mask(L: int, half: int, right: int, device) -> torch.Tensor:
    """(L, L) band -right <= i - j <= half, the same as ``sliding_window_mask`` but built from two
    broadcast comparisons, so no (L, L) integer temporary is formed (3 L^2 bytes at the peak
    instead of about 16 L^2: it matters at L = 32768)."""
    i = torch.arange(L, device=device).unsqueeze(1)  # (L, 1)
    j = torch.arange(L, device=device).unsqueeze(0)  # (1, L)
    return (j >= i - half) & (j <= i + right)  # (L, L)


_CHUNK_ROWS = 4096  # queries per batched SDPA call: bounds the temporary output to a few MB


def _blocked_window(q, k, v, half: int, causal: bool, key_mask, block_size: int, scale) -> torch.Tensor:
    """Blocks of ``block_size`` queries, each attending to its own (b, b + w) key tile.

    Query block [s, s + b) needs keys [s - half, s + b + right) with right = 0 (causal) or half.
    In tile coordinates (row r = query s + r, column c = key s - half + c) query r sees columns
    r .. r + half + right: the same for every *interior* block (one whose tile lies inside the
    sequence), so one additive tile mask serves all of them. The interior tiles are overlapping
    windows of k and v, which ``as_strided`` exposes as a (H, blocks, b + w, d) view without
    copying anything; one SDPA call then treats the blocks like extra heads. The few blocks at
    the two ends, and every block of a padded batch, go one SDPA call at a time with their own
    masks.
    """
    B, H, L, _ = q.shape
    right = 0 if causal else half
    b = block_size
    W = b + half + right  # keys per tile
    out = q.new_empty(B, H, L, v.shape[-1])  # (B, H, L, d_v): the only O(L) allocation
    num_blocks = -(-L // b)
    first, last = -(-half // b), (L - right) // b  # interior blocks: first <= block < last
    batched = key_mask is None and last > first
    if batched:
        r = torch.arange(b, device=q.device).unsqueeze(1)  # (b, 1) row in the tile
        c = torch.arange(W, device=q.device).unsqueeze(0)  # (1, W) column in the tile
        tile = (c >= r) & (c <= r + half + right)  # (b, W): the band in tile coordinates
        tile_bias = torch.zeros(tile.shape, dtype=q.dtype, device=q.device).masked_fill(~tile, float("-inf"))
        chunk = max(1, _CHUNK_ROWS // b)
        for bi in range(B):
            for c0 in range(first, last, chunk):
                c1 = min(last, c0 + chunk)
                s0, s1 = c0 * b, c1 * b
                qt = q[bi, :, s0:s1].reshape(H, c1 - c0, b, q.shape[-1])  # (H, blocks, b, d_k), a view
                kt, vt = (_tiles(x[bi], s0 - half, c1 - c0, b, W) for x in (k, v))  # (H, blocks, W, d), views
                o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=tile_bias, scale=scale)  # (H, blocks, b, d_v)
                out[bi, :, s0:s1] = o.reshape(H, s1 - s0, -1)  # (H, blocks * b, d_v)
    positions = torch.arange(L, device=q.device)
    for blk in range(num_blocks):
        if batched and first <= blk < last:
            continue
        s, e = blk * b, min(L, blk * b + b)
        ks, ke = max(0, s - half), min(L, e + right)  # the tile, clipped to the sequence
        qs, kk, vv = q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke]  # (B, H, b', d), (B, H, tile, d) views
        diff = positions[s:e, None] - positions[None, ks:ke]  # (b', tile) = i - j
        band = (diff <= half) & (diff >= -right)  # (b', tile)
        if key_mask is None:  # no row is ever empty (j = i is in the band): plain SDPA
            out[:, :, s:e] = F.scaled_dot_product_attention(qs, kk, vv, attn_mask=band, scale=scale)
        else:  # padding: a row may see no real key; attention_fast returns zeros for it
            mask = band & key_mask[:, None, None, ks:ke]  # (B, 1, b', tile)
            out[:, :, s:e] = attention_fast(qs, kk, vv, mask, scale=scale)
    return out


def _tiles(x: torch.Tensor, start: int, count: int, step: int, width: int) -> torch.Tensor:
    """Overlapping windows of a (H, L, d) tensor: window t = x[:, start + t*step : start + t*step + width].

    Returns a (H, count, width, d) *view* (no copy): consecutive windows share memory.
    """
    sh, sl, sd = x.stride()
    return x.as_strided((x.shape[0], count, width, x.shape[2]), (sh, step * sl, sl, sd),
                        x.storage_offset() + start * sl)


# -- flex_attention ---------------------------------------------------------------------------------

# the compiled function, and why flex failed per (device type, dtype): a failure is remembered so
# that the (slow) compile is not retried on every call, and warned about once
_FLEX_STATE: dict = {"compiled": None, "errors": {}}


def _window_block_layout(L: int, half: int, causal: bool, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(nb, nb) booleans: which tiles hold some band pair (``any``), which hold only band pairs (``full``).

    Query tile [qs, qe] and key tile [ks, ke] give differences i - j in [qs - ke, qe - ks]. The
    band is -right <= i - j <= half. A tile is touched when the two intervals meet and full when
    the first lies inside the second. Only tiles within ``half / block_size + 1`` of the
    diagonal can be touched, so those are the only ones examined: O(nb * w / b) work.
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


@functools.lru_cache(maxsize=32)
def _cached_window_layout(L: int, half: int, causal: bool, block_size: int):
    return _window_block_layout(L, half, causal, block_size)


def _pack_blocks(blocks: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(nb, nb) booleans -> BlockMask's (1, 1, nb) counts and (1, 1, nb, nb) column indices, listed first."""
    counts = blocks.sum(dim=1, dtype=torch.int32)  # (nb,)
    order = torch.argsort((~blocks).to(torch.int8), dim=1, stable=True).to(torch.int32)  # True columns first
    return counts[None, None].to(device), order[None, None].contiguous().to(device)


def _window_mask_mod(half: torch.Tensor, right: torch.Tensor, key_mask: torch.Tensor | None = None):
    """flex's mask_mod for the band, optionally with padding. The parameters are captured
    *tensors*, so one compiled kernel serves every window, causal or not, without recompiling
    (with and without ``key_mask`` are two kernels)."""
    if key_mask is None:
        def mask_mod(b, h, q_idx, kv_idx):
            diff = q_idx - kv_idx
            return (diff <= half) & (diff >= -right)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            diff = q_idx - kv_idx
            return (diff <= half) & (diff >= -right) & key_mask[b, kv_idx]
    return mask_mod


def window_block_mask(L: int, window: int, causal: bool = False, key_mask: torch.Tensor | None = None,
                      device=None, block_size: int | None = None):
    """flex_attention's ``BlockMask`` for the sliding window, built without touching n^2 pairs.

    Tiles that the band covers completely are "full" (flex skips the mask there); tiles it only
    crosses are "partial" (flex evaluates the mask_mod); all others are skipped. The tile layout
    is cached per (L, window, causal, block size). ``key_mask`` (B, L), True = real token, adds
    padding: a tile holding a padded key is demoted from full to partial so that the mask_mod
    removes the padding. ``block_size`` defaults to 64 on a CPU and 128 elsewhere.
    """
    from torch.nn.attention.flex_attention import BlockMask

    _positive_int("L", L)
    half = _positive_int("window", window) // 2
    device = torch.device("cpu") if device is None else torch.device(device)
    block_size = _flex_block_size(device) if block_size is None else _positive_int("block_size", block_size)
    any_blocks, full_blocks = _cached_window_layout(L, half, causal, block_size)
    if key_mask is not None:
        pad = torch.zeros(key_mask.shape[0], -(-L // block_size) * block_size - L, dtype=torch.bool,
                          device=key_mask.device)
        tiles_real = torch.cat([key_mask, pad], dim=1).view(key_mask.shape[0], -1, block_size)  # (B, nb, b)
        complete = tiles_real.all(dim=2).all(dim=0).cpu()  # (nb,) no padding in this key tile
        full_blocks = full_blocks & complete[None, :]
    partial = any_blocks & ~full_blocks
    kv_num, kv_idx = _pack_blocks(partial, device)
    full_num, full_idx = _pack_blocks(full_blocks, device)
    mod = _window_mask_mod(torch.tensor(half, device=device), torch.tensor(0 if causal else half, device=device),
                           key_mask)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block_size,
                                    mask_mod=mod, seq_lengths=(L, L))


def _compiled_flex():
    if _FLEX_STATE["compiled"] is None:
        from torch.nn.attention.flex_attention import flex_attention
        # dynamic=False: one kernel per shape, the fastest code; the window lives in tensors
        _FLEX_STATE["compiled"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX_STATE["compiled"]


def _flex_failed(key: tuple[str, torch.dtype], err: BaseException) -> None:
    reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    _FLEX_STATE["errors"][key] = reason
    warnings.warn(f"flex_attention is unavailable for {key[0]} {key[1]} ({reason}); "
                  "falling back to the blocked SDPA kernel", RuntimeWarning, stacklevel=4)


def _flex_window(q, k, v, half: int, causal: bool, key_mask, scale) -> torch.Tensor | None:
    """The compiled flex path, or None (after one warning) where it cannot run."""
    key = (q.device.type, q.dtype)
    if key in _FLEX_STATE["errors"]:
        return None
    try:
        if q.device.type == "mps":
            raise RuntimeError("flex_attention does not support MPS")
        L = q.shape[2]
        block_mask = _cached_block_mask(L, half, causal, str(q.device)) if key_mask is None \
            else window_block_mask(L, 2 * half + 1, causal, key_mask, q.device)
        return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale)
    except Exception as err:  # torch.compile missing a C compiler, an unsupported device or dtype, ...
        _flex_failed(key, err)
        return None


@functools.lru_cache(maxsize=16)
def _cached_block_mask(L: int, half: int, causal: bool, device: str):
    return window_block_mask(L, 2 * half + 1, causal, None, device)


def flex_available(device="cpu", dtype=torch.float32) -> tuple[bool, str]:
    """Try the compiled flex path once on a tiny input; return (works, reason). Slow the first time
    (it compiles); afterwards the answer is remembered."""
    q = torch.randn(1, 1, 256, 16, dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = _flex_window(q, q, q, 8, False, None, None)
    key = (q.device.type, dtype)
    return (out is not None, "ok" if out is not None else _FLEX_STATE["errors"][key])


# -- dilated attention --------------------------------------------------------------------------------

def dilated_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dilation: int,
                      causal: bool = False, *, key_mask: torch.Tensor | None = None,
                      kernel: str = "auto", scale: float | None = None) -> torch.Tensor:
    """Query i attends to keys with ``(j - i) % dilation == 0`` (causal: also ``j <= i``).

    The pattern splits the sequence into ``dilation`` interleaved subsequences (positions
    r, r + d, r + 2d, ...); attention never crosses between them and is *dense* inside each. So
    the ``"strided"`` kernel regroups the positions, runs one dense SDPA per group of equally
    long subsequences, and scatters the results back: about n^2 / d scores, no mask at all
    (``is_causal`` keeps the order inside a subsequence). ``kernel="dense"`` is the masked
    reference; ``"auto"`` is ``"strided"``.

    Returns (B, H, L, d_v), equal to dense attention with ``dilated_mask(L, dilation, causal)``.
    """
    B, H, L, _ = _check_qkv(q, k, v)
    d = _positive_int("dilation", dilation)
    _check_kernel(kernel, DILATED_KERNELS)
    key_mask = _check_key_mask(key_mask, B, L, q.device)
    if kernel == "dense":
        mask = _residue_mask(L, d, causal, q.device)  # (L, L): quadratic memory
        if key_mask is None:  # every row sees at least itself
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return attention_fast(q, k, v, mask & key_mask[:, None, None, :], scale=scale)  # (B, 1, L, L)
    if d == 1:  # one subsequence: plain full attention
        return _dense_group(q, k, v, causal, None if key_mask is None else key_mask[:, None, :], scale)
    m = -(-L // d)  # positions per subsequence, rounding up: L = (m - 1) d + rem
    rem = L - (m - 1) * d  # how many residues r get the full m positions (1 <= rem <= d)
    pad = m * d - L  # 0 when d divides L: then nothing below copies q, k or v

    def regroup(x):  # (B, H, L, e) -> (B*H, d, m, e): "head" r of batch row b*H + h is subsequence r
        if pad:
            x = F.pad(x, (0, 0, 0, pad))  # (B, H, m * d, e): zero rows at the end, never attended
        # a view, not a copy: the layout SDPA gets from the usual (B, L, H, e).transpose(1, 2)
        return x.reshape(B * H, m, d, x.shape[-1]).transpose(1, 2)  # (B*H, m, d, e) -> (B*H, d, m, e)

    qg, kg, vg = regroup(q), regroup(k), regroup(v)
    kmg = None
    if key_mask is not None:
        kmg = F.pad(key_mask, (0, pad)).reshape(B, 1, m, d).transpose(2, 3)  # (B, 1, d, m)
        kmg = kmg.expand(B, H, d, m).reshape(B * H, d, m)  # (B*H, d, m): one row per subsequence
    out = q.new_empty(B, H, m * d, v.shape[-1])  # (B, H, m*d, d_v)
    out_g = out.view(B * H, m, d, v.shape[-1]).transpose(1, 2)  # (B*H, d, m, d_v), a view of out
    # residues 0..rem-1 hold m positions, residues rem..d-1 hold m - 1 (their last row is padding)
    for lo, hi, length in ((0, rem, m), (rem, d, m - 1)):
        if hi <= lo or length == 0:
            continue
        km = None if kmg is None else kmg[:, lo:hi, :length]  # (B*H, hi - lo, length)
        sub = (slice(None), slice(lo, hi), slice(0, length))  # residues lo..hi-1, first `length` rows
        out_g[sub] = _dense_group(qg[sub], kg[sub], vg[sub], causal, km, scale)  # (B*H, hi-lo, length, d_v)
    return out[:, :, :L] if pad else out


def _residue_mask(L: int, d: int, causal: bool, device) -> torch.Tensor:
    """(L, L) ``(j - i) % d == 0`` as ``i % d == j % d``: equal to ``dilated_mask``, built with no
    (L, L) integer temporary."""
    r = torch.arange(L, device=device) % d  # (L,) residue of each position
    mask = r.unsqueeze(1) == r.unsqueeze(0)  # (L, L)
    if causal:
        mask &= torch.ones(L, L, dtype=torch.bool, device=device).tril()
    return mask


def _dense_group(q, k, v, causal: bool, key_mask, scale) -> torch.Tensor:
    """Dense attention over (B, G, n, e) with an optional key mask broadcastable to (B, G, n)."""
    if key_mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    n = q.shape[2]
    mask = key_mask[:, :, None, :]  # (B, G, 1, n)
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (B, G, n, n)
    return attention_fast(q, k, v, mask, scale=scale)


# -- global tokens (Longformer) and BigBird blocks ---------------------------------------------------

def longformer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                         global_positions: Iterable[int], causal: bool = False, *,
                         key_mask: torch.Tensor | None = None, kernel: str = "auto",
                         block_size: int = DEFAULT_BLOCK_SIZE, scale: float | None = None) -> torch.Tensor:
    """Sliding window plus global tokens: equal to dense attention with :func:`longformer_mask`.

    ``kernel="blocked"`` (``"auto"``) costs O(n (w + g)) for g global tokens: each query block's
    key tile gets the g global keys prepended (masked where the band already holds them, so no
    key counts twice), and the g global *queries* attend densely to all n keys, overwriting
    their rows. ``kernel="dense"`` is the masked reference.
    """
    B, H, L, _ = _check_qkv(q, k, v)
    _positive_int("window", window)
    _positive_int("block_size", block_size)
    _check_kernel(kernel, ("auto", "blocked", "dense"))
    key_mask = _check_key_mask(key_mask, B, L, q.device)
    g = torch.as_tensor(sorted(set(int(p) for p in global_positions)), dtype=torch.long)
    if g.numel() and (g.min() < 0 or g.max() >= L):
        raise ValueError(f"global positions must lie in [0, {L}), got {g.tolist()}")
    if kernel == "dense":
        mask = longformer_mask(L, window, g.tolist(), causal, device=q.device)  # (L, L)
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]
        return attention_fast(q, k, v, mask, scale=scale)
    if g.numel() == 0:
        return sliding_window_attention(q, k, v, window, causal, key_mask=key_mask, kernel="blocked",
                                        block_size=block_size, scale=scale)
    half, right = window // 2, (0 if causal else window // 2)
    g = g.to(q.device)
    kg, vg = k[:, :, g], v[:, :, g]  # (B, H, G, d): the global keys and values
    positions = torch.arange(L, device=q.device)
    out = q.new_empty(B, H, L, v.shape[-1])
    for s in range(0, L, block_size):
        e = min(L, s + block_size)
        ks, ke = max(0, s - half), min(L, e + right)
        i = positions[s:e, None]  # (b, 1)
        diff = i - positions[None, ks:ke]  # (b, tile)
        band = (diff <= half) & (diff >= -right)  # (b, tile)
        gdiff = i - g[None, :]  # (b, G)
        extra = ~((gdiff <= half) & (gdiff >= -right))  # global key not already in this row's band
        if causal:
            extra = extra & (gdiff >= 0)
        mask = torch.cat([extra, band], dim=1)[None, None]  # (1, 1, b, G + tile)
        if key_mask is not None:
            mask = mask & torch.cat([key_mask[:, g], key_mask[:, ks:ke]], dim=1)[:, None, None, :]  # (B, 1, b, G + tile)
        kk = torch.cat([kg, k[:, :, ks:ke]], dim=2)  # (B, H, G + tile, d)
        vv = torch.cat([vg, v[:, :, ks:ke]], dim=2)
        out[:, :, s:e] = attention_fast(q[:, :, s:e], kk, vv, mask, scale=scale)
    # the global queries see every key (the past only, if causal)
    gmask = None
    if causal:
        gmask = positions[None, :] <= g[:, None]  # (G, L)
    if key_mask is not None:
        km = key_mask[:, None, None, :]  # (B, 1, 1, L)
        gmask = km if gmask is None else gmask & km
    out[:, :, g] = attention_fast(q[:, :, g], k, v, gmask, scale=scale)
    return out


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: torch.Tensor,
                           block_size: int, *, key_mask: torch.Tensor | None = None,
                           kernel: str = "auto", scale: float | None = None) -> torch.Tensor:
    """Attention under a (nb, nb) block layout, e.g. :func:`bigbird_block_layout`.

    ``kernel="blocked"`` (``"auto"``): each query block gathers the key blocks its layout row
    lists and runs one SDPA call on them, so the cost is (number of True blocks) x block_size^2.
    ``kernel="dense"`` is the reference with :func:`layout_to_mask`.
    """
    B, H, L, _ = _check_qkv(q, k, v)
    _positive_int("block_size", block_size)
    _check_kernel(kernel, ("auto", "blocked", "dense"))
    nb = -(-L // block_size)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool or tuple(layout.shape) != (nb, nb):
        got = (layout.dtype, tuple(layout.shape)) if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise ValueError(f"layout must be a boolean ({nb}, {nb}) tensor for L={L} and block_size={block_size}, got {got}")
    key_mask = _check_key_mask(key_mask, B, L, q.device)
    if kernel == "dense":
        mask = layout_to_mask(layout, block_size, L).to(q.device)  # (L, L)
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]
        return attention_fast(q, k, v, mask, scale=scale)
    out = q.new_zeros(B, H, L, v.shape[-1])  # rows whose layout row is empty stay zero
    positions = torch.arange(L, device=q.device)
    for row in range(nb):
        cols = layout[row].nonzero().flatten().tolist()
        if not cols:
            continue
        s, e = row * block_size, min(L, (row + 1) * block_size)
        idx = torch.cat([positions[c * block_size:(c + 1) * block_size] for c in cols])  # key positions
        km = None if key_mask is None else key_mask[:, idx][:, None, None, :]  # (B, 1, 1, keys)
        out[:, :, s:e] = attention_fast(q[:, :, s:e], k[:, :, idx], v[:, :, idx], km, scale=scale)
    return out


# -- measuring ----------------------------------------------------------------------------------------

def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds (CUDA is synchronised around each call)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


_LIBC: list = []


def _release_free_memory() -> None:
    """Make glibc give free memory back to the OS, so that reusing it shows up in the RSS.

    A freed tensor's pages often stay resident inside malloc's heap; a later allocation reuses
    them without the resident size growing, and its peak would be invisible. The first call
    fixes the mmap threshold at 128 KiB (by default glibc raises it after large frees, up to
    32 MB); every call runs ``malloc_trim(0)``, which returns free heap pages to the OS.
    """
    if not _LIBC:
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
            libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
            _LIBC.append(libc)
        except (OSError, AttributeError):  # not glibc: nothing to do
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0].malloc_trim(0)


def _rss_kib() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("VmRSS", "VmHWM"))}
    return fields["VmRSS"], fields["VmHWM"]


def peak_memory(fn: Callable[[], object], device=None) -> float | None:
    """Extra memory (bytes) that ``fn()`` needs at its peak, beyond what was live before it.

    On CUDA: ``torch.cuda`` peak-allocation statistics. On Linux CPUs: the process's peak
    resident set size (``VmHWM``), reset just before the call through ``/proc/self/clear_refs``,
    minus the resident size before it, after glibc has returned its free pages to the OS (see
    :func:`_release_free_memory`). Python's ``tracemalloc`` would not see torch's buffers at all.
    Returns None where neither is available. Resolution: a few hundred KiB.
    """
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/clear_refs"):
        return None
    _release_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
    except OSError:
        return None
    before, _ = _rss_kib()
    fn()
    _, peak = _rss_kib()
    return float(max(0, peak - before) * 1024)
