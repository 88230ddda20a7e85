"""Chapter 9 (RNN vs Transformer) exercises."""

import torch

from ..cost import Level, encoder_levels, rnn_levels, schedule_time, sequential_steps
from ..rnn import ElmanRNN
from ._core import compare_arrays, compare_value, exercise, seed_cpu, to_int


@exercise("rnn.elman_step",
          hint="h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh): rnn.ih and rnn.hh are the two nn.Linear layers")
def _check_step(answer):
    g = torch.Generator().manual_seed(0)
    seed_cpu(0)  # the layers' init draws from the global CPU generator (restored after every check)
    n = 0
    for B, I, H in [(1, 3, 3), (4, 5, 7), (2, 8, 4)]:
        rnn = ElmanRNN(I, H)
        with torch.no_grad():
            rnn.hh.bias.normal_(generator=g)  # a non-zero bias on both layers, so forgetting one shows
            x_t, h = torch.randn(B, I, generator=g), torch.randn(B, H, generator=g)
            got, expected = answer(rnn, x_t, h), rnn(x_t[:, None], h)[0][:, 0]  # one step of ElmanRNN from h
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
               "(l, t-1)); 6 matrix-product levels per Transformer layer, whatever n is")
def _check_steps(answer):
    cases = [(m, n, L) for m in ("rnn", "transformer") for n in (1, 7, 512) for L in (1, 3)]
    for m, n, L in cases:
        what = f"the count for model={m!r}, n={n}, num_layers={L}"
        compare_value(to_int(answer(m, n, L), what), sequential_steps(m, n, L), what, rtol=0)
    return f"right for all {len(cases)} (model, n, layers) combinations."


@exercise("rnn.schedule_time",
          hint="each level takes ceil(macs / lanes) ticks, and the levels run one after another")
def _check_schedule(answer):
    cases = [(rnn_levels(5, 3, 2), 1), (rnn_levels(5, 3, 2), 7), (rnn_levels(64, 16), 10 ** 9),
             (encoder_levels(10, 8), 5), (encoder_levels(100, 32, 4), 1000),
             ([Level("a", 1), Level("b", 10), Level("c", 0)], 4)]
    for k, (levels, lanes) in enumerate(cases, 1):
        got = to_int(answer(levels, lanes), f"the number of ticks of test #{k}")
        expected = schedule_time(levels, lanes)
        compare_value(got, expected, f"test #{k} ({len(levels)} levels, lanes={lanes}): your time", rtol=0)
    return f"matches the library on all {len(cases)} schedules."
