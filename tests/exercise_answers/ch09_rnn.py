"""Answers for the checkers of transformer_lib/exercises/ch09_rnn.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np
import torch

from transformer_lib.cost import schedule_time, sequential_steps


def _elman_step_reference(rnn, x_t, h):
    return torch.tanh(rnn.ih(x_t) + rnn.hh(h))


def _floor_schedule(levels, lanes):
    return sum(lv.macs // lanes for lv in levels)


def _pooled_schedule(levels, lanes):
    return math.ceil(sum(lv.macs for lv in levels) / lanes)


def _schedule_by_loop(levels, lanes):
    """A right answer: count the ticks of each level with a while loop, as a NumPy integer."""
    total = np.int64(0)
    for level in levels:
        left = level.macs
        while left > 0:
            left -= lanes
            total += 1
    return total


ANSWERS = {
    'rnn.elman_step': {
        'solution': lambda: _elman_step_reference,
        'alternatives': lambda: [
            lambda rnn, x_t, h: torch.tanh(x_t @ rnn.ih.weight.T + rnn.ih.bias + h @ rnn.hh.weight.T + rnn.hh.bias),
            lambda rnn, x_t, h: torch.tanh(torch.einsum("bi,hi->bh", x_t, rnn.ih.weight)  # einsum
                                           + torch.einsum("bj,hj->bh", h, rnn.hh.weight) + rnn.ih.bias + rnn.hh.bias),
        ],
        'wrong': lambda: [lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t)),  # forgets the previous state
                          lambda rnn, x_t, h: torch.relu(rnn.ih(x_t) + rnn.hh(h)),  # wrong nonlinearity
                          lambda rnn, x_t, h: torch.tanh(x_t @ rnn.ih.weight.T + h @ rnn.hh.weight.T),
                          lambda rnn, x_t, h: torch.sigmoid(rnn.ih(x_t) + rnn.hh(h)),  # sigmoid, not tanh
                          lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t)) + rnn.hh(h),  # tanh on one term only
                          lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t) + rnn.hh(h) + rnn.hh.bias)],  # b_hh twice
    },
    'rnn.sequential_steps': {
        'solution': lambda: sequential_steps,
        'alternatives': lambda: [
            lambda m, n, L: np.int64(1 + n + L - 1 if m == "rnn" else 6 * L),  # a NumPy integer
            lambda m, n, L: float(1 + max(l + t for l in range(L) for t in range(n)) + 1)  # the wavefront, counted
            if m == "rnn" else torch.tensor(6 * L),
        ],
        'wrong': lambda: [lambda m, n, L: n * L if m == "rnn" else 6 * L,  # multiplies layers and steps
                          lambda m, n, L: n + L if m == "rnn" else 1,  # a Transformer layer has levels too
                          lambda m, n, L: n + 1 if m == "rnn" else 6 * L,  # ignores stacked RNN layers
                          lambda m, n, L: n + L - 1 if m == "rnn" else 6 * L,  # no input-projection level
                          lambda m, n, L: n + L if m == "rnn" else 6 * L + n],  # Transformer levels grow with n
    },
    'rnn.schedule_time': {
        'solution': lambda: schedule_time,
        'alternatives': lambda: [lambda levels, lanes: sum(-(-lv.macs // lanes) for lv in levels),  # ceil by //
                                 _schedule_by_loop],
        'wrong': lambda: [_floor_schedule, _pooled_schedule,
                          lambda levels, lanes: len(levels),
                          lambda levels, lanes: max(math.ceil(lv.macs / lanes) for lv in levels),  # levels in parallel
                          lambda levels, lanes: sum(round(lv.macs / lanes) for lv in levels)],  # rounds to nearest
    },
}
