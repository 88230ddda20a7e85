"""Chapter 18 (Training on many devices) exercises.

Each checker compares the reader's formula with an independent computation: a ring all-reduce
simulated chunk by chunk, the ZeRO memory model of :mod:`transformer_lib.distributed.zero`, and a
GPipe schedule whose idle slots are counted one by one.
"""
from ..distributed.zero import zero_bytes_per_rank
from ._core import compare_value, exercise


@exercise("distributed.allreduce_bytes",
          hint="a ring all-reduce is a reduce-scatter then an all-gather; in each of the 2 (N - 1) steps a "
               "rank sends one chunk of size / N",
          call="allreduce_bytes(size_bytes, world_size)")
def _check_allreduce(answer):
    cases = [(1000, 1), (1000, 2), (4_000_000, 4), (600, 3), (2 ** 20, 8), (12_345, 5)]
    for size, n in cases:
        # the bytes rank 0 sends, counted step by step: the tensor is cut into n chunks; n - 1
        # reduce-scatter steps then n - 1 all-gather steps, in each of which every rank sends one
        # chunk to its right-hand neighbour
        chunk = size / n
        sent = sum(chunk for _phase in ("reduce-scatter", "all-gather") for _step in range(n - 1))
        compare_value(answer(size, n), sent,
                      what=f"the bytes per rank for {size:,} bytes on {n} ranks", rtol=1e-9, atol=1e-9)
    return f"matches a step-by-step ring on all {len(cases)} (size, ranks) cases."


@exercise("distributed.zero_memory",
          hint="per parameter: 4 bytes weight, 4 gradient, 8 Adam state (float32); stage 1 divides the optimizer "
               "state by N, stage 2 also the gradients, stage 3 also the weights",
          call="zero_memory(num_params, world_size, stage)")
def _check_zero(answer):
    cases = [(1_000_000, 1, 0), (1_000_000, 4, 0), (1_000_000, 4, 1), (1_000_000, 4, 2), (1_000_000, 4, 3),
             (7_000_000_000, 64, 1), (7_000_000_000, 64, 2), (7_000_000_000, 64, 3), (300, 3, 2)]
    for params, n, stage in cases:
        compare_value(answer(params, n, stage), zero_bytes_per_rank(params, n, stage),
                      what=f"the bytes per rank for {params:,} parameters, {n} ranks, stage {stage}", rtol=1e-9)
    return f"right for all {len(cases)} (parameters, ranks, stage) cases."


@exercise("distributed.bubble_fraction",
          hint="with p stages and m micro-batches the pipeline runs m + p - 1 time slots and each stage is busy "
               "in m of them",
          call="bubble_fraction(stages, micro_batches)")
def _check_bubble(answer):
    cases = [(1, 1), (1, 8), (2, 1), (2, 4), (4, 4), (4, 16), (8, 3), (3, 32)]
    for p, m in cases:
        # the schedule: stage s runs micro-batch i in time slot s + i; count the idle (stage, slot) cells
        slots = m + p - 1
        busy = sum(1 for s in range(p) for t in range(slots) if 0 <= t - s < m)
        compare_value(answer(p, m), 1 - busy / (p * slots),
                      what=f"the bubble for {p} stages and {m} micro-batches", rtol=1e-9, atol=1e-12)
    return f"matches the counted GPipe schedule for all {len(cases)} (stages, micro-batches) cases."
