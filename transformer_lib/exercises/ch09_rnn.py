"""Chapter 9 (RNN vs Transformer) exercises."""
import math

import numpy as np
import torch

from ..cost import Level, encoder_levels, rnn_levels, schedule_time, sequential_steps
from ..rnn import ElmanRNN
from ._core import NotYet, compare_arrays, compare_value, exercise, seed_cpu, to_int


def _elman_step_reference(rnn, x_t, h):
    return torch.tanh(rnn.ih(x_t) + rnn.hh(h))


@exercise("rnn.elman_step",
          hint="h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh): rnn.ih and rnn.hh are the two nn.Linear layers",
          wrong_answers=lambda: [lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t)),  # forgets the previous state
                                 lambda rnn, x_t, h: torch.relu(rnn.ih(x_t) + rnn.hh(h)),  # wrong nonlinearity
                                 lambda rnn, x_t, h: torch.tanh(x_t @ rnn.ih.weight.T + h @ rnn.hh.weight.T),
                                 lambda rnn, x_t, h: torch.sigmoid(rnn.ih(x_t) + rnn.hh(h)),  # sigmoid, not tanh
                                 lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t)) + rnn.hh(h),  # tanh on one term only
                                 lambda rnn, x_t, h: torch.tanh(rnn.ih(x_t) + rnn.hh(h) + rnn.hh.bias)],  # b_hh twice
          solution=lambda: _elman_step_reference,
          alternative_answers=lambda: [
              lambda rnn, x_t, h: torch.tanh(x_t @ rnn.ih.weight.T + rnn.ih.bias + h @ rnn.hh.weight.T + rnn.hh.bias),
              lambda rnn, x_t, h: torch.tanh(torch.einsum("bi,hi->bh", x_t, rnn.ih.weight)  # einsum
                                             + torch.einsum("bj,hj->bh", h, rnn.hh.weight) + rnn.ih.bias + rnn.hh.bias),
          ])
def _check_step(answer):
    g = torch.Generator().manual_seed(0)
    seed_cpu(0)  # the layers' init draws from the global CPU generator (restored after every check)
    n = 0
    for B, I, H in [(1, 3, 3), (4, 5, 7), (2, 8, 4)]:
        rnn = ElmanRNN(I, H)
        with torch.no_grad():
            rnn.hh.bias.normal_(generator=g)  # a non-zero bias on both layers, so forgetting one shows
            x_t, h = torch.randn(B, I, generator=g), torch.randn(B, H, generator=g)
            got, expected = answer(rnn, x_t, h), _elman_step_reference(rnn, x_t, h)
        n += 1
        compare_arrays(got, expected, what=f"h_t for batch {B}, input {I}, hidden {H}")
        # chain the steps: running them over a sequence must give ElmanRNN's outputs
        xs = torch.randn(B, 6, I, generator=g)
        with torch.no_grad():
            state = torch.zeros(B, H)
            outs = []
            for t in range(xs.shape[1]):
                state = answer(rnn, xs[:, t], state)
                outs.append(state)
            compare_arrays(torch.stack(outs, 1), rnn(xs)[0], what="outputs of your step run over 6 tokens")
    return f"matches ElmanRNN on all {n} test inputs, step by step and over whole sequences."


@exercise("rnn.sequential_steps",
          hint="one input-projection level, then a wavefront for the RNN (cell (l, t) waits for (l-1, t) and "
               "(l, t-1)); 6 matrix-product levels per Transformer layer, whatever n is",
          wrong_answers=lambda: [lambda m, n, L: n * L if m == "rnn" else 6 * L,  # multiplies layers and steps
                                 lambda m, n, L: n + L if m == "rnn" else 1,  # a Transformer layer has levels too
                                 lambda m, n, L: n + 1 if m == "rnn" else 6 * L,  # ignores stacked RNN layers
                                 lambda m, n, L: n + L - 1 if m == "rnn" else 6 * L,  # no input-projection level
                                 lambda m, n, L: n + L if m == "rnn" else 6 * L + n],  # Transformer levels grow with n
          solution=lambda: sequential_steps,
          alternative_answers=lambda: [
              lambda m, n, L: np.int64(1 + n + L - 1 if m == "rnn" else 6 * L),  # a NumPy integer
              lambda m, n, L: float(1 + max(l + t for l in range(L) for t in range(n)) + 1)  # the wavefront, counted
              if m == "rnn" else torch.tensor(6 * L),
          ])
def _check_steps(answer):
    cases = [(m, n, L) for m in ("rnn", "transformer") for n in (1, 7, 512) for L in (1, 3)]
    for m, n, L in cases:
        what = f"the count for model={m!r}, n={n}, num_layers={L}"
        compare_value(to_int(answer(m, n, L), what), sequential_steps(m, n, L), what, rtol=0)
    return f"right for all {len(cases)} (model, n, layers) combinations."


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


@exercise("rnn.schedule_time",
          hint="each level takes ceil(macs / lanes) ticks, and the levels run one after another",
          wrong_answers=lambda: [_floor_schedule, _pooled_schedule,
                                 lambda levels, lanes: len(levels),
                                 lambda levels, lanes: max(math.ceil(lv.macs / lanes) for lv in levels),  # levels in parallel
                                 lambda levels, lanes: sum(round(lv.macs / lanes) for lv in levels)],  # rounds to nearest
          solution=lambda: schedule_time,
          alternative_answers=lambda: [lambda levels, lanes: sum(-(-lv.macs // lanes) for lv in levels),  # ceil by //
                                       _schedule_by_loop])
def _check_schedule(answer):
    cases = [(rnn_levels(5, 3, 2), 1), (rnn_levels(5, 3, 2), 7), (rnn_levels(64, 16), 10 ** 9),
             (encoder_levels(10, 8), 5), (encoder_levels(100, 32, 4), 1000),
             ([Level("a", 1), Level("b", 10), Level("c", 0)], 4)]
    for k, (levels, lanes) in enumerate(cases, 1):
        got = to_int(answer(levels, lanes), f"the number of ticks of test #{k}")
        expected = schedule_time(levels, lanes)
        if got != expected:
            raise NotYet(f"test #{k} ({len(levels)} levels, lanes={lanes}): your time is too "
                         f"{'high' if got > expected else 'low'}")
    return f"matches the library on all {len(cases)} schedules."
