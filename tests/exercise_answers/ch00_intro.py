"""Answers for the checkers of transformer_lib/exercises/ch00_intro.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def _mean_of_squares(x):
    return x.pow(2).mean(dim=-1, keepdim=True)


ANSWERS = {
    'intro.mean_of_squares': {
        'solution': lambda: _mean_of_squares,
        'alternatives': lambda: [
            lambda x: np.mean(np.square(x.numpy()), axis=-1, keepdims=True),  # NumPy
            lambda x: torch.einsum("...i,...i->...", x, x)[..., None] / x.shape[-1],  # einsum
        ],
        'wrong': lambda: [lambda x: x.pow(2).mean(dim=-1),  # loses the kept dimension
                          lambda x: x.mean(dim=-1, keepdim=True) ** 2,
                          lambda x: x.pow(2).sum(dim=-1, keepdim=True),  # a sum, not a mean
                          lambda x: x.pow(2).mean(dim=0, keepdim=True)],  # the first axis
    },
}
