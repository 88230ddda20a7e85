"""Quantized weights and decoding (chapter 19, transformer_lib.quantization)."""
from __future__ import annotations

import torch

from .attention import all_finite


def check_quantization_args(w, bits, group_size, granularity: str = "group", any_bits: bool = False) -> None:
    """A float (N, K) weight matrix, ``bits`` 8 or 4 (2..8 with ``any_bits``), a ``group_size``
    that is an even integer >= 2 dividing K, and a granularity 'tensor', 'channel' or 'group'."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 2 or not w.is_floating_point() or w.numel() == 0:
        raise ValueError(f"w must be a non-empty 2-D float tensor (out_features, in_features), got {w.dtype} "
                         f"of shape {tuple(w.shape)}")
    if not all_finite(w):
        raise ValueError("w must be finite (no NaN or inf): a scale computed from it would be too")
    for name, value in (("bits", bits), ("group_size", group_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    allowed = range(2, 9) if any_bits else (4, 8)
    if bits not in allowed:
        raise ValueError(f"bits must be {' or '.join(map(str, allowed)) if not any_bits else 'in 2..8'}, got {bits}")
    if not isinstance(granularity, str):
        raise TypeError(f"granularity must be a str, got {type(granularity).__name__}")
    if granularity not in ("tensor", "channel", "group"):
        raise ValueError(f"granularity must be 'tensor', 'channel' or 'group', got {granularity!r}")
    if granularity == "group" and (group_size < 2 or group_size % 2 or w.shape[1] % group_size):
        raise ValueError(f"group_size must be an even integer >= 2 that divides in_features = {w.shape[1]}, "
                         f"got {group_size}")


def check_matvec_input(x, in_features: int) -> None:
    """The input of a quantized linear layer: a float tensor whose last dimension is ``in_features``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.dim() == 0 or x.shape[-1] != in_features:
        raise ValueError(f"x must be a float tensor (..., {in_features}), got {x.dtype} of shape {tuple(x.shape)}")


def check_activations(activations) -> str:
    """How a quantized layer's input enters the kernel: 'float32' (as it is) or 'int8' (per-block codes)."""
    from .scalars import check_choice

    return check_choice("activations", activations, ("float32", "int8"))


def check_matmul_args(x, blocks, fmt, group_size) -> None:
    """For ``kernels.matmul``: x a float tensor (..., K); ``fmt`` 'q8_0' or 'q4_1'; ``group_size`` an
    even int >= 2 dividing K; blocks uint8 (N, K / group_size * bytes per block) on x's device."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must be a float tensor (..., in_features), got "
                         f"{type(x).__name__ if not isinstance(x, torch.Tensor) else f'{x.dtype} {tuple(x.shape)}'}")
    if fmt not in ("q8_0", "q4_1"):
        raise ValueError(f"fmt must be 'q8_0' or 'q4_1', got {fmt!r}")
    K = x.shape[-1]
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2 or group_size % 2 \
            or K % group_size:
        raise ValueError(f"group_size must be an even int >= 2 that divides in_features = {K}, got {group_size!r}")
    per_block = 2 + group_size if fmt == "q8_0" else 4 + group_size // 2
    expected = K // group_size * per_block
    if not isinstance(blocks, torch.Tensor) or blocks.dtype != torch.uint8 or blocks.dim() != 2 \
            or blocks.shape[1] != expected:
        got = f"{blocks.dtype} {tuple(blocks.shape)}" if isinstance(blocks, torch.Tensor) else type(blocks).__name__
        raise ValueError(f"blocks must be uint8 (out_features, {expected}) for {fmt} with in_features={K}, "
                         f"group_size={group_size}; got {got}")
    if blocks.device != x.device:
        raise ValueError(f"blocks must be on x's device {x.device}, got {blocks.device}")


def check_quantized_linear_args(blocks, fmt, in_features: int, group_size: int) -> None:
    """``QuantizedLinear``'s blocks: ``fmt`` 'q8_0' or 'q4_1', blocks uint8 (out_features,
    in_features / group_size * bytes per block)."""
    if fmt not in ("q8_0", "q4_1"):
        raise ValueError(f"fmt must be one of ['q4_1', 'q8_0'], got {fmt!r}")
    expected = in_features // group_size * (2 + group_size if fmt == "q8_0" else 4 + group_size // 2)
    if not isinstance(blocks, torch.Tensor) or blocks.dtype != torch.uint8 or blocks.dim() != 2 \
            or blocks.shape[1] != expected:
        got = f"{blocks.dtype} {tuple(blocks.shape)}" if isinstance(blocks, torch.Tensor) else type(blocks).__name__
        raise ValueError(f"blocks must be uint8 (out_features, {expected}) for {fmt} with in_features="
                         f"{in_features}, group_size={group_size}; got {got}")


def check_widths(widths, groups, names) -> dict:
    """``quantize``'s ``widths``: a dict from a tensor group (``groups``) or a layer's name
    (``names``) to 4 or 8 bits; returns a copy."""
    if not isinstance(widths, dict):
        raise ValueError(f"widths must be a dict {{group or layer name: 4 or 8}}, got {type(widths).__name__}")
    for key, value in widths.items():
        if key not in groups and key not in names:
            raise ValueError(f"widths: {key!r} is neither a tensor group {tuple(groups)} nor a linear layer or "
                             f"embedding of the model")
        if isinstance(value, bool) or value not in (4, 8):
            raise ValueError(f"widths: {key!r} must map to 4 or 8 bits, got {value!r}")
    return dict(widths)


def check_max_path(variable: str, value: str, paths) -> None:
    """The environment variable capping the kernel's code path: unset or one of ``paths``."""
    if value not in ("", *paths):
        raise ValueError(f"{variable} must be one of {tuple(paths)} or unset, got {value!r}")


def check_kernel_path(path, group_size: int, paths, offered) -> None:
    """A code path asked for by name: one of ``paths`` ("auto" or a named one), one this CPU runs
    (``offered``, read by the caller from the built kernel), taking ``group_size`` (the vector paths
    read whole chunks of 32 codes)."""
    if not isinstance(path, str) or path not in paths:
        raise ValueError(f"path must be one of {tuple(paths)}, got {path!r}")
    if path == "auto":
        return
    if path not in offered:
        raise ValueError(f"path={path!r} does not run here: this CPU offers {offered or 'no compiled kernel'}")
    if path != "portable" and group_size % 32:
        raise ValueError(f"path={path!r} needs a group_size that is a multiple of 32, got {group_size}")


def check_calibration(calibration) -> torch.Tensor:
    """GPTQ's calibration text: token ids, an integer tensor (B, L) or (L,) with at least one id;
    returned as (B, L)."""
    from .tokens import check_token_ids

    if isinstance(calibration, torch.Tensor) and calibration.dim() == 1:
        calibration = calibration[None]  # (L,) -> (1, L)
    check_token_ids(calibration, None, "calibration")
    if calibration.numel() == 0:
        raise ValueError("calibration must hold at least one token id, got an empty tensor")
    return calibration


def check_hessian(hessian, in_features: int, damp) -> torch.Tensor:
    """GPTQ's ``hessian``: a finite float (K, K) tensor, K the layer's in_features, symmetric with a
    diagonal >= 0 (a sum of outer products x x^T); ``damp`` a float > 0. Returns ``hessian``."""
    if not isinstance(hessian, torch.Tensor) or not hessian.is_floating_point() \
            or tuple(hessian.shape) != (in_features, in_features):
        got = f"{hessian.dtype} {tuple(hessian.shape)}" if isinstance(hessian, torch.Tensor) else type(hessian).__name__
        raise ValueError(f"hessian must be a float tensor ({in_features}, {in_features}) (in_features squared), "
                         f"got {got}")
    if not bool(torch.isfinite(hessian).all()):
        raise ValueError("hessian must be finite (no NaN or inf)")
    h = hessian.double()
    if bool((h.diagonal() < 0).any()) or not torch.allclose(h, h.T, rtol=1e-6, atol=1e-9 * float(h.abs().max())):
        raise ValueError("hessian must be symmetric with a diagonal >= 0, as a sum of outer products x x^T is")
    if isinstance(damp, bool) or not isinstance(damp, (int, float)) or not damp > 0 or damp != damp:
        raise ValueError(f"damp must be a number > 0 (a share of the mean diagonal added to it), got {damp!r}")
    return hessian
