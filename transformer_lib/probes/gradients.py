"""Measured dependencies and gradients.

* :func:`dependency_map` (chapter 13): the largest Jacobian entry between every output and
  input position, the dependencies a model *actually* has, to compare with its mask.
* :func:`input_gradient_norms` (chapter 9): how much of the loss's gradient reaches each input
  position, the path-length argument for attention over recurrence.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._checks import check_classifier_batch, check_one_sequence, check_sequence_map

__all__ = ["dependency_map", "input_gradient_norms"]


def dependency_map(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """(L_out, L_in) largest |d fn(x)[t, :] / d x[s, :]| over all feature pairs, for one sequence.

    ``x`` is (L_in, D) (one sequence, no batch axis); ``fn`` maps it to (L_out, D_out). An entry
    is exactly 0 when output position t cannot depend on input position s: for a causal model
    that is every s > t. Computed from the exact Jacobian (``torch.autograd.functional``), so a
    LayerNorm whose outputs sum to a constant cannot hide a dependency. ``vectorize=True`` computes
    all rows of the Jacobian in one batched backward pass (about 40x faster than a loop).
    """
    check_one_sequence(x)
    jac = torch.autograd.functional.jacobian(fn, x.detach(), vectorize=True)  # (L_out, D_out, L_in, D)
    check_sequence_map(jac)
    return jac.abs().amax(dim=(1, 3))  # (L_out, L_in)


def input_gradient_norms(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(L,) mean over the batch of ||d loss / d e_t||, e_t the token embedding at position t.

    ``model`` needs an ``embed`` module (as both classifiers have); the loss is the
    cross-entropy of ``model(tokens)`` against ``labels``. Parameter gradients are left untouched.
    """
    check_classifier_batch(model, tokens, labels)
    captured = {}

    def keep(module, inputs, output):
        captured["e"] = output  # (B, L, D)
        return output

    handle = model.embed.register_forward_hook(keep)
    try:
        loss = F.cross_entropy(model(tokens), labels)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(loss, captured["e"])  # (B, L, D)
    return grad.norm(dim=-1).mean(dim=0).detach()  # (L,)
