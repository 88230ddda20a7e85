"""Chapter 0 warm-up exercise."""
import torch

from ._core import compare_function, exercise


def _reference(x):
    return x.pow(2).mean(dim=-1, keepdim=True)


@exercise("intro.mean_of_squares", hint="square, then average over dim=-1 with keepdim=True",
          wrong_answers=lambda: [lambda x: x.pow(2).mean(dim=-1),  # loses the kept dimension
                                 lambda x: x.mean(dim=-1, keepdim=True) ** 2])
def _check(answer):
    g = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(4, generator=g),), (torch.randn(2, 3, 8, generator=g),)]
    return compare_function(answer, _reference, inputs, what="mean of squares")
