"""Chapter 19 (Quantized decoding) exercises: absmax int8, one Q4_1 block read byte by byte, the
bandwidth ceiling of decoding. Each checker compares with the library's public functions
(:mod:`transformer_lib.quantization`) or with a property every right answer has."""
import numpy as np
import torch

from ..quantization import dequantize_blocks, quantize_blocks
from ..quantization.roofline import decode_ceiling
from ._core import NotYet, compare_number_cases, exercise, seed_cpu, to_numpy


def _weight_groups():
    seed_cpu(19)
    w = torch.randn(6, 32) * 0.05
    w[1, 7] = 0.9  # an outlier: its group's scale grows with it
    w[2] = w[2].abs()  # a group with no negative weight
    w[3] = 0.0  # an all-zero group: the scale is 0 and every code is 0
    return w


@exercise("quantization.absmax_int8", call="absmax_quantize(w)",
          hint="d = max|w| / 127 per row (one row = one group); q = round(w / d), an integer from -127 to 127; "
               "return (q, d); a row of zeros has d = 0 and q = 0")
def _check_absmax_int8(answer):
    w = _weight_groups()
    out = answer(w.clone())
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise NotYet("return a pair (q, d): the codes (6, 32) and one scale per row (6,)")
    q, d = to_numpy(out[0], "your codes q").astype(np.float64), to_numpy(out[1], "your scales d")
    d = d.astype(np.float64).reshape(-1)
    if q.shape != (6, 32) or d.shape != (6,):
        raise NotYet(f"expected q of shape (6, 32) and d of shape (6,), got {q.shape} and {d.shape}")
    if not np.array_equal(q, np.round(q)) or np.abs(q).max() > 127:
        raise NotYet("the codes q must be integers from -127 to 127")
    top = w.abs().amax(-1).double().numpy()
    if not np.allclose(d, top / 127, rtol=1e-3, atol=1e-12):  # float16-rounded scales are fine
        raise NotYet(f"row {int(np.argmax(np.abs(d - top / 127)))}: the scale should be max|w| / 127 of that row")
    error = np.abs(w.double().numpy() - d[:, None] * q)
    if (error > d[:, None] * 0.5 * (1 + 1e-3) + 1e-9).any():
        raise NotYet("some d * q is more than half a step d/2 from its weight: round w / d to the nearest integer")
    library = dequantize_blocks(quantize_blocks(w, 8), "q8_0").double().numpy()
    worst = np.abs(library - d[:, None] * q).max()
    return f"codes and scales right on all 6 groups (outlier, positive, zero); d q within {worst:.1e} of q8_0's."


def _q4_1_blocks():
    seed_cpu(41)
    w = torch.randn(5, 32) * 0.08
    w[0, 31] = -0.7  # an outlier at the end of the block (it lands in a high nibble)
    w[1] = w[1].abs() + 0.2  # all positive: the minimum is far from 0
    return quantize_blocks(w, 4)  # (5, 20) uint8: one block per row


@exercise("quantization.q4_1_block", call="decode_q4_1(block)",
          hint="d = bytes 0-1 and m = bytes 2-3 as float16 (numpy's frombuffer or torch's view); byte 4 + j "
               "holds q_j in its low four bits and q_(j+16) in its high four bits; w = d * q + m")
def _check_q4_1_block(answer):
    blocks = _q4_1_blocks()
    expected = dequantize_blocks(blocks, "q4_1").numpy()
    for n in range(blocks.shape[0]):
        got = to_numpy(answer(bytes(blocks[n].tolist())), "your weights").astype(np.float64).reshape(-1)
        if got.shape != (32,):
            raise NotYet(f"a block holds 32 weights; you returned {got.shape[0]}")
        if not np.allclose(got, expected[n], rtol=1e-6, atol=1e-7):
            wrong = int(np.argmax(np.abs(got - expected[n])))
            raise NotYet(f"block #{n + 1}: weight {wrong} should be {expected[n][wrong]:.5f}, you have {got[wrong]:.5f}")
    return f"all {blocks.shape[0]} blocks decoded exactly as the kernel reads them."


@exercise("quantization.decode_ceiling", call="ceiling(weight_bytes, bandwidth_gb_s)",
          hint="every token reads every weight once: tokens/s = bytes per second / bytes per token, "
               "and 1 GB/s is 10^9 bytes per second")
def _check_decode_ceiling(answer):
    cases = [(540e6, 15.0), (96.6e6, 15.0), (143e6, 15.0), (1e9, 100.0), (14e9, 3350.0)]
    return compare_number_cases(
        answer, cases, decode_ceiling, what="your tokens/s", rtol=1e-6, atol=1e-8,  # np.isclose's default atol
        wrong=lambda n, got, want, weight_bytes, bandwidth: f"{weight_bytes / 1e6:.0f} MB at {bandwidth:g} GB/s: "
                                                            f"expected {want:.1f} tokens/s, got {got:.4g}",
        summary="(weights, bandwidth) cases, from SmolLM2 on this CPU to a 7B model on a GPU.")
