"""Distributed training (chapter 18, transformer_lib.distributed)."""
from __future__ import annotations

from .scalars import check_divisible, check_int


def check_distributed_run(strategy, steps, global_batch, world_size, seed) -> None:
    """A data-parallel run: a known strategy, positive step count, a global batch that the
    world size divides (every rank takes the same number of rows), an integer seed >= 0."""
    if not isinstance(strategy, str) or strategy not in ("hand", "ddp", "fsdp"):
        raise ValueError(f"strategy must be one of 'hand', 'ddp', 'fsdp', got {strategy!r}")
    check_int("steps", steps, 1)
    check_int("global_batch", global_batch, 1)
    check_int("world_size", world_size, 1)
    check_int("seed", seed, 0)
    if global_batch % world_size:
        raise ValueError(f"global_batch must be divisible by the number of processes: {global_batch} rows "
                         f"do not split evenly over {world_size} ranks")


def check_parallel_split(name: str, size: int, world_size: int) -> None:
    """Tensor parallelism splits ``size`` (hidden units or heads) evenly over the ranks."""
    check_int(name, size, 1)
    check_int("world_size", world_size, 1)
    check_divisible(name, size, world_size, "the tensor-parallel world size")


def check_pipeline(stages, micro_batches) -> None:
    """A pipeline has >= 1 stage and >= 1 micro-batch."""
    check_int("stages", stages, 1)
    check_int("micro_batches", micro_batches, 1)
