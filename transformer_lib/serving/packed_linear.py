"""Linear layers for a few rows at a time on a CPU (chapters 28 and 29): the weights prepacked once
for oneDNN, so that a step of B rows reads each weight once, as the roofline says it should.

A decoding step multiplies a few rows x (M, K) by every weight W (N, K) of the model. With M small
the work is reading W: N * K numbers once, used M times each, so M rows should cost about what one
row costs (chapter 19: decode is memory-bound). torch's default ``F.linear`` on the CPU does not
behave so for 2 .. 16 rows: measured on SmolLM2's 30 blocks and its LM head with one thread
(``benchmarks/small_rows.py``, ``benchmarks/results/small_rows.json``), two rows cost nearly
twice one row (the LM head, W of 49152 x 576: ~20 ms for 2 rows against ~9 ms for 1), so every
batched step and every verification of a draft paid for its rows again and again.

The same product through oneDNN with W reordered once into oneDNN's blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, the packing torch.compile's CPU backend uses) stays
close to one row's cost up to a few rows. One row is the exception (the default kernel is
quicker there), so :func:`packed_linear` takes the packed path for ``rows >= min_rows`` (2) and
``F.linear`` otherwise. The price is memory: the packed copy is a second set of weights.

Numerics: both compute each output as the float32 dot product of a row of x with a row of W;
only the order of the K additions differs. The bound for a float32 dot product of length K,
``|fl(x.w) - x.w| <= gamma_K sum_k |x_k w_k|``, ``gamma_K = K u / (1 - K u)``, ``u = 2**-24``,
holds for each, so they differ by at most twice it (:func:`dot_error_bound`; the tests hold every
output to it).

Use: ``packs = PackedLinears(model)`` once, then ``with packs:`` around forward passes of a few
rows. Inside, every plain ``nn.Linear`` of the model runs :func:`packed_linear` with its packed
weight; on exit the modules are plain again. A weight changed since it was packed (its version
counter moved) is packed again on entry.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["packed_linear", "PackedLinears", "dot_error_bound", "available"]


def available() -> bool:
    """Whether this torch has oneDNN's packed linear (CPU builds with MKLDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def packed_linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None,
                  min_rows: int = 2) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (x (..., K) -> (..., N)) through oneDNN with ``packed``
    (``weight`` reordered by ``torch.ops.mkldnn._reorder_linear_weight``) when x holds at least
    ``min_rows`` rows; ``F.linear`` for fewer rows or when gradients are wanted."""
    K = x.shape[-1]
    rows = x.numel() // K if K else 0
    if rows < min_rows or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        return F.linear(x, weight, bias)
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, K).contiguous(), packed, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], weight.shape[0])  # (M, N) -> (..., N)


class _PackedLinear(nn.Linear):
    """An ``nn.Linear`` with a ``_packed`` weight: its forward is :func:`packed_linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.weight, self._packed, self.bias)


class PackedLinears:
    """oneDNN-packed copies of ``model``'s plain float32 CPU ``nn.Linear`` weights (subclasses such
    as LoRA or quantized layers are left alone), switched on by ``with packs:``. Without oneDNN
    (:func:`available` false) it packs nothing and the block runs the model as it is."""

    def __init__(self, model: nn.Module):
        self.modules = [m for m in model.modules() if type(m) is nn.Linear and m.weight.device.type == "cpu"
                        and m.weight.dtype == torch.float32] if available() else []
        self._packs: dict[int, tuple[int, torch.Tensor]] = {}
        self._refresh()

    def _refresh(self) -> None:
        for m in self.modules:
            version = m.weight._version
            cached = self._packs.get(id(m))
            if cached is None or cached[0] != version:
                with torch.no_grad():
                    self._packs[id(m)] = (version, torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), None))

    def nbytes(self) -> int:
        """Bytes of the packed copies (the memory this path costs)."""
        return sum(p.numel() * p.element_size() for _, p in self._packs.values())

    def __enter__(self):
        self._refresh()
        for m in self.modules:
            m._packed = self._packs[id(m)][1]
            m.__class__ = _PackedLinear
        return self

    def __exit__(self, *exc):
        for m in self.modules:
            m.__class__ = nn.Linear
            del m._packed
        return False


def dot_error_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(..., N): ``gamma_K * (|x| @ |W|.T)``, the float32 rounding bound of each output of
    ``x @ W.T`` computed in any order of its K additions (Higham, Accuracy and Stability of
    Numerical Algorithms, section 3.1), in float64."""
    K = x.shape[-1]
    u = 2.0 ** -24
    return (K * u / (1 - K * u)) * (x.abs().double() @ weight.abs().double().t())
