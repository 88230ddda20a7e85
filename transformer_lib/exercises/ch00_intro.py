"""Chapter 0 warm-up exercise."""
import numpy as np
import torch

from ._core import compare_function, exercise


def _reference(x):
    return x.pow(2).mean(dim=-1, keepdim=True)


@exercise("intro.mean_of_squares", hint="square, then average over dim=-1 with keepdim=True",
          wrong_answers=lambda: [lambda x: x.pow(2).mean(dim=-1),  # loses the kept dimension
                                 lambda x: x.mean(dim=-1, keepdim=True) ** 2,
                                 lambda x: x.pow(2).sum(dim=-1, keepdim=True),  # a sum, not a mean
                                 lambda x: x.pow(2).mean(dim=0, keepdim=True)],  # the first axis
          solution=lambda: _reference,
          alternative_answers=lambda: [
              lambda x: np.mean(np.square(x.numpy()), axis=-1, keepdims=True),  # NumPy
              lambda x: torch.einsum("...i,...i->...", x, x)[..., None] / x.shape[-1],  # einsum
          ])
def _check(answer):
    g = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(4, generator=g),), (torch.randn(2, 3, 8, generator=g),)]
    return compare_function(answer, _reference, inputs, what="mean of squares")
