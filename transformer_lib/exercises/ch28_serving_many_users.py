"""Chapter 28 (Serving many users) exercises: a block table read into pool slots, the ragged mask
of a batch of rows of different lengths, and the roofline of a batched decoding step. Each checker
compares with the library's public functions (:mod:`transformer_lib.serving`)."""
import numpy as np
import torch

from ..serving import decode_step_time, pool_slots, ragged_mask
from ._core import NotYet, compare_number_cases, exercise, to_numpy

_TABLES = [([7, 2, 9], 4, [0, 3, 4, 5, 9, 11]), ([0], 16, [0, 1, 15]), ([5, 1, 3, 8], 1, [0, 1, 2, 3]),
           ([12, 4], 8, [7, 8, 15])]


@exercise("serving.block_table", call="slots(table, positions, block_size)",
          hint="position p lies in logical block p // block_size, at offset p % block_size inside it; the "
               "table says which pool block that is; the pool slot is block * block_size + offset")
def _check_block_table(answer):
    for n, (table, bs, positions) in enumerate(_TABLES, 1):
        want = pool_slots(torch.tensor([table]), torch.tensor([positions]), bs)[0].numpy()
        got = to_numpy(answer(list(table), list(positions), bs), "your slots").reshape(-1)
        if got.shape != want.shape:
            raise NotYet(f"table #{n}: one slot per position ({len(positions)}), you returned {got.shape[0]}")
        if not np.array_equal(got, want):
            wrong = int(np.argmax(got != want))
            raise NotYet(f"table {table}, block size {bs}: position {positions[wrong]} is in the wrong slot "
                         f"(you have {int(got[wrong])})")
    return f"all {len(_TABLES)} block tables read right, block sizes 1 to 16."


_MASK_CASES = [([2, 5, 1], 1), ([0, 3], 2), ([4], 3), ([1, 1, 6, 0], 2)]


@exercise("serving.ragged_mask", call="mask(lengths, L)",
          hint="row i's new token t sits at position lengths[i] + t; slot j holds position j; it may see "
               "every slot j <= its own position. Shape (B, L, max(lengths) + L)")
def _check_ragged_mask(answer):
    for n, (lengths, L) in enumerate(_MASK_CASES, 1):
        want = ragged_mask(torch.tensor(lengths), L)[:, 0].numpy()
        got = to_numpy(answer(list(lengths), L), "your mask")
        if got.shape == (want.shape[0], 1, *want.shape[1:]):
            got = got[:, 0]  # (B, 1, L, W) is fine too
        if got.shape != want.shape:
            raise NotYet(f"lengths {lengths}, L = {L}: expected shape {want.shape}, got {got.shape}")
        if got.dtype != bool and not np.isin(got, (0, 1)).all():
            raise NotYet("a mask holds True (may attend) and False only")
        if not np.array_equal(got.astype(bool), want):
            i, t, j = (int(x[0]) for x in np.nonzero(got.astype(bool) != want))
            seen = "sees" if got.astype(bool)[i, t, j] else "does not see"
            raise NotYet(f"lengths {lengths}, L = {L}: in row {i}, new token {t} {seen} slot {j}")
    return f"right on all {len(_MASK_CASES)} batches, rows of length 0 and a step of several tokens included."


_ROOF_CASES = [(1, 540e6, 15e9, 270e6, 200e9), (8, 540e6, 15e9, 270e6, 200e9), (64, 540e6, 15e9, 270e6, 200e9),
               (4, 97e6, 15e9, 270e6, 200e9), (256, 14e9, 3.35e12, 14e9, 400e12)]


@exercise("serving.decode_step", call="step_time(batch, weight_bytes, bandwidth, flops_per_row, peak_flops)",
          hint="the weights are read once per step whatever the batch: weight_bytes / bandwidth seconds; the "
               "arithmetic is batch * flops_per_row / peak_flops seconds; the step waits for the slower")
def _check_decode_step(answer):
    return compare_number_cases(
        answer, _ROOF_CASES, decode_step_time, what="your seconds", rtol=1e-6,
        wrong=lambda n, got, want, B, w, bw, f, p: f"{B} rows, {w / 1e6:.0f} MB of weights: your step is too "
                                                   f"{'long' if got > want else 'short'}",
        summary="batches, from the memory-bound step of one row to the compute-bound step of many.")
