"""Pipeline parallelism and its bubble (GPipe, Huang et al. 2019).

The model's blocks are cut into p consecutive *stages*, one per rank; a batch is cut into m
*micro-batches*. Stage s receives micro-batch i from stage s - 1, runs its blocks, and sends the
result on. With every stage taking time t per micro-batch, the last micro-batch leaves the last
stage after (m + p - 1) t, while each stage was busy only m t of it, so the fraction of
stage-time spent idle -- the *bubble* -- is

    (p - 1) / (m + p - 1).

More micro-batches shrink it (GPipe's rule of thumb: m >= 4p); a backward pass has the same bubble
again. :func:`pipeline_forward` runs the schedule for real (send/recv between processes) and
measures each stage's busy time, so the formula can be checked against a clock (with stages of a
fixed duration, ``stage_seconds``, on a machine whose cores are shared).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .._checks import check_number, check_pipeline
from ..device import seed_everything
from ..layers import TransformerBlock

__all__ = ["bubble_fraction", "pipeline_stages", "pipeline_forward"]


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """Idle fraction of a GPipe forward (or backward) pass: (p - 1) / (m + p - 1)."""
    check_pipeline(stages, micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_stages(stages: int, layers_per_stage: int = 2, d_model: int = 128, seed: int = 0) -> list[torch.nn.Module]:
    """The whole model (``stages * layers_per_stage`` encoder layers, seeded) cut into stages."""
    seed_everything(seed)
    layers = [TransformerBlock(d_model, 4, 4 * d_model).eval() for _ in range(stages * layers_per_stage)]
    return [torch.nn.Sequential(*layers[s * layers_per_stage:(s + 1) * layers_per_stage]) for s in range(stages)]


@torch.no_grad()
def pipeline_forward(rank: int, world_size: int, micro_batches: int, rows: int = 4, length: int = 64,
                     d_model: int = 128, layers_per_stage: int = 2, seed: int = 0,
                     stage_seconds: float = 0.0) -> dict:
    """Run on every rank of a group (rank = stage): push ``micro_batches`` micro-batches of
    (rows, length, d_model) through the stages. Returns this stage's busy seconds, the pipeline's
    wall time (from the first stage's start to the last stage's end) and (last stage) the outputs,
    for checking them against the unsplit model.

    ``stage_seconds`` > 0 adds that many seconds of sleep to a stage's work on every micro-batch:
    work of a fixed duration that needs no core, as a GPU kernel is for the CPU thread waiting on
    it. With small stages the schedule then sets the timing, not how busy the machine's cores are
    (stages that compute on cores shared with other processes are slowed down by them at random
    moments, and each such delay counts as busy time on one rank and as idle time on the next)."""
    check_pipeline(world_size, micro_batches)
    check_number("stage_seconds", stage_seconds, 0)
    stage = pipeline_stages(world_size, layers_per_stage, d_model, seed)[rank]
    inputs = torch.randn(micro_batches, rows, length, d_model, generator=torch.Generator().manual_seed(seed + 1))
    stage(inputs[0])  # warm up the kernels outside the clock
    # As real pipelines do, a stage posts its receives ahead (irecv) and sends without waiting for
    # the next stage to take the message (isend): it stalls only when its input has not arrived.
    received = [torch.empty(rows, length, d_model) for _ in range(micro_batches)] if rank > 0 else []
    dist.barrier()
    receives = [dist.irecv(buffer, src=rank - 1) for buffer in received]
    # time.time(): the one clock every process on the machine reads alike. Each rank leaves the
    # barrier at its own moment (later when the machine is busy), so the pipeline's wall time is
    # taken from the earliest start to the latest end, not as the longest of the ranks' own spans.
    start, busy, outputs, sends = time.time(), 0.0, [], []
    for i in range(micro_batches):
        if rank == 0:
            x = inputs[i]  # (rows, length, d_model)
        else:
            receives[i].wait()  # waiting here is the bubble
            x = received[i]
        t0 = time.perf_counter()
        y = stage(x)  # (rows, length, d_model)
        if stage_seconds:
            time.sleep(stage_seconds)
        busy += time.perf_counter() - t0
        if rank < world_size - 1:
            outputs.append(y.contiguous())  # kept alive until its send completes
            sends.append(dist.isend(outputs[-1], dst=rank + 1))
        else:
            outputs.append(y.clone())
    for send in sends:
        send.wait()
    span = torch.tensor([-start, time.time()], dtype=torch.float64)
    dist.all_reduce(span, op=dist.ReduceOp.MAX)  # (-earliest start, latest end)
    result = {"busy": busy, "wall": (span[0] + span[1]).item()}
    if rank == world_size - 1:
        result["outputs"] = torch.stack(outputs)  # (m, rows, length, d_model)
        result["inputs"] = inputs
    return result


def measured_bubble(results: list[dict]) -> float:
    """The idle fraction of stage-time from :func:`pipeline_forward`'s per-rank results:
    1 - (sum of busy seconds) / (p * the pipeline's wall time)."""
    wall = results[0]["wall"]
    return 1 - sum(r["busy"] for r in results) / (len(results) * wall)
