"""Integer weights, from scratch: absmax int8 and group-wise asymmetric int4 (chapter 19).

A weight matrix W (N, K) is cut along its input dimension into groups of ``group_size`` weights
(32 here, llama.cpp's choice). Each group gets its own scale, so one large weight (an *outlier*)
only coarsens the 31 weights beside it, not its whole row or the whole matrix:

    int8, symmetric ("absmax", llama.cpp's Q8_0):   d = max|w| / 127,        q = round(w / d) in -127..127,  w ~ d q
    int4, asymmetric (min/max, llama.cpp's Q4_1):   d = (max w - min w) / 15, m = min w,
                                                    q = round((w - m) / d) in 0..15,              w ~ d q + m

The scale d and the minimum m are stored as float16, so a group of 32 costs 2 + 32 = 34 bytes in
int8 (8.5 bits a weight) and 2 + 2 + 16 = 20 bytes in int4 (5 bits a weight), against 128 bytes in
float32. Asymmetric int4 spends its 16 levels on the range the group really has (a group of
positive weights wastes none on negatives); int8 has levels to spare and stays symmetric.

The *blocks* are the bytes as llama.cpp's GGUF files store them, one block after another along a
row, so a row of W is ``K / group_size`` blocks (chapter 19 reads them byte by byte from the file):

    q8_0 block: d (float16, 2 bytes) | q_0 .. q_{gs-1} (int8, gs bytes)
    q4_1 block: d (float16) | m (float16) | gs/2 bytes, byte j = q_j (low 4 bits) + 16 q_{j+gs/2} (high 4 bits)

:func:`group_scale` and :func:`group_codes` are the two steps of rounding one group (its scale
from its weights, then each weight's code), shared with GPTQ (:mod:`.gptq`), which rounds a
column at a time. :func:`quantize_blocks` and :func:`dequantize_blocks` turn float32 (N, K) into
those bytes and back; :func:`round_trip` is the teaching version for any bit width and granularity (per tensor,
per output channel, per group), returning the dequantized weights so their error can be measured.
"""
from __future__ import annotations

import torch

from .._checks import check_quantization_args

__all__ = ["FORMATS", "bytes_per_block", "group_scale", "group_codes", "absmax_int8", "minmax_int4", "pack_q8_0",
           "pack_q4_1", "pack_codes", "quantize_blocks", "dequantize_blocks", "round_trip"]

# bits -> llama.cpp's name for the block format this module writes
FORMATS = {8: "q8_0", 4: "q4_1"}


def bytes_per_block(fmt: str, group_size: int) -> int:
    """Bytes of one block of ``group_size`` weights: float16 scale (+ float16 minimum) + the codes."""
    return 2 + group_size if fmt == "q8_0" else 4 + group_size // 2


def _groups(w: torch.Tensor, group_size: int) -> torch.Tensor:
    N, K = w.shape
    return w.float().reshape(N, K // group_size, group_size)  # (N, K) -> (N, G, gs)


def group_scale(g: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A group's float16 scale d (and minimum m; None for int8) from its weights ``g`` (..., gs):
    ``d = max|w| / 127`` for 8 bits, ``d = (max w - min w) / 15, m = min w`` for 4."""
    if bits == 8:
        return (g.abs().amax(-1) / 127).half(), None
    lo, hi = g.amin(-1), g.amax(-1)
    return ((hi - lo) / 15).half(), lo.half()


def group_codes(g: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
    """The codes of weights ``g`` (..., n) on the grid of scale ``d`` (and minimum ``m``), both
    (...): int8 in -127..127 when ``m`` is None, else uint8 in 0..15. The scale is the float16 one
    that is stored, so the codes are the best ones for it; a zero scale (an all-zero or constant
    group) gives code 0."""
    inv = torch.where(d > 0, 1 / d.float(), torch.zeros_like(d, dtype=torch.float32))[..., None]  # (..., 1)
    if m is None:
        return (g * inv).round().clamp(-127, 127).to(torch.int8)
    return ((g - m.float()[..., None]) * inv).round().clamp(0, 15).to(torch.uint8)


def absmax_int8(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per group: ``(q, d)`` with q (N, K) int8 and d (N, K / group_size) float16,
    ``w ~ d q``. The scale is rounded to float16 *before* the codes are chosen, so that the codes
    are the best ones for the scale that is actually stored."""
    g = _groups(w, group_size)  # (N, G, gs)
    d, _ = group_scale(g, 8)  # (N, G)
    return group_codes(g, d, None).reshape(w.shape), d


def minmax_int4(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit per group: ``(q, d, m)`` with q (N, K) uint8 in 0..15 and d, m
    (N, K / group_size) float16, ``w ~ d q + m``. Like llama.cpp's Q4_1 the group's minimum is
    the zero point, so the smallest weight of each group is stored (almost) exactly."""
    g = _groups(w, group_size)  # (N, G, gs)
    d, m = group_scale(g, 4)  # (N, G) each
    return group_codes(g, d, m).reshape(w.shape), d, m


def _half_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.uint8).reshape(*x.shape, 2)  # (N, G) float16 -> (N, G, 2) little-endian bytes


def pack_q8_0(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """int8 codes (N, K) and scales (N, G) -> q8_0 blocks (N, G * (2 + gs)) uint8."""
    N, G = d.shape
    codes = q.contiguous().view(torch.uint8).reshape(N, G, -1)  # (N, G, gs): int8 bit patterns
    return torch.cat([_half_bytes(d), codes], dim=-1).reshape(N, -1)  # (N, G, 2 + gs) -> (N, G * (2 + gs))


def pack_q4_1(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """4-bit codes (N, K) and scales, minima (N, G) -> q4_1 blocks (N, G * (4 + gs / 2)) uint8."""
    N, G = d.shape
    codes = q.reshape(N, G, -1)  # (N, G, gs)
    half = codes.shape[-1] // 2
    nibbles = codes[..., :half] | (codes[..., half:] << 4)  # (N, G, gs/2): q_j low, q_{j+gs/2} high
    return torch.cat([_half_bytes(d), _half_bytes(m), nibbles], dim=-1).reshape(N, -1)


def pack_codes(codes: tuple) -> torch.Tensor:
    """``(q, d)`` of :func:`absmax_int8` -> q8_0 blocks; ``(q, d, m)`` of :func:`minmax_int4` -> q4_1."""
    return pack_q8_0(*codes) if len(codes) == 2 else pack_q4_1(*codes)


def quantize_blocks(w: torch.Tensor, bits: int, group_size: int = 32) -> torch.Tensor:
    """Float weights (N, K) -> the blocks of :data:`FORMATS`\\ [bits] (uint8, one row of blocks per
    row of W), each weight rounded to its nearest code (:func:`~.gptq.gptq_blocks` chooses them
    with the layer's inputs in view)."""
    check_quantization_args(w, bits, group_size)
    return pack_codes(absmax_int8(w, group_size) if bits == 8 else minmax_int4(w, group_size))


def dequantize_blocks(blocks: torch.Tensor, fmt: str, group_size: int = 32) -> torch.Tensor:
    """Blocks (N, bytes) -> float32 weights (N, K): the readable decoder (and prefill's path).

    Reads each block exactly as the C++ kernel does: the float16 scale (and minimum) from the first
    bytes, then the codes."""
    N = blocks.shape[0]
    b = blocks.reshape(N, -1, bytes_per_block(fmt, group_size))  # (N, G, bytes per block)
    d = b[..., 0:2].contiguous().view(torch.float16).float()  # (N, G, 1)
    if fmt == "q8_0":
        q = b[..., 2:].contiguous().view(torch.int8).float()  # (N, G, gs)
        return (d * q).reshape(N, -1)  # (N, G, gs) -> (N, K)
    m = b[..., 2:4].contiguous().view(torch.float16).float()  # (N, G, 1)
    nibbles = b[..., 4:]  # (N, G, gs/2)
    q = torch.cat([nibbles & 15, nibbles >> 4], dim=-1).float()  # (N, G, gs): low nibbles first
    return (d * q + m).reshape(N, -1)  # (N, G, gs) -> (N, K)


def round_trip(w: torch.Tensor, bits: int, granularity: str = "group", group_size: int = 32,
               symmetric: bool | None = None) -> torch.Tensor:
    """``w`` quantized to ``bits`` and back, in float32: the error a format makes, for any width.

    ``granularity``: one scale for the whole ``"tensor"``, one per output ``"channel"`` (row), or
    one per ``"group"`` of ``group_size`` weights along a row. ``symmetric`` (absmax, no minimum)
    defaults to True for 8 bits and False below, the choices of :func:`absmax_int8` and
    :func:`minmax_int4`. Scales stay in float32 here (the blocks round them to float16)."""
    check_quantization_args(w, bits, group_size if granularity == "group" else 1, granularity, any_bits=True)
    symmetric = bits >= 8 if symmetric is None else symmetric
    N, K = w.shape
    size = {"tensor": N * K, "channel": K, "group": group_size}[granularity]
    g = w.float().reshape(-1, size)  # (number of groups, size): one scale per row of g
    if symmetric:
        top = 2 ** (bits - 1) - 1  # 127 for int8, 7 for int4
        d = g.abs().amax(-1, keepdim=True) / top
        q = (g / d.clamp_min(1e-30)).round().clamp(-top, top)
        return (d * q).reshape(N, K)
    levels = 2 ** bits - 1  # 15 for 4 bits
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    d = (hi - lo) / levels
    q = ((g - lo) / d.clamp_min(1e-30)).round().clamp(0, levels)
    return (d * q + lo).reshape(N, K)
