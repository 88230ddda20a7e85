"""transformer_lib.distributed (chapter 18): data parallelism on 1, 2 and 4 real processes (gloo),
tensor parallelism against the dense layers, FSDP's memory per rank, measured communication, the
pipeline, the torchrun entry point and its argument errors, and the chapter's exercise checkers.

Every multi-process test starts its own ranks (``launch``: forkserver workers, or ``torchrun`` as a
subprocess on 127.0.0.1), bounds them in time and stops them by process id.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import transformer_lib.distributed as tld
from transformer_lib.exercises import get

sys.path.insert(0, str(Path(__file__).resolve().parent / "bookkit"))  # the process helpers of the tooling tests
from _servers import stop  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS, BATCH = 6, 8
PARAM_ATOL, LOSS_ATOL = 3e-5, 3e-6  # float32 rounding after 6 AdamW steps (measured: 7e-6 and 1e-6)


def _answers():
    spec = importlib.util.spec_from_file_location("ch18_answers", ROOT / "tests/exercise_answers/ch18_distributed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ANSWERS


@pytest.fixture(scope="module")
def reference():
    """One plain process, no process group, gradients of the whole batch: the run every other
    world size must reproduce."""
    with torch.random.fork_rng():
        return tld.train(0, 1, "hand", STEPS, BATCH, seed=0)


def _max_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


def _agrees(result: dict, reference: dict) -> None:
    assert _max_diff(result["state"], reference["state"]) < PARAM_ATOL
    assert max(abs(x - y) for x, y in zip(result["loss"], reference["loss"])) < LOSS_ATOL
    assert len(result["loss"]) == STEPS


def test_training_moves_the_model(reference):
    """The reference really trains (so agreeing with it means something)."""
    initial = tld.build_model(tld.book_tokens()[1], seed=0).state_dict()
    assert _max_diff(reference["state"], {k: v for k, v in initial.items() if k in reference["state"]}) > 1e-3
    assert reference["loss"][-1] < reference["loss"][0]


@functools.lru_cache(maxsize=None)
def _run(strategy: str, world_size: int) -> tuple:
    """One launched run per (strategy, ranks), shared by the invariance and the memory tests."""
    return tuple(tld.launch(tld.train, world_size, strategy, STEPS, BATCH, 0, tld.Recipe(), True, timeout=120))


@pytest.mark.parametrize("strategy,world_size", [("hand", 2), ("ddp", 1), ("ddp", 2), ("ddp", 4),
                                                 ("fsdp", 1), ("fsdp", 2), ("fsdp", 4)])
def test_world_size_invariance(reference, strategy, world_size):
    results = _run(strategy, world_size)
    _agrees(results[0], reference)  # rank 0 holds the full model
    for result in results[1:]:  # every rank logged the same global-batch losses
        assert result["loss"] == results[0]["loss"] and result["state"] == {}


def test_ddp_buckets_overlap_backward():
    """With small buckets DDP launches some all-reduces before backward has reached the first
    layer, and the buckets together hold every gradient exactly once."""
    events = tld.launch(tld.ddp_bucket_events, 2, timeout=120)[0]
    first_layer = events.index("gradient of the positional embedding")
    buckets = [e for e in events if e.startswith("bucket")]
    assert len(buckets) >= 3 and any(e.startswith("bucket") for e in events[:first_layer])
    assert events[-1] == "backward returns"
    total = sum(int(e.split("all-reduce of ")[1].split(" bytes")[0].replace(",", "")) for e in buckets)
    model = tld.build_model(tld.book_tokens()[1], seed=0)
    assert total == 4 * sum(p.numel() for p in model.parameters())


def test_different_seed_differs(reference):
    """The tolerance is far below what a real difference looks like."""
    other = tld.launch(tld.train, 2, "ddp", STEPS, BATCH, 1, timeout=120)[0]
    assert _max_diff(other["state"], reference["state"]) > 100 * PARAM_ATOL


def test_fsdp_memory_per_rank_below_unsharded():
    """Measured bytes of parameters, gradients and Adam state: DDP holds 16 bytes per parameter on
    every rank; FSDP (ZeRO-3) about 16/N, padding of the shards aside."""
    ddp = _run("ddp", 2)[0]["bytes"]
    assert ddp["total"] == tld.zero_bytes_per_rank(ddp["numel"], 2, stage=0) == 16 * ddp["numel"]
    for n in (2, 4):
        per_rank = [r["bytes"] for r in _run("fsdp", n)]
        for b in per_rank:
            assert b["total"] < ddp["total"]
            assert b["numel"] == ddp["numel"]
            ideal = tld.zero_bytes_per_rank(b["numel"], n, stage=3)
            assert 0.95 * ideal < b["total"] < 1.05 * ideal  # uneven shards: a tensor's first dim splits unevenly
        for part in ("params", "grads", "optimizer"):  # the shards together are exactly one full copy
            assert sum(b[part] for b in per_rank) == ddp[part]


def test_zero1_shards_only_the_optimizer_state():
    """ZeroRedundancyOptimizer (ZeRO-1) on 2 ranks: weights and gradients whole on each rank, the
    Adam state split so that the ranks together hold exactly one copy (8 bytes per parameter)."""
    per_rank = tld.launch(tld.zero1_state_bytes, 2, timeout=120)
    P = per_rank[0]["numel"]
    for b in per_rank:
        assert b["params"] == b["grads"] == 4 * P
        assert 0 < b["optimizer"] < 8 * P
    assert sum(b["optimizer"] for b in per_rank) == 8 * P


@pytest.mark.parametrize("world_size", [2, 4])
def test_allreduce_bytes_match_the_ring(world_size):
    rows = tld.launch(tld.measure_allreduce, world_size, [250_000, 1_000_000], 1, timeout=60)
    for per_rank in rows:
        for row in per_rank:
            expected = tld.ring_allreduce_bytes(row["bytes"], world_size)
            assert expected <= row["sent"] < expected * 1.01 + 4096  # payload plus small message headers


def tensor_parallel_case(rank: int, world_size: int) -> dict:
    """Run on every rank: the dense MLP and attention (built identically everywhere) against
    this rank's tensor-parallel shards -- outputs, input gradients and weight-gradient slices."""
    from transformer_lib.feedforward import FeedForward
    from transformer_lib.masks import causal_mask
    from transformer_lib.multihead import MultiHeadAttention

    torch.manual_seed(0)
    d, heads = 32, 4
    ffn, mha = FeedForward(d, 4 * d, activation="gelu"), MultiHeadAttention(d, heads)
    x = torch.randn(2, 7, d)
    upstream = torch.randn(2, 7, d)
    mask = causal_mask(7)
    diffs = {}
    for name, dense, shard, call in (
            ("mlp", ffn, tld.ColumnRowParallelMLP(ffn, rank, world_size), lambda m, t: m(t)),
            ("attention", mha, tld.HeadParallelAttention(mha, rank, world_size),
             lambda m, t: m(t, mask=mask)[0] if isinstance(m, MultiHeadAttention) else m(t, mask))):
        x_dense, x_tp = x.clone().requires_grad_(), x.clone().requires_grad_()
        y_dense, y_tp = call(dense, x_dense), call(shard, x_tp)
        (y_dense * upstream).sum().backward()
        (y_tp * upstream).sum().backward()
        first = ffn.linear1.weight if name == "mlp" else mha.q_proj.weight
        first_shard = shard.w1 if name == "mlp" else shard.wq
        diffs[name] = {"output": (y_dense - y_tp).abs().max().item(),
                       "input_grad": (x_dense.grad - x_tp.grad).abs().max().item(),
                       "weight_grad": (first.grad.chunk(world_size, 0)[rank] - first_shard.grad).abs().max().item(),
                       "scale": y_dense.abs().max().item()}
    return diffs


@pytest.mark.parametrize("world_size", [2, 4])
def test_tensor_parallel_equals_dense(world_size):
    for per_rank in tld.launch(tensor_parallel_case, world_size, timeout=60):
        for name, d in per_rank.items():
            assert d["scale"] > 0.01
            assert d["output"] < 1e-5 and d["input_grad"] < 1e-5 and d["weight_grad"] < 1e-5, (name, d)


def test_pipeline_matches_the_unsplit_model():
    micro = 3
    results = tld.launch(tld.pipeline_forward, 2, micro, 2, 16, 32, 1, timeout=60)
    last = results[-1]
    model = torch.nn.Sequential(*tld.pipeline_stages(2, layers_per_stage=1, d_model=32))
    with torch.no_grad():
        expected = torch.stack([model(x) for x in last["inputs"]])
    torch.testing.assert_close(last["outputs"], expected, atol=1e-5, rtol=1e-5)
    assert all(r["busy"] <= r["wall"] for r in results)


@given(st.integers(1, 16), st.integers(1, 64))
def test_bubble_fraction_properties(p, m):
    b = tld.bubble_fraction(p, m)
    assert 0 <= b < 1
    assert (b == 0) == (p == 1)
    assert tld.bubble_fraction(p, m + 1) <= b  # more micro-batches, a smaller bubble
    # idle stage-slots counted in the GPipe grid: stage s is idle for s slots before and p-1-s after
    assert b * p * (m + p - 1) == pytest.approx(sum(s + (p - 1 - s) for s in range(p)))


@given(st.integers(0, 10 ** 12), st.integers(1, 1024))
def test_zero_stages_properties(params, n):
    stages = [tld.zero_bytes_per_rank(params, n, s) for s in range(4)]
    assert stages[0] == 16 * params
    assert stages == sorted(stages, reverse=True)  # each stage saves at least as much as the last
    assert stages[3] * n == pytest.approx(stages[0])


@given(st.integers(1, 8), st.integers(1, 6))
def test_rank_rows_partition_the_batch(n, rows_per_rank):
    batch = torch.arange(n * rows_per_rank * 3).view(n * rows_per_rank, 3)
    parts = [tld.rank_rows(batch, r, n) for r in range(n)]
    assert all(len(p) == rows_per_rank for p in parts)
    assert torch.equal(torch.cat(parts), batch)


@pytest.mark.parametrize("kwargs,message", [
    (dict(strategy="zero"), "strategy must be one of"),
    (dict(steps=0), "steps must be"),
    (dict(global_batch=6, world_size=4), "global_batch must be divisible"),
    (dict(seed=-1), "seed must be"),
    (dict(steps=2.5), "steps must be"),
])
def test_bad_run_arguments(kwargs, message):
    args = dict(strategy="ddp", steps=2, global_batch=8, world_size=2, seed=0) | kwargs
    world_size = args.pop("world_size")
    with pytest.raises(ValueError, match=message):
        tld.train(0, world_size, **args)


def test_bad_library_arguments():
    with pytest.raises(ValueError, match="stage must be"):
        tld.zero_bytes_per_rank(100, 2, 4)
    with pytest.raises(ValueError, match="micro_batches must be"):
        tld.bubble_fraction(2, 0)
    with pytest.raises(ValueError, match="world_size must be"):
        tld.ring_allreduce_bytes(100, 0)
    from transformer_lib.feedforward import FeedForward
    with pytest.raises(ValueError, match="d_ff = 30 must be divisible"):
        tld.ColumnRowParallelMLP(FeedForward(8, 30), 0, 4)
    with pytest.raises(ValueError, match="world_size must be"):
        tld.launch(tld.measure_allreduce, 0, [1])


def sleeper(rank: int, world_size: int, seconds: float) -> None:
    time.sleep(seconds)


def failer(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ArithmeticError("rank one fails on purpose")


def test_launch_is_bounded_and_reports_failures():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within"):
        tld.launch(sleeper, 2, 600.0, timeout=1)  # the ranks sleep for 10 minutes: only the bound stops them
    assert time.monotonic() - start < 30
    with pytest.raises(RuntimeError, match="(?s)^rank 1 of 2 failed.*rank one fails on purpose"):
        tld.launch(failer, 2, timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [str(TORCHRUN), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), "-m", "transformer_lib.distributed", *args]
    env = os.environ | {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        stop(process, grace_s=10)  # torchrun stops its workers on SIGTERM
    return subprocess.CompletedProcess(cmd, process.returncode, out, err)


@pytest.mark.parametrize("strategy,nproc", [("fsdp", 2)])  # launch() covers the other sizes
def test_torchrun_entry_point(tmp_path, reference, strategy, nproc):
    save = tmp_path / "model.pt"
    run = _torchrun(nproc, "--strategy", strategy, "--steps", str(STEPS), "--global-batch", str(BATCH),
                    "--seed", "0", "--save", str(save))
    assert run.returncode == 0, run.stderr[-3000:]
    state = torch.load(save, weights_only=True)  # plain tensors only
    losses = json.loads(Path(f"{save}.losses.json").read_text())
    _agrees({"state": state, "loss": losses}, reference)


def test_torchrun_bad_global_batch(tmp_path):
    """Two ranks (the fewest that can disagree with a batch), each a fresh Python importing torch."""
    run = _torchrun(2, "--strategy", "ddp", "--steps", "2", "--global-batch", "3", "--save", str(tmp_path / "m.pt"),
                    timeout=60)
    assert run.returncode != 0
    assert "global_batch must be divisible by the number of processes: 3 rows do not split evenly over 2 ranks" \
        in run.stderr
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("args,message", [
    (["--strategy", "ddp", "--steps", "0", "--global-batch", "8"], "steps must be a positive integer"),
    (["--strategy", "tp", "--steps", "2", "--global-batch", "8"], "invalid choice: 'tp'"),
    (["--strategy", "ddp", "--steps", "2", "--global-batch", "8", "--save", "/no/such/folder/m.pt"],
     "does not exist"),
])
def test_entry_point_argument_errors(args, message, capsys):
    """The entry point's own main(): argparse's exit status 2 and a message naming the argument,
    before any process group exists."""
    from transformer_lib.distributed.__main__ import main
    if "--save" not in args:
        args = args + ["--save", "/tmp/unused.pt"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name", ["distributed.allreduce_bytes", "distributed.zero_memory",
                                  "distributed.bubble_fraction"])
def test_exercise_checkers(name):
    answers = _answers()[name]
    exercise = get(name)
    assert exercise.run(answers["solution"]())
    for right in answers["alternatives"]():
        assert exercise.run(right), right
    for wrong in answers["wrong"]():
        assert not exercise.run(wrong), wrong
    assert not exercise.run(...)  # a stub is "not yet", not a crash


@pytest.mark.parametrize("cuda_devices, local_world_size, expected", [
    (0, 1, "gloo"), (0, 2, "gloo"),  # no GPU: the CPU
    (1, 1, "nccl"), (2, 2, "nccl"), (8, 2, "nccl"),  # a GPU for every process on the machine
    (1, 2, "gloo"), (2, 4, "gloo"),  # fewer GPUs than processes: NCCL cannot share one GPU between ranks
])
def test_torchrun_uses_nccl_only_when_every_local_rank_has_a_gpu(cuda_devices, local_world_size, expected):
    # seen on a one-GPU machine: `torchrun --nproc-per-node 2` picked NCCL and rank 1 failed in
    # torch.cuda.set_device(1); chapter 18's torchrun cell runs two processes
    from transformer_lib.distributed.launch import choose_backend
    assert choose_backend(cuda_devices, local_world_size) == expected
