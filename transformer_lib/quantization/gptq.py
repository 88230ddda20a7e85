"""Rounding that sees the data: GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2023), chapter 19.

Round-to-nearest chooses each weight's code alone. What a layer's rounding costs is in its
outputs: on inputs X (n, K), the rounded W~ is off by ``||X W^T - X W~^T||^2``, which is, summed
over W's rows, ``e H e^T`` for each row's error e (1, K), with ``H = X^T X`` (K, K). When inputs
are correlated, H is not diagonal, and the error one column leaves can be partly cancelled by
moving the columns not yet rounded. GPTQ rounds W's columns left to right and, after column j,
moves the rest by the update of Optimal Brain Surgeon (Hassibi and Stork 1993), the one that
minimizes the added output error:

    err = (w_j - q_j) / [H_F^-1]_jj,        W[:, F] -= err [H_F^-1]_{j, F}

where F is the set of columns not yet rounded and H_F^-1 the inverse of H restricted to F (j
first). Row j of the upper Cholesky factor U of H^-1 (H^-1 = U^T U) is row j of H_F^-1 divided by
the square root of its diagonal entry, for every j at once, so one factorization serves the whole
loop: ``err = (w_j - q_j) / U_jj`` and ``W[:, j+1:] -= err U_{j, j+1:}``.

The group scales of the blocks (q8_0, q4_1) are set from the weights as they stand when the
loop reaches a group's first column, so the format is unchanged: the same kernels read it.

Choices here, each the paper's unless said: H is damped by 1% of its mean diagonal (a
calibration set shorter than K, or an input that never varies, leaves H singular); the updates of
the columns after a batch of 128 are made at once, as one matrix product (the paper's "lazy
batch", the same result in fewer passes over W); and, a simplification, every layer's H is read
from the float model in one pass (:func:`input_hessians`), where the paper quantizes layer by
layer and reads each layer's inputs from the layers before it already quantized.
"""
from __future__ import annotations

import torch
from torch import nn

from .._checks import check_calibration, check_hessian, check_quantization_args
from .formats import group_codes, group_scale, pack_codes

__all__ = ["DAMP", "gptq_codes", "gptq_blocks", "input_hessians", "output_error"]

DAMP = 0.01  # H += DAMP * mean(diag H) * I: the paper's default


def gptq_codes(w: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int = 32,
               damp: float = DAMP) -> tuple:
    """``w`` (N, K) rounded by GPTQ against ``hessian`` (K, K): the codes of
    :func:`~.formats.absmax_int8` ``(q, d)`` for 8 bits, of :func:`~.formats.minmax_int4`
    ``(q, d, m)`` for 4. A diagonal ``hessian`` (uncorrelated inputs) gives exactly their
    round-to-nearest codes: no column can make up for another."""
    check_quantization_args(w, bits, group_size)
    N, K = w.shape
    H = check_hessian(hessian, K, damp).double().clone()  # (K, K)
    dead = H.diagonal() == 0  # an input that was always 0: its column is rounded alone
    H[dead, dead] = 1
    H += damp * H.diagonal().mean() * torch.eye(K, dtype=torch.float64)
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)  # H^-1 = U^T U
    W = w.detach().double().clone()  # (N, K): the columns not yet rounded move as the loop goes
    G = K // group_size
    q = torch.empty(N, K, dtype=torch.int8 if bits == 8 else torch.uint8)
    d = torch.empty(N, G, dtype=torch.float16)
    m = None if bits == 8 else torch.empty(N, G, dtype=torch.float16)
    batch = group_size * max(1, 128 // group_size)  # whole groups: a group's scale sees all its updates
    for b0 in range(0, K, batch):
        b1 = min(b0 + batch, K)
        errs = torch.empty(N, b1 - b0, dtype=torch.float64)  # (N, columns of this batch)
        for j in range(b0, b1):
            g = j // group_size
            if j % group_size == 0:  # a new group: its scale from the weights as they stand now
                scale, low = group_scale(W[:, j:j + group_size].float(), bits)  # (N,) each
                d[:, g] = scale
                if m is not None:
                    m[:, g] = low
            col = group_codes(W[:, j:j + 1].float(), d[:, g], None if m is None else m[:, g])  # (N, 1)
            q[:, j] = col[:, 0]
            value = d[:, g].double() * col[:, 0].double() + (0 if m is None else m[:, g].double())  # (N,)
            err = (W[:, j] - value) / U[j, j]  # (N,)
            W[:, j + 1:b1] -= err[:, None] * U[j, j + 1:b1][None, :]  # this batch's later columns now
            errs[:, j - b0] = err
        W[:, b1:] -= errs @ U[b0:b1, b1:]  # (N, b) @ (b, K - b1): every later column at once
    return (q, d) if m is None else (q, d, m)


def gptq_blocks(w: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int = 32,
                damp: float = DAMP) -> torch.Tensor:
    """:func:`gptq_codes` packed as :func:`~.formats.quantize_blocks` packs its codes."""
    return pack_codes(gptq_codes(w, hessian, bits, group_size, damp))


@torch.no_grad()
def input_hessians(model: nn.Module, calibration: torch.Tensor, names=None) -> dict[str, torch.Tensor]:
    """``{layer name: H = X^T X}`` (K, K) float64 for ``model``'s linear layers (or those in
    ``names``), X every input row the layer reads while the float model reads ``calibration``, token
    ids (B, L) or (L,), one row at a time, in eval mode, on the model's device (the sums on the CPU,
    in float64). Layers that read the very same tensor (q, k and v; gate and up) share one H,
    computed once."""
    calibration = check_calibration(calibration)  # (B, L)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and (names is None or n in names)}
    hessians: dict[str, torch.Tensor] = {}
    last = {"x": None, "H": None}  # the input the previous layer read, and its H

    def record(name):
        def hook(module, inputs, output):
            x = inputs[0]
            if x is last["x"]:  # the same tensor as the layer before: the same H
                hessians[name] = last["H"]
                return
            rows = x.detach().reshape(-1, x.shape[-1]).to("cpu", torch.float64)  # (B * L, K); MPS has no float64
            if name not in hessians:
                hessians[name] = torch.zeros(x.shape[-1], x.shape[-1], dtype=torch.float64)
            hessians[name] += rows.T @ rows
            last["x"], last["H"] = x, hessians[name]
        return hook

    handles = [m.register_forward_hook(record(n)) for n, m in linears.items()]
    was_training = model.training
    try:
        model.eval()
        for row in calibration.split(1):
            model(row.to(next(model.parameters()).device))
            last["x"] = None
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return hessians


def output_error(w: torch.Tensor, w_rounded: torch.Tensor, hessian: torch.Tensor) -> float:
    """A rounding's relative squared error on a layer's outputs, ``||X W^T - X W~^T||^2 / ||X W^T||^2``,
    read from the inputs' ``hessian`` = X^T X (K, K) alone: ``||X e^T||^2 = e H e^T`` for each row e of
    ``W - W~``. The quantity GPTQ makes small on its calibration inputs; on other inputs' H, how well
    that carries over."""
    w, e, H = w.double(), (w - w_rounded).double(), hessian.double()
    return float(((e @ H) * e).sum() / ((w @ H) * w).sum())  # sums of e H e^T and w H w^T over rows
