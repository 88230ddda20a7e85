"""Reading and replacing any module's output by its path: the tools of interpretability.

Names are the paths of ``model.named_modules()``. Every decoder of the library (the reader's
GPT and SmolLM2, both a :class:`~transformer_lib.model.DecoderOnlyLM`, and both stacks of the
encoder-decoder and MiniLM's encoder) has the same names for block i (the hook points are made by
:mod:`transformer_lib.layers`, whose ``HOOK_POINTS`` lists them):

==============================  =================  ==================================================
name                            shape              what it is
==============================  =================  ==================================================
``blocks.{i}``                  (B, L, D)          the residual stream after block i
``blocks.{i}.hook_resid_post``  (B, L, D)          the same, as a hook point of its own
``blocks.{i}.hook_attn_out``    (B, L, D)          the attention sub-layer's contribution to it
``blocks.{i}.hook_ffn_out``     (B, L, D)          the FFN sub-layer's contribution to it
``blocks.{i}.hook_z``           (B, L, H, d_head)  each head's output, before the output projection
``blocks.{i}.hook_pattern``     (B, H, L, L)       the attention weights (recorded only)
==============================  =================  ==================================================

The ``hook_*`` names are ``nn.Identity`` modules inside each block: they hold no weights (no
state-dict key, so saved models and the GGUF load as before) and change no output. The
attention module passes each head's output through the block's ``hook_z`` before W^O, so
patching ``hook_z[..., h, :]`` to zero is *zero ablation* of head h, and
:func:`head_contributions` splits ``hook_attn_out`` into one term per head. The weights only
exist on the readable path: recording ``hook_pattern`` switches that block's attention to it
(outputs agree with the fused path to float rounding, ~1e-6), and it cannot be patched.

Why hooks at all, rather than models that return everything? A model written for reading
(minGPT's style) should compute its output and nothing else; the probes attach from outside,
for the length of a ``with`` block, and leave nothing behind, even when the block raises.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn as nn

from .._checks import (check_block_index, check_head_outputs, check_module, check_module_names, check_patch_value,
                       check_patches)
from ..layers import HOOK_POINTS

__all__ = ["record_activations", "patch_activations", "hook_points", "head_contributions", "HOOK_POINTS"]


def hook_points(model: nn.Module) -> list[str]:
    """Every block-level name of ``model`` in the table above: ``blocks.{i}`` and its hook points."""
    check_module(model)
    names = dict(model.named_modules())
    blocks = getattr(model, "blocks", [])
    out = []
    for i in range(len(blocks)):
        out.append(f"blocks.{i}")
        out += [f"blocks.{i}.{h}" for h in HOOK_POINTS if f"blocks.{i}.{h}" in names]
    return out


@contextlib.contextmanager
def record_activations(model: nn.Module, names) -> Iterator[dict[str, torch.Tensor]]:
    """Record the output of the modules at ``names`` (paths of ``model.named_modules()``) during
    the ``with`` block: ``{name: tensor}``, the last call's output, detached.

    Usage::

        with record_activations(model, ["blocks.0.hook_z", "blocks.1.hook_pattern"]) as acts:
            model(tokens)
        acts["blocks.0.hook_z"].shape  # (B, L, H, d_head)

    Every block of the library returns one tensor, the residual stream after it, so
    ``"blocks.{i}"`` is the state after block i in the reader's GPT and in SmolLM2 alike; the
    ``hook_*`` names are listed in this module's docstring. Recording changes no output, except
    that ``hook_pattern`` takes the readable attention path (equal to float rounding)."""
    modules = check_module_names(model, names)
    seen: dict[str, torch.Tensor] = {}

    def hook_for(name: str) -> Callable:
        def hook(module, args, output):
            seen[name] = output.detach()
        return hook

    handles = [m.register_forward_hook(hook_for(n)) for n, m in modules.items()]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def patch_activations(model: nn.Module, patches: dict) -> Iterator[None]:
    """Replace the output of the modules named in ``patches`` inside the ``with`` block (activation
    patching): each value is a tensor of the output's shape, or a function ``output -> new output``.

    ``{"blocks.3": clean["blocks.3"]}`` puts a clean run's residual stream into a corrupted run;
    ``{"blocks.0.hook_z": f}`` with ``f`` zeroing ``z[..., h, :]`` ablates head h. A function
    receives the live output: return a new tensor (``z.clone()``, then edit), do not edit it in
    place. ``hook_pattern`` is recorded only and cannot be patched (a ValueError says so)."""
    modules = check_patches(model, patches)

    def hook_for(name: str) -> Callable:
        def hook(module, args, output):
            new = patches[name](output) if callable(patches[name]) else patches[name]
            check_patch_value(name, new, output)
            return new.to(device=output.device, dtype=output.dtype)
        return hook

    handles = [m.register_forward_hook(hook_for(n)) for n, m in modules.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def head_contributions(model: nn.Module, layer: int, z: torch.Tensor) -> torch.Tensor:
    """What each head of block ``layer`` adds to the residual stream: (B, L, H, d_head) -> (B, L, H, D).

    Concatenating the heads and multiplying by W^O (D, H * d_head) is the same as giving each head
    its own slice of W^O's columns and adding the results::

        contribution_h = z[..., h, :] @ W_O[:, h*d_head:(h+1)*d_head].T

    so the sum over heads plus W^O's bias is ``blocks.{layer}.hook_attn_out`` (Elhage et al. 2021:
    heads are independent and additive). ``z`` is a ``blocks.{layer}.hook_z`` recording."""
    check_block_index(model, layer)
    attn = model.blocks[layer].self_attn
    H, d_head = attn.num_heads, attn.head_dim
    check_head_outputs(z, H, d_head)
    W_O = attn.out_proj.weight  # (D, H * d_head)
    W_O = W_O.view(W_O.shape[0], H, d_head)  # (D, H, d_head): head h's columns
    return torch.einsum("...hd,Dhd->...hD", z.to(W_O.dtype), W_O)  # (B, L, H, D)
