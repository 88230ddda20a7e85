"""Sparse attention: a sliding window, dilation, global tokens and BigBird's block pattern (chapter 8).

Full attention scores every query against every key: n^2 scores per head. A sparse pattern keeps
a fixed number of keys per query, so the cost becomes linear in n, *provided the kernel never
forms the n x n matrix*. Passing a band mask to dense attention gives the right answer at the
full quadratic cost (the mask itself is n^2 booleans), which is why this package exists.

One module per job:

* :mod:`.patterns` - what a pattern costs (exact and tiled score counts), the window's tile
  layout, and what stacked layers reach (receptive field, gridding holes). The masks themselves
  are in :mod:`transformer_lib.masks`.
* :mod:`.reference` - :func:`sliding_window_reference`, the readable loop over query blocks that
  chapter 8 builds by hand; every fast kernel is tested against it.
* :mod:`.window` - :func:`sliding_window_attention`, which checks its input once and picks a
  kernel: :mod:`.blocked` (strided tiles through fused SDPA; on a CPU without autograd the
  tiles by hand, :mod:`.tiles`: exp2 with no row max, checked afterwards), :mod:`.fused` (the
  same steps compiled into one C++ loop, opt-in), :mod:`.flex` (compiled flex_attention with a
  block mask built from the window's arithmetic and cached), or dense.
* :mod:`.dilated` - :func:`dilated_attention`: d dense attentions over interleaved subsequences.
* :mod:`.global_tokens` - Longformer's global tokens and BigBird's block layouts.

Every kernel equals dense attention with its pattern's mask (the tests hold them to 1e-5 in
float32). Padded batches pass ``key_mask`` (B, L) with ``True = real token``; a query that can
see no real key gets a zero output, as everywhere in the library. Timing and memory measurement
live in :mod:`transformer_lib.profiling`.
"""
from ..masks import bigbird_block_layout, bigbird_mask, dilated_window_mask, layout_to_mask, longformer_mask
from .dilated import DILATED_KERNELS, dilated_attention
from .flex import flex_available, window_block_mask
from .fused import fused_available
from .global_tokens import block_sparse_attention, longformer_attention
from .patterns import (DEFAULT_BLOCK_SIZE, FLEX_CPU_BLOCK_SIZE, FLEX_GPU_BLOCK_SIZE, band_score_count,
                       blocked_score_count, dilated_score_count, flex_score_count, fused_score_count, gridding_holes,
                       receptive_field, window_block_layout)
from .reference import sliding_window_reference
from .window import WINDOW_KERNELS, sliding_window_attention

__all__ = [
    "sliding_window_attention", "sliding_window_reference", "dilated_attention", "longformer_attention",
    "block_sparse_attention",
    "longformer_mask", "dilated_window_mask", "bigbird_block_layout", "bigbird_mask", "layout_to_mask",
    "band_score_count", "dilated_score_count", "blocked_score_count", "fused_score_count", "flex_score_count",
    "window_block_layout", "receptive_field", "gridding_holes", "window_block_mask", "flex_available",
    "fused_available",
    "WINDOW_KERNELS", "DILATED_KERNELS", "DEFAULT_BLOCK_SIZE", "FLEX_CPU_BLOCK_SIZE", "FLEX_GPU_BLOCK_SIZE",
]
