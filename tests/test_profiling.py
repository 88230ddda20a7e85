"""transformer_lib.profiling: the one timer (time_call, median_time), peak memory, machine_info,
and the measured critical path and FLOPs (trace_ops, count_flops) that chapters 9 and 10 print."""
import pytest
import torch

import transformer_lib as tl
from transformer_lib import profiling
from transformer_lib.probes import record_attention
from transformer_lib.profiling import count_flops, time_call, trace_ops


def test_measuring_helpers():
    assert profiling.median_time(lambda: sum(range(1000)), repeat=3) > 0
    calls = []
    assert profiling.time_call(lambda: calls.append(1), repeats=4, warmup=2, statistic="median") >= 0
    assert len(calls) == 6
    with pytest.raises(ValueError, match="statistic must be one of"):
        profiling.time_call(lambda: None, statistic="mean")
    info = profiling.machine_info()
    assert info["cpu_count"] >= 1 and info["torch"] == torch.__version__
    peak = profiling.peak_memory(lambda: torch.ones(16 * 2**20).sum())  # a 64 MiB temporary
    if peak is None:
        pytest.skip("no peak-memory counter on this platform")
    assert 60 * 2**20 <= peak <= 200 * 2**20
    # below glibc's 32 MiB mmap maximum, a freed block may stay in the heap and be reused without
    # the resident size growing: every measurement must still see its temporary, also after the
    # allocator has been warmed again by the previous one
    for _ in range(3):
        peak = profiling.peak_memory(lambda: torch.ones(2 * 2**20).sum())  # an 8 MiB temporary
        assert 7 * 2**20 <= peak <= 40 * 2**20


def test_allocator_is_warm_after_a_peak_measurement():
    """After peak_memory, a freed 8 MiB block is reused, not handed back to the OS and faulted in
    afresh by the next allocation of that size. In a fresh process: in this one, what earlier tests
    left in malloc's heap decides whether freeing a block lets glibc trim the heap's top."""
    import subprocess
    import sys

    script = """
import torch
from transformer_lib import profiling
if profiling.peak_memory(lambda: torch.ones(2 * 2**20).sum()) is None:
    print("skip")
else:
    torch.ones(2 * 2**20).sum()  # allocated and freed
    before, _ = profiling._rss_kib()
    again = torch.ones(2 * 2**20)  # held while the resident size is read
    after, _ = profiling._rss_kib()
    print(after - before)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    growth = done.stdout.split()[-1]
    if growth == "skip":
        pytest.skip("no peak-memory counter on this platform")
    assert int(growth) < 2 * 1024  # KiB: the 8 MiB came from memory already resident


def test_time_call_cpu_time_restores_threads_and_measures_work():
    threads = torch.get_num_threads()
    a = torch.randn(256, 256)
    t_small = time_call(torch.mm, a[:32, :32], a[:32, :32], cpu_time=True)
    t_big = time_call(torch.mm, a, a, repeats=3, cpu_time=True)
    assert torch.get_num_threads() == threads
    assert 0 <= t_small < t_big  # 512x the multiply-adds takes longer even with noise
    assert time_call(lambda: None) >= 0


@pytest.mark.parametrize("n", [1, 5, 33])
def test_trace_ops_rnn_depth_grows_with_n(n):
    tl.seed_everything(0)
    rnn = tl.ElmanRNN(8, 8)
    trace = trace_ops(rnn, torch.randn(2, n, 8))
    # new_zeros / input projection, then addmm, add, tanh per step, then stack
    assert trace.depth == 3 * n + 2
    assert trace.ops == 3 * n + 3
    assert trace.counts["tanh"] == n


def test_trace_ops_encoder_depth_independent_of_n_and_additive_in_layers():
    tl.seed_everything(0)
    layer = tl.TransformerBlock(16, 4, 32).eval()
    depths = {trace_ops(layer, torch.randn(2, n, 16)).depth for n in (1, 8, 64)}
    assert len(depths) == 1
    one = depths.pop()
    stack = tl.Encoder(layer, 3).eval()
    assert trace_ops(stack, torch.randn(2, 8, 16)).depth == 3 * one


def test_trace_ops_inplace_write_through_view_counts():
    def f(x):
        buf = torch.zeros(2, 3)
        buf[0].copy_(x.exp())  # write through a view: buf now depends on exp(x)
        return buf.sum()
    assert trace_ops(f, torch.randn(3)).depth == 3  # exp -> copy_ -> sum


def test_count_flops_matches_cost_model_with_explicit_attention():
    tl.seed_everything(0)
    B, n, d, d_ff = 2, 12, 32, 80
    layer = tl.TransformerBlock(d, 4, d_ff).eval()
    x = torch.randn(B, n, d)
    with record_attention(layer, weights=True):  # the readable path: explicit Q K^T and A V
        fc = count_flops(layer, x)
    model = tl.block_macs(n, d, expansion=d_ff / d)
    assert fc.total == 2 * B * model.total
    assert fc.by_module["ffn"] == 2 * B * model.ffn
    assert fc.by_module["self_attn"] == 2 * B * model.attention
    assert fc.by_module["self_attn.q_proj"] == 2 * B * n * d * d
