"""Answers for the checkers of transformer_lib/exercises/ch19_quantization.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def absmax_reference(w):
    d = w.abs().amax(-1) / 127
    q = torch.where(d[:, None] > 0, w / d.clamp_min(1e-30)[:, None], torch.zeros_like(w)).round()
    return q.to(torch.int8), d


def _absmax_numpy_half(w):  # float16 scales, as q8_0 stores them, in NumPy
    a = np.asarray(w, dtype=np.float32)
    d = (np.abs(a).max(-1) / 127).astype(np.float16).astype(np.float32)
    safe = np.where(d > 0, d, 1.0)
    return np.clip(np.rint(a / safe[:, None]), -127, 127).astype(np.int8) * (d[:, None] > 0), d


def _absmax_loop(w):
    qs, ds = [], []
    for row in w.tolist():
        d = max(abs(x) for x in row) / 127
        ds.append(d)
        qs.append([round(x / d) if d else 0 for x in row])
    return qs, ds


def _absmax_truncates(w):
    d = w.abs().amax(-1) / 127
    return torch.nan_to_num(w / d[:, None]).trunc(), d


def _absmax_255_levels(w):  # scale for 0..255, as if unsigned
    d = w.abs().amax(-1) / 255
    return torch.nan_to_num(w / d[:, None]).round().clamp(-127, 127), d


def _absmax_per_tensor(w):
    d = w.abs().max() / 127
    return (w / d).round(), d.repeat(w.shape[0])


def _absmax_floats(w):  # returns d q instead of the integer codes
    q, d = absmax_reference(w)
    return q.float() * d[:, None], d


def _absmax_mean_scale(w):
    d = w.abs().mean(-1) / 127 * 4
    return torch.nan_to_num(w / d[:, None]).round().clamp(-127, 127), d


def decode_q4_1_reference(block):
    b = np.frombuffer(block, dtype=np.uint8)
    d, m = b[0:2].view(np.float16).astype(np.float32)[0], b[2:4].view(np.float16).astype(np.float32)[0]
    q = np.concatenate([b[4:] & 15, b[4:] >> 4]).astype(np.float32)
    return d * q + m


def _decode_q4_1_torch(block):
    b = torch.tensor(list(block), dtype=torch.uint8)
    d, m = b[0:2].view(torch.float16).float(), b[2:4].view(torch.float16).float()
    return d * torch.cat([b[4:] & 15, b[4:] >> 4]).float() + m


def _decode_q4_1_loop(block):
    import struct
    d, m = struct.unpack("<ee", block[:4])
    low = [d * (x & 15) + m for x in block[4:]]
    high = [d * (x >> 4) + m for x in block[4:]]
    return low + high


def _decode_high_first(block):
    b = np.frombuffer(block, dtype=np.uint8)
    d, m = b[0:2].view(np.float16)[0], b[2:4].view(np.float16)[0]
    return float(d) * np.concatenate([b[4:] >> 4, b[4:] & 15]) + float(m)


def _decode_interleaved(block):  # byte j as weights 2j, 2j + 1
    b = np.frombuffer(block, dtype=np.uint8)
    d, m = float(b[0:2].view(np.float16)[0]), float(b[2:4].view(np.float16)[0])
    return d * np.stack([b[4:] & 15, b[4:] >> 4], axis=1).reshape(-1) + m


def _decode_no_minimum(block):
    b = np.frombuffer(block, dtype=np.uint8)
    d = float(b[0:2].view(np.float16)[0])
    return d * np.concatenate([b[4:] & 15, b[4:] >> 4])


def _decode_swapped(block):  # minimum first, scale second
    b = np.frombuffer(block, dtype=np.uint8)
    m, d = float(b[0:2].view(np.float16)[0]), float(b[2:4].view(np.float16)[0])
    return d * np.concatenate([b[4:] & 15, b[4:] >> 4]) + m


def _decode_signed(block):  # codes as -8..7
    b = np.frombuffer(block, dtype=np.uint8)
    d, m = float(b[0:2].view(np.float16)[0]), float(b[2:4].view(np.float16)[0])
    return d * (np.concatenate([b[4:] & 15, b[4:] >> 4]).astype(np.float64) - 8) + m


def ceiling_reference(weight_bytes, bandwidth_gb_s):
    return bandwidth_gb_s * 1e9 / weight_bytes


ANSWERS = {
    "quantization.absmax_int8": {
        "solution": lambda: absmax_reference,
        "alternatives": lambda: [_absmax_numpy_half, _absmax_loop],
        "wrong": lambda: [_absmax_truncates, _absmax_255_levels, _absmax_per_tensor, _absmax_floats,
                          _absmax_mean_scale],
    },
    "quantization.q4_1_block": {
        "solution": lambda: decode_q4_1_reference,
        "alternatives": lambda: [_decode_q4_1_torch, _decode_q4_1_loop],
        "wrong": lambda: [_decode_high_first, _decode_interleaved, _decode_no_minimum, _decode_swapped,
                          _decode_signed],
    },
    "quantization.decode_ceiling": {
        "solution": lambda: ceiling_reference,
        "alternatives": lambda: [lambda b, g: np.float64(g) * 1e9 / np.float64(b),
                                 lambda b, g: torch.tensor(g * 1e9 / b, dtype=torch.float64)],
        "wrong": lambda: [lambda b, g: g / b,  # forgets giga
                          lambda b, g: b / (g * 1e9),  # seconds per token
                          lambda b, g: g * 1e9 / (8 * b),  # bits
                          lambda b, g: g * 2**30 / b * 1.2,
                          lambda b, g: 2 * g * 1e9 / b],  # counts FLOPs
    },
}
