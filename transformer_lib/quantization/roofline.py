"""The roofline of decoding: how fast a token can be when every weight must be read (chapter 19).

Generating one token multiplies each weight matrix by one vector: each weight is read from memory
once and used for one multiply-add (2 FLOPs). At batch 1 that is 2 FLOPs per weight, whatever the
format: 0.5 FLOP per byte in float32, 3.2 FLOP per byte in 5-bit Q4_1. A CPU core does tens of
FLOPs per byte it can fetch, so decoding waits on memory, and the ceiling is

    tokens/s <= memory bandwidth (bytes/s) / bytes of weights read per token.

A prompt of L tokens (prefill) reuses each weight L times: its intensity grows with L until the
arithmetic, not the memory, is the limit. That is why prefill decodes each tile of weights once
and runs float32 BLAS on it (:func:`~.kernels.matmul`), and decoding goes through the
matrix-vector kernel.
"""
from __future__ import annotations

from .._checks import check_number

__all__ = ["decode_ceiling", "flops_per_byte"]


def decode_ceiling(weight_bytes: float, bandwidth_gb_s: float) -> float:
    """Tokens/s at most, when each token streams ``weight_bytes`` at ``bandwidth_gb_s`` (10^9 bytes/s)."""
    check_number("weight_bytes", weight_bytes, 0, low_open=True)
    check_number("bandwidth_gb_s", bandwidth_gb_s, 0, low_open=True)
    return bandwidth_gb_s * 1e9 / weight_bytes


def flops_per_byte(rows: int, bits_per_weight: float) -> float:
    """Arithmetic intensity of ``rows`` tokens through a weight matrix: 2 FLOPs per weight and row,
    over the weight's ``bits_per_weight / 8`` bytes (the activations' bytes are left out: small)."""
    check_number("rows", rows, 0, low_open=True)
    check_number("bits_per_weight", bits_per_weight, 0, low_open=True)
    return 2 * rows / (bits_per_weight / 8)
