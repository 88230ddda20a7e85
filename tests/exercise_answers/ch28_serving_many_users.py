"""Answers for the checkers of transformer_lib/exercises/ch28_serving_many_users.py: the reference
solution, right answers written differently, and wrong answers each checker must reject."""
import numpy as np
import torch


def slots_reference(table, positions, block_size):
    return [table[p // block_size] * block_size + p % block_size for p in positions]


def _slots_torch(table, positions, block_size):
    t, p = torch.tensor(table), torch.tensor(positions)
    return t[p // block_size] * block_size + p % block_size


def _slots_divmod(table, positions, block_size):
    out = []
    for p in positions:
        b, off = divmod(p, block_size)
        out.append(table[b] * block_size + off)
    return np.array(out)


def _slots_no_table(table, positions, block_size):  # contiguous: ignores the table
    return list(positions)


def _slots_offset_only(table, positions, block_size):
    return [table[p // block_size] + p % block_size for p in positions]


def _slots_wrong_block(table, positions, block_size):  # uses the position as the table index
    return [table[min(p, len(table) - 1)] * block_size + p % block_size for p in positions]


def _slots_first_block(table, positions, block_size):
    return [table[0] * block_size + p for p in positions]


def mask_reference(lengths, L):
    W = max(lengths) + L
    return [[[j <= n + t for j in range(W)] for t in range(L)] for n in lengths]


def _mask_torch(lengths, L):
    n = torch.tensor(lengths)
    q = n[:, None] + torch.arange(L)  # (B, L)
    return (torch.arange(int(n.max()) + L)[None, None] <= q[..., None])[:, None]  # (B, 1, L, W)


def _mask_numpy_int(lengths, L):
    n = np.array(lengths)
    return (np.arange(n.max() + L)[None, None] <= (n[:, None] + np.arange(L))[..., None]).astype(np.int64)


def _mask_strict(lengths, L):  # forgets the token's own key
    W = max(lengths) + L
    return [[[j < n + t for j in range(W)] for t in range(L)] for n in lengths]


def _mask_end_aligned(lengths, L):  # every row as long as the longest (a left-padded causal mask)
    W = max(lengths) + L
    return [[[j <= W - L + t for j in range(W)] for t in range(L)] for _ in lengths]


def _mask_padding_only(lengths, L):  # hides the pads but is not causal among the new tokens
    W = max(lengths) + L
    return [[[j < n + L for j in range(W)] for t in range(L)] for n in lengths]


def _mask_inverted(lengths, L):
    W = max(lengths) + L
    return [[[j > n + t for j in range(W)] for t in range(L)] for n in lengths]


def step_reference(batch, weight_bytes, bandwidth, flops_per_row, peak_flops):
    return max(weight_bytes / bandwidth, batch * flops_per_row / peak_flops)


ANSWERS = {
    "serving.block_table": {
        "solution": lambda: slots_reference,
        "alternatives": lambda: [_slots_torch, _slots_divmod],
        "wrong": lambda: [_slots_no_table, _slots_offset_only, _slots_wrong_block, _slots_first_block],
    },
    "serving.ragged_mask": {
        "solution": lambda: mask_reference,
        "alternatives": lambda: [_mask_torch, _mask_numpy_int],
        "wrong": lambda: [_mask_strict, _mask_end_aligned, _mask_padding_only, _mask_inverted],
    },
    "serving.decode_step": {
        "solution": lambda: step_reference,
        "alternatives": lambda: [lambda B, w, bw, f, p: np.maximum(w / bw, B * f / p),
                                 lambda B, w, bw, f, p: torch.tensor(max(w / bw, B * f / p), dtype=torch.float64)],
        "wrong": lambda: [lambda B, w, bw, f, p: B * w / bw,  # reads the weights once per row
                          lambda B, w, bw, f, p: w / bw + B * f / p,  # adds instead of overlapping
                          lambda B, w, bw, f, p: w / bw,  # never compute-bound
                          lambda B, w, bw, f, p: max(w / bw, f / p),  # forgets the rows
                          lambda B, w, bw, f, p: max(w / bw, B * f / p) / B],  # seconds per token
    },
}
