"""Pipeline parallelism and its bubble (GPipe, Huang et al. 2019).

The model's blocks are cut into p consecutive *stages*, one per rank; a batch is cut into m
*micro-batches*. Stage s receives micro-batch i from stage s - 1, runs its blocks, and sends the
result on. With every stage taking time t per micro-batch, the last micro-batch leaves the last
stage after (m + p - 1) t, while each stage was busy only m t of it, so the fraction of
stage-time spent idle -- the *bubble* -- is

    (p - 1) / (m + p - 1).

More micro-batches shrink it (GPipe's rule of thumb: m >= 4p); a backward pass has the same bubble
again. :func:`pipeline_forward` runs the schedule for real (send/recv between processes) and
measures each stage's busy time, so the formula can be checked against a clock.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .._checks import check_pipeline
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
                     d_model: int = 128, layers_per_stage: int = 2, seed: int = 0) -> dict:
    """Run on every rank of a group (rank = stage): push ``micro_batches`` micro-batches of
    (rows, length, d_model) through the stages. Returns this stage's busy seconds, the wall time
    from the common start to its last send, and (last stage) the outputs, for checking them
    against the unsplit model."""
    check_pipeline(world_size, micro_batches)
    stage = pipeline_stages(world_size, layers_per_stage, d_model, seed)[rank]
    inputs = torch.randn(micro_batches, rows, length, d_model, generator=torch.Generator().manual_seed(seed + 1))
    buffer = torch.empty(rows, length, d_model)
    stage(inputs[0])  # warm up the kernels outside the clock
    dist.barrier()
    start, busy, outputs = time.perf_counter(), 0.0, []
    for i in range(micro_batches):
        if rank == 0:
            x = inputs[i]  # (rows, length, d_model)
        else:
            dist.recv(buffer, src=rank - 1)  # waiting here is the bubble
            x = buffer
        t0 = time.perf_counter()
        y = stage(x)  # (rows, length, d_model)
        busy += time.perf_counter() - t0
        if rank < world_size - 1:
            dist.send(y.contiguous(), dst=rank + 1)
        else:
            outputs.append(y.clone())
    wall = time.perf_counter() - start
    walls = torch.tensor([wall])
    dist.all_reduce(walls, op=dist.ReduceOp.MAX)  # the pipeline's time: until the last stage is done
    result = {"busy": busy, "wall": walls.item()}
    if rank == world_size - 1:
        result["outputs"] = torch.stack(outputs)  # (m, rows, length, d_model)
        result["inputs"] = inputs
    return result


def measured_bubble(results: list[dict]) -> float:
    """The idle fraction of stage-time from :func:`pipeline_forward`'s per-rank results:
    1 - (sum of busy seconds) / (p * the pipeline's wall time)."""
    wall = results[0]["wall"]
    return 1 - sum(r["busy"] for r in results) / (len(results) * wall)
