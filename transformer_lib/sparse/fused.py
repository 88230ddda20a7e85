"""The sliding window fused into one compiled loop: ``kernel="fused"`` (CPU, float32, opt-in).

:mod:`.tiles` does a tile's steps by hand but still as separate torch calls, each over a chunk
of 16 tiles: the chunk's scores (1.1 MB) leave the fastest caches between one step and the next,
and every call costs Python and dispatch time. ``csrc/window.cpp`` does the same steps for one
block of queries at a time, start to finish: BLAS's ``sgemm`` for the scores, one loop for
``exp2`` (no row max), the row sums and the mask, ``sgemm`` again for the product with v, then
the division. A tile's weights (68 KB at w = 512) never leave the core's cache, and the blocks are
shared out over torch's threads with ``at::parallel_for``. Every block clips its tile to the
sequence, so the two ends need no separate treatment. The loop checks every row sum as
:mod:`.tiles` does (and that the row's output is finite, which makes a bound on ``|v|``
unnecessary), marks the rows out of range, and Python recomputes their blocks with the max
subtracted.

The C++ source is compiled with ``torch.utils.cpp_extension`` the first time it is needed, then
cached (:mod:`transformer_lib._extensions`). Where that cannot work (no C++ compiler, no ninja, a
BLAS without ``sgemm_``), the first call warns once and
:func:`~.window.sliding_window_attention` falls back to the ``"blocked"`` kernel. The fused path
serves CPU float32 calls without padding and without autograd; others take ``"blocked"`` too.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .._extensions import Kernel, cpp_ops
from .tiles import _LOG2E, needs_autograd, redo_rows, score_scale

__all__ = ["fused_available"]

_SOURCE = Path(__file__).with_name("csrc") / "window.cpp"
# the compiled kernel, or the reason it cannot be built (remembered: the build is not retried per call)
KERNEL = Kernel("fused sliding-window kernel", "the blocked kernel")
# -O3 and a vectorized inner loop (the row sums may be added in any order); -fopenmp for at::parallel_for
_CFLAGS = ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"]


_ARCH = {"AVX512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma"],
         "AVX2": ["-mavx2", "-mfma"]}


def _arch() -> tuple[str, list[str]]:
    """The vector instructions torch itself uses on this CPU (x86), for the exp2 loop; none elsewhere."""
    capability = torch.backends.cpu.get_cpu_capability()
    return (capability.lower(), _ARCH[capability]) if capability in _ARCH else ("generic", [])


def _module():
    """Build (once) and return the compiled extension; raise RuntimeError with the reason if it cannot be."""
    return KERNEL.get(_build)


def _build():
    arch, flags = _arch()
    return cpp_ops(name=f"tlib_window_fused_{arch}", source=_SOURCE, cflags=_CFLAGS + flags, namespace="tlib_window")


def fused_window(q, k, v, half: int, right: int, key_mask, block_size: int, scale) -> torch.Tensor | None:
    """The fused kernel (unchecked input), or None where it does not serve the call (not a CPU
    float32 call without padding and autograd) or cannot be built: then the blocked kernel does."""
    if q.device.type != "cpu" or q.dtype != torch.float32 or key_mask is not None or needs_autograd(q, k, v):
        return None
    try:
        module = _module()
    except RuntimeError:
        return None
    scale = score_scale(q, scale)
    B, H, L, d_k = q.shape
    d_v = v.shape[-1]
    flat = [x.reshape(B * H, L, x.shape[-1]).contiguous() for x in (q, k, v)]  # views when already contiguous
    out, sums = q.new_empty(B * H, L, d_v), q.new_empty(B * H, L)
    bad = torch.zeros(1, dtype=torch.int64)
    module.window_fused(*flat, out, sums, bad, half, right, block_size, scale * _LOG2E)
    if bad.item():  # rows out of range, marked with a NaN sum by the C++ loop
        redo_rows(*flat, out, sums.isnan(), half, right, block_size, scale)
    return out.view(B, H, L, d_v)


def fused_available() -> tuple[bool, str]:
    """Build the extension if needed (slow the first time); return (works, reason)."""
    return KERNEL.available(_build)
