"""How much memory each rank holds under the ZeRO stages (Rajbhandari et al. 2020).

Training with Adam keeps, per parameter: the parameter, its gradient and two moment estimates.
In float32 that is 4 + 4 + 8 = 16 bytes; in the paper's mixed precision it is 2 (fp16 weight) +
2 (fp16 gradient) + 12 (fp32 master weight, m and v) = 16 bytes too. Plain data parallelism
(DDP) replicates all of it on every rank. ZeRO removes the redundancy step by step:

=====  =====================================  ==========================================
stage  sharded over the N ranks               bytes per rank (float32 Adam, P parameters)
=====  =====================================  ==========================================
0      nothing (DDP)                          16 P
1      optimizer state                        (4 + 4) P + 8 P / N
2      optimizer state and gradients          4 P + 12 P / N
3      everything (FSDP ``fully_shard``)      16 P / N
=====  =====================================  ==========================================

Stage 3 is what FSDP implements: parameters are gathered just in time for each block's forward
and backward and freed afterwards, so the *persistent* state is 16 P / N (plus one block's
gathered parameters while it runs).
"""
from __future__ import annotations

from .._checks import check_int

__all__ = ["zero_bytes_per_rank"]


def zero_bytes_per_rank(num_params: int, world_size: int, stage: int, param_bytes: int = 4, grad_bytes: int = 4,
                        optimizer_bytes: int = 8) -> float:
    """Bytes of parameters + gradients + optimizer state one rank holds at ZeRO ``stage`` (0-3)."""
    check_int("num_params", num_params, 0)
    check_int("world_size", world_size, 1)
    check_int("stage", stage, 0, 3)
    sharded = (stage >= 3, stage >= 2, stage >= 1)  # parameters, gradients, optimizer state
    total = 0.0
    for per_param, is_sharded in zip((param_bytes, grad_bytes, optimizer_bytes), sharded):
        total += per_param * num_params / (world_size if is_sharded else 1)
    return total
