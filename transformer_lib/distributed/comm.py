"""Measuring communication: bytes a rank sends, against the ring all-reduce's formula.

A ring all-reduce of S bytes over N ranks is a reduce-scatter (N - 1 steps, each sending one
S/N chunk to the next rank) followed by an all-gather (N - 1 more steps): every rank sends

    2 (N - 1) / N * S bytes,

which is almost 2S and, remarkably, does not grow with N (Patarasuk and Yuan, 2009; the
algorithm behind Baidu's and Horovod's all-reduce and NCCL's rings).

We *measure* what a rank sends instead of trusting the formula: gloo writes to its TCP
sockets with ``write``/``writev``, which Linux counts in ``wchar`` of ``/proc/self/io``. The
difference of that counter around a step is the bytes this process wrote (sockets and any
file or terminal output in between, so measure around communication only).

An all-gather ideally sends (N - 1) / N * S per rank and a reduce-scatter the same; measured
here, gloo's reduce-scatter sends as much as a full all-reduce, 2 (N - 1) / N * S (it reduces
everything and keeps a slice), which is why FSDP on gloo sends more than the textbook count.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .._checks import check_choice, check_int

__all__ = ["bytes_sent", "ring_allreduce_bytes", "measure_allreduce"]


def bytes_sent() -> int:
    """Bytes this process has written so far (``wchar`` of ``/proc/self/io``; 0 where the
    file does not exist, e.g. not on Linux)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def ring_allreduce_bytes(size_bytes: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``size_bytes``: 2 (N - 1) / N * size."""
    check_int("size_bytes", size_bytes, 0)
    check_int("world_size", world_size, 1)
    return 2 * (world_size - 1) / world_size * size_bytes


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _collective(op: str, numel: int, world_size: int):
    """A call of collective ``op`` (one of COLLECTIVES, checked by the caller) on a float32 tensor
    of ``numel`` elements (the full size S)."""
    full = torch.ones(numel)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full)
    shard = torch.ones(numel // world_size)
    if op == "all_gather":  # every rank contributes S/N and receives S
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        return lambda: gather(full[:len(shard) * world_size], shard)
    # "reduce_scatter": every rank contributes S and receives its summed S/N
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return lambda: scatter(shard, full[:len(shard) * world_size])


def measure_allreduce(rank: int, world_size: int, numels: list[int], repeats: int = 3,
                      op: str = "all_reduce") -> list[dict]:
    """Run on every rank of a group: for each size, run the collective ``op`` (default
    all-reduce) on float32 tensors of that many elements ``repeats`` times and return this rank's
    bytes sent per call and the best time (seconds)."""
    check_choice("op", op, COLLECTIVES)
    rows = []
    for numel in numels:
        call = _collective(op, numel, world_size)
        call()  # warm up the connections
        best, sent = float("inf"), 0
        for _ in range(repeats):
            dist.barrier()
            before, start = bytes_sent(), time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
            sent = bytes_sent() - before
        rows.append({"op": op, "numel": numel, "bytes": 4 * numel, "sent": sent, "seconds": best})
    return rows
