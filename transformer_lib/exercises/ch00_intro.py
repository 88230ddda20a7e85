"""Chapter 0 warm-up exercise.

The library has no function for a mean of squares, so the checker compares with stored numbers
(see :func:`~transformer_lib.exercises.expected_values`)."""
import torch

from ._core import compare_function, exercise, expected_values


def _inputs() -> list[tuple]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, generator=g),), (torch.randn(2, 3, 8, generator=g),)]


@exercise("intro.mean_of_squares",
          hint="square, then average over dim=-1 with keepdim=True")
def _check(answer):
    return compare_function(answer, expected_values("intro.mean_of_squares"), _inputs(), what="mean of squares")
