"""The quantized matrix-vector product: a readable reference and a compiled kernel (chapter 19).

Decoding one token multiplies every weight matrix by one vector: each weight is read once and
used for one multiply-add, so the time is the time to stream the weights from memory (about
15 GB/s on the book's machine). Reading 5 bits a weight instead of 32 is the whole point of
quantized decoding, and it only pays off if the weights are never written out in float32 on the
way: :func:`matvec_reference` does exactly that (decode the blocks to a float (N, K) matrix, then
``x @ W^T``) and is the readable definition; :func:`matvec` is the fast path.

``csrc/matvec.cpp`` makes one pass over the packed blocks: for each block it turns the codes into
floats in vector registers, multiplies them with x (for up to 8 rows of x at once; 4 on AVX2),
scales the block's sum by d (and adds m times the block's sum of x for q4_1), and moves on. Rows
of W are shared out over torch's threads with ``at::parallel_for``. It has three code paths
(``path=``): ``"avx512"`` (16 weights per instruction), ``"avx2"`` (AVX2 + FMA, 8 per
instruction: most laptops have this and not AVX-512) and ``"portable"`` (plain loops, any CPU).
``"auto"``, the default, takes the fastest that this CPU runs (:func:`kernel_paths` lists them),
checked when the kernel runs, so one build serves every x86-64 CPU. The plain loops lose to
decoding the weights and calling BLAS (on an AVX2-only machine, before it had its own path, the
q4_1 loop took 8.0 ms for the 49,152 x 576 head against 2.6 ms), so without a vector path int4
decoding is slower than float32. torch's own int8 CPU paths were measured slower than float32 on
this machine (DESIGN.md), so the kernel is written for the job, as chapter 8's fused window is.

With ``activations="int8"`` x is first quantized the way llama.cpp does it (its Q8_0 blocks:
int8 codes and one float scale per block of 32 values, :func:`quantize_activations`), so each
block's dot product is exact integer arithmetic, one AVX-512 VNNI instruction for 32 weights
(two on AVX2, which has no VNNI), and one float multiply by the two scales. That is fewer
instructions per weight than decoding the weights to floats; the price is x's own rounding error
(half a step of max|x| / 127 per value), and the result is then ``quantize_activations(x) @ W^T``,
which the reference computes the same way. The default, ``"float32"``, leaves x as it is
(weight-only quantization). :func:`matmul` (prefill, many rows of x) has the same two kinds of x;
with int8 x on AVX-512 VNNI it is an int8 GEMM (see its docstring).

The C++ source is compiled by ``torch.utils.cpp_extension`` the first time it is needed, then
cached (:mod:`transformer_lib._extensions`). Where that cannot work (no compiler, no ninja) the
first call warns once and :func:`matvec` uses the reference.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from .._checks.quantization import check_activations, check_kernel_path
from .._extensions import Kernel, cpp_ops
from .formats import dequantize_blocks

__all__ = ["ACTIVATIONS", "PATHS", "kernel_available", "kernel_paths", "matmul", "matvec", "matvec_reference",
           "quantize_activations", "simd_available", "vnni_available"]

# how x enters the product: as it is, or as int8 codes per block (llama.cpp's Q8_0 activations)
ACTIVATIONS = ("float32", "int8")
# the kernel's code paths, fastest first; "auto" takes the first one this CPU runs
PATHS = ("auto", "avx512", "avx2", "portable")

_SOURCE = Path(__file__).with_name("csrc") / "matvec.cpp"
# the compiled kernel: its ops once built, or why it cannot be (remembered: not retried per call)
KERNEL = Kernel("quantized matrix-vector kernel", "dequantize-then-matmul")
# what the ops tell once: the code paths per activations, the ops bound per (format, activations)
_STATE: dict = {}
# -O3; -fopenmp for at::parallel_for. The AVX-512 and AVX2 loops carry their own target attributes,
# so the library itself is built for any x86-64 CPU and picks its path when it runs.
_CFLAGS = ["-O3", "-fopenmp"]


# TLIB_QUANT_MAX_PATH=avx2 (or portable) makes the kernel run as if this CPU had no faster path
# (read once by the compiled code, like ATen's ATEN_CPU_CAPABILITY): on an AVX-512 machine it shows
# what an AVX2-only laptop gets (benchmarks/quantized.py --max-path).
MAX_PATH_VARIABLE = "TLIB_QUANT_MAX_PATH"


def _ops():
    """Build (once) and return ``torch.ops.tlib_quant``; raise RuntimeError with the reason if it cannot be."""
    _check_max_path()
    return KERNEL.get(_build)


def _build():
    return cpp_ops(name="tlib_quant_matvec", source=_SOURCE, cflags=_CFLAGS, namespace="tlib_quant")


def _check_max_path() -> None:
    from .._checks.quantization import check_max_path
    check_max_path(MAX_PATH_VARIABLE, os.environ.get(MAX_PATH_VARIABLE, ""), PATHS[1:])


def kernel_available() -> tuple[bool, str]:
    """Build the extension if needed (slow the first time); return (works, reason)."""
    _check_max_path()
    return KERNEL.available(_build)


def kernel_paths(activations: str = "float32") -> tuple[str, ...]:
    """The kernel's code paths that run on this CPU, fastest first: some of ``"avx512"`` (for
    ``activations="int8"``: AVX-512 with VNNI), ``"avx2"`` (AVX2 + FMA) and always ``"portable"``;
    ``()`` where the kernel cannot be built (then :func:`matvec` is the reference)."""
    check_activations(activations)
    key = ("paths", activations)
    if key not in _STATE:
        ok, _ = kernel_available()
        _STATE[key] = tuple(_ops().paths(activations == "int8")) if ok else ()
    return _STATE[key]


def simd_available() -> bool:
    """Whether the kernel's AVX-512 path runs on this CPU (False when the kernel cannot be built)."""
    return "avx512" in kernel_paths("float32")


def vnni_available() -> bool:
    """Whether the int8-activation path's VNNI instructions run on this CPU (False without the kernel)."""
    return "avx512" in kernel_paths("int8")


def quantize_activations(x: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) float -> ``(codes, scales)``: int8 codes (..., K) in -127..127 and float32 scales
    (..., K / group_size), per block of ``group_size`` values ``d = max|x| / 127``,
    ``q = round(x * (1 / d))`` (half to even), ``x ~ d q``: the kernel's own float32 steps, so that
    it and this function choose the same codes."""
    *lead, K = x.shape
    g = x.float().reshape(*lead, K // group_size, group_size)  # (..., K) -> (..., G, gs)
    d = g.abs().amax(-1) / 127  # (..., G)
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = (g * inv[..., None]).round().clamp(-127, 127)  # (..., G, gs)
    return q.to(torch.int8).reshape(*lead, K), d


def matvec_reference(x: torch.Tensor, blocks: torch.Tensor, fmt: str, group_size: int = 32,
                     activations: str = "float32") -> torch.Tensor:
    """``x (..., K) @ W^T -> (..., N)`` with W decoded from its blocks first: the definition. With
    ``activations="int8"`` x is replaced by its int8 blocks decoded (:func:`quantize_activations`)."""
    w = dequantize_blocks(blocks, fmt, group_size)  # (N, K) float32
    if activations == "int8":
        q, d = quantize_activations(x, group_size)
        *lead, K = x.shape
        x = (q.float().reshape(*lead, -1, group_size) * d[..., None]).reshape(*lead, K)  # x^ = d q, (..., K)
    return x.float() @ w.T  # (..., K) @ (K, N) -> (..., N)


def matvec(x: torch.Tensor, blocks: torch.Tensor, fmt: str, group_size: int = 32,
           activations: str = "float32", *, path: str = "auto") -> torch.Tensor:
    """``x (..., K) @ W^T -> (..., N)`` straight from the blocks (the compiled kernel; unchecked
    input, see :class:`~transformer_lib.quantization.QuantizedLinear`). ``activations="int8"``
    quantizes x per block first (see the module's docstring). ``path`` picks the code path
    (:data:`PATHS`; a test holds each one equal to the reference); a named path this CPU does not
    run is a ValueError. Falls back to :func:`matvec_reference` off the CPU or where the kernel
    cannot be built."""
    if path != "auto":
        check_kernel_path(path, group_size, PATHS, kernel_paths(check_activations(activations)))
    kernels = _STATE.get("kernels")  # the ops themselves, looked up once (no per-call attribute walk)
    if kernels is None and not KERNEL.errors and x.device.type == "cpu":
        kernels = _bind()
    kernel = kernels.get((fmt, activations)) if kernels else None
    if kernel is None or x.device.type != "cpu" or blocks.device.type != "cpu":
        return matvec_reference(x, blocks, fmt, group_size, activations)
    K, N = x.shape[-1], blocks.shape[0]
    rows = x.reshape(-1, K).float().contiguous()  # (..., K) -> (B, K): a view for float32 contiguous x
    out = rows.new_empty(rows.shape[0], N)  # (B, N)
    kernel(rows, blocks.contiguous(), out, group_size, path)
    return out.reshape(*x.shape[:-1], N)  # (B, N) -> (..., N)


def _bind() -> dict | None:
    """Build the kernel if needed; remember and return {(fmt, activations): op} (None if it cannot be built)."""
    try:
        ops = _ops()
    except RuntimeError:
        return None
    _STATE["kernels"] = {("q8_0", "float32"): ops.q8_0_matvec, ("q4_1", "float32"): ops.q4_1_matvec,
                         ("q8_0", "int8"): ops.q8_0_matvec_q8x, ("q4_1", "int8"): ops.q4_1_matvec_q8x}
    return _STATE["kernels"]


def matmul(x: torch.Tensor, blocks: torch.Tensor, fmt: str, group_size: int = 32,
           activations: str = "float32") -> torch.Tensor:
    """``x (..., K) @ W^T -> (..., N)`` for many rows of x at once (prefill), W as ``fmt`` blocks
    (N, K / group_size * bytes per block).

    A prompt of B tokens uses each weight for 2 B flops, so for a long prompt the arithmetic, not
    the bytes read, is the limit (:mod:`.roofline`). With ``activations="float32"`` the compiled op
    decodes W one tile of rows at a time (about 128 KB of float32, kept in the core's cache), once,
    and multiplies the tile with all B rows by a float32 BLAS call: the decoding is paid once per
    weight, not once per row, and no full float32 copy of W is ever written. The result equals
    :func:`matvec_reference` up to the float32 rounding of the two sums (their orders differ;
    tests/test_quantization.py bounds it).

    With ``activations="int8"`` x is quantized per block first (:func:`quantize_activations`, as
    :func:`matvec` does) and, on a CPU with AVX-512 VNNI and ``group_size`` 32, the product is an
    int8 GEMM: each tile of 16 rows of W is unpacked once to bytes and every block's dot product
    with every row of x is exact integer arithmetic, 64 byte products per instruction (four times
    float32's 16 multiply-adds), scaled once per block. Elsewhere the same product is computed from
    x's codes decoded (``d q``) and the float32 tiles above, so every CPU computes
    ``quantize_activations(x) @ W^T``, :func:`matvec_reference` with ``activations="int8"``.
    Bad input is a ValueError naming the argument; off the CPU, or without the compiled kernel, it
    is the reference on W decoded by :func:`~.formats.dequantize_blocks`."""
    from .._checks.quantization import check_activations, check_matmul_args
    check_matmul_args(x, blocks, fmt, group_size)
    check_activations(activations)
    K, N = x.shape[-1], blocks.shape[0]
    on_cpu = x.device.type == "cpu" and blocks.device.type == "cpu"
    op = _matmul_op(fmt) if on_cpu else None
    if op is None:
        return matvec_reference(x, blocks, fmt, group_size, activations)
    rows = x.reshape(-1, K).float().contiguous()  # (..., K) -> (B, K)
    out = rows.new_empty(rows.shape[0], N)  # (B, N)
    if activations == "int8":
        if group_size == 32 and vnni_available():
            _matmul_op(fmt, "int8")(rows, blocks.contiguous(), out, group_size)  # the int8 GEMM
            return out.reshape(*x.shape[:-1], N)
        q, d = quantize_activations(rows, group_size)  # (B, K) int8, (B, G)
        rows = (q.float().reshape(len(rows), -1, group_size) * d[..., None]).reshape(-1, K)  # x^ = d q, (B, K)
    op(rows, blocks.contiguous(), out, group_size)
    return out.reshape(*x.shape[:-1], N)  # (B, N) -> (..., N)


def _matmul_op(fmt: str, activations: str = "float32"):
    """The compiled prefill op for ``fmt`` and ``activations`` (looked up once), or None where the
    kernel cannot be built."""
    ops = _STATE.get("matmul")
    if ops is None:
        try:
            built = _ops()
        except RuntimeError:
            return None
        ops = _STATE["matmul"] = {("q8_0", "float32"): built.q8_0_matmul, ("q4_1", "float32"): built.q4_1_matmul,
                                  ("q8_0", "int8"): built.q8_0_matmul_q8x, ("q4_1", "int8"): built.q4_1_matmul_q8x}
    return ops[fmt, activations]
