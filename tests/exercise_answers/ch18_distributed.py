"""Answers for the checkers of transformer_lib/exercises/ch18_distributed.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def _allreduce_bytes(size_bytes, world_size):
    return 2 * (world_size - 1) / world_size * size_bytes


def _zero_memory(num_params, world_size, stage):
    weights, grads, adam = 4 * num_params, 4 * num_params, 8 * num_params
    if stage >= 1:
        adam /= world_size
    if stage >= 2:
        grads /= world_size
    if stage >= 3:
        weights /= world_size
    return weights + grads + adam


def _zero_table(num_params, world_size, stage):  # the paper's table, one row per stage
    n, P = world_size, num_params
    return [16 * P, 8 * P + 8 * P / n, 4 * P + 12 * P / n, 16 * P / n][stage]


def _bubble_fraction(stages, micro_batches):
    return (stages - 1) / (micro_batches + stages - 1)


ANSWERS = {
    "distributed.allreduce_bytes": {
        "solution": lambda: _allreduce_bytes,
        "alternatives": lambda: [
            lambda s, n: 2 * s * (1 - 1 / n),
            lambda s, n: np.float64(s) / n * 2 * (n - 1),  # NumPy
            lambda s, n: torch.tensor(2.0 * (n - 1) * s / n, dtype=torch.float64),  # one-element tensor
        ],
        "wrong": lambda: [
            lambda s, n: s,  # the tensor once
            lambda s, n: 2 * s,  # the large-N limit
            lambda s, n: (n - 1) / n * s,  # one phase only
            lambda s, n: 2 * (n - 1) * s,  # whole tensors instead of chunks
            lambda s, n: (n - 1) * s,  # a naive gather to one rank
        ],
    },
    "distributed.zero_memory": {
        "solution": lambda: _zero_memory,
        "alternatives": lambda: [_zero_table, lambda P, n, st: np.int64(16 * P) if st == 0 else _zero_table(P, n, st)],
        "wrong": lambda: [
            lambda P, n, st: 16 * P / n,  # every stage as stage 3
            lambda P, n, st: 16 * P if st < 3 else 16 * P / n,  # stages 1 and 2 save nothing
            lambda P, n, st: [16 * P, 4 * P + 12 * P / n, 8 * P + 8 * P / n, 16 * P / n][st],  # stages 1 and 2 swapped
            lambda P, n, st: [2 * P + 2 * P + 12 * P, 4 * P + 12 * P / n, 2 * P + 14 * P / n, 16 * P / n][st],
            lambda P, n, st: 12 * P / n if st == 3 else _zero_table(P, n, st),  # forgets the weights at stage 3
        ],
    },
    "distributed.bubble_fraction": {
        "solution": lambda: _bubble_fraction,
        "alternatives": lambda: [
            lambda p, m: 1 - m / (m + p - 1),  # one minus the busy share
            lambda p, m: np.float32(p - 1) / np.float64(m + p - 1),
        ],
        "wrong": lambda: [
            lambda p, m: (p - 1) / m,  # relative to the ideal time, not the total
            lambda p, m: (p - 1) / (m + p),
            lambda p, m: 1 / m,
            lambda p, m: p / (m + p - 1),
        ],
    },
}
