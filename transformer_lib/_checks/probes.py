"""Probes and interpretability (probes, induction): module paths, patches, head indices."""
from __future__ import annotations

import torch
import torch.nn as nn

from .scalars import check_int

RECORD_ONLY = ("hook_pattern",)  # hook points whose value the model does not read back


def check_module(model, name: str = "model", cls: type = nn.Module) -> None:
    """``model`` (or the argument ``name``) must be an ``nn.Module``, or of the torch class ``cls``
    (the ``nn.MultiheadAttention`` whose weights ``from_torch`` copies)."""
    if not isinstance(model, cls):
        what = "an nn.Module" if cls is nn.Module else f"a torch.nn.{cls.__name__}"
        raise TypeError(f"{name} must be {what}, got {type(model).__name__}")


def check_module_names(model, names, what: str = "names") -> dict:
    """``names`` must be a non-empty list of paths of ``model.named_modules()``; returns
    ``{name: module}``. A name that does not exist is a ValueError naming it (and the hook
    points of block 0, to show what does exist)."""
    check_module(model)
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"{what} must be a non-empty list of module paths such as 'blocks.0', got {names!r}")
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"each entry of {what} must be a str module path, got {type(n).__name__} {n!r}")
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        blocks = [n for n in modules if n.count(".") == 1 and n.startswith("blocks.")]
        hooks = [n for n in modules if n.startswith("blocks.0.hook_")]
        raise ValueError(f"{type(model).__name__} has no module {missing[0]!r}"
                         f"{' (nor ' + ', '.join(map(repr, missing[1:])) + ')' if len(missing) > 1 else ''}; "
                         f"its blocks are {blocks[:4]} ..., block 0's hook points {hooks}")
    return {n: modules[n] for n in names}


def check_patches(model, patches) -> dict:
    """``patches`` must be a dict {module path: tensor or function}; hook points that are recorded
    only (``hook_pattern``) cannot be patched. Returns ``{name: module}``."""
    if not isinstance(patches, dict):
        raise TypeError(f"patches must be a dict {{module path: tensor or function}}, got {type(patches).__name__}")
    modules = check_module_names(model, list(patches), "patches")
    for name, value in patches.items():
        if name.rsplit(".", 1)[-1] in RECORD_ONLY:
            raise ValueError(f"patches: {name!r} is recorded only (the model computes its output from "
                             "the unpatched weights); patch 'hook_z' instead")
        if not (isinstance(value, torch.Tensor) or callable(value)):
            raise TypeError(f"patches[{name!r}] must be a tensor or a function output -> tensor, "
                            f"got {type(value).__name__}")
    return modules


def check_block_index(model, layer) -> None:
    """``layer`` must index one of ``model.blocks``."""
    check_module(model)
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError(f"model must have a .blocks list of decoder blocks, {type(model).__name__} has none")
    check_int("layer", layer, 0, len(blocks) - 1)


def check_head_outputs(z, num_heads: int, head_dim: int) -> None:
    """``z`` must be a floating tensor (..., L, H, d_head) with this attention's H and d_head."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"z must be a torch.Tensor (B, L, H, d_head), got {type(z).__name__}")
    if not z.is_floating_point() or z.dim() < 3 or tuple(z.shape[-2:]) != (num_heads, head_dim):
        raise ValueError(f"z must be a float tensor (B, L, {num_heads}, {head_dim}) (a hook_z recording), "
                         f"got {z.dtype} {tuple(z.shape)}")


def check_block_order(model, earlier, later) -> None:
    """Two blocks of ``model``, ``earlier`` before ``later`` (a head can only compose with the
    heads of the blocks before it)."""
    check_block_index(model, earlier)
    check_block_index(model, later)
    if earlier >= later:
        raise ValueError(f"earlier must be a block before later, got earlier={earlier}, later={later}")


def check_in_context(logits, tokens, in_context) -> None:
    """Logits (B, L, V) of ``tokens`` (B, L) and a (B, L - 1) marking of their targets."""
    B, L, V = logits.shape
    if tokens.shape != (B, L) or in_context.shape != (B, L - 1):
        raise ValueError(f"logits {tuple(logits.shape)}, tokens {tuple(tokens.shape)} and in_context "
                         f"{tuple(in_context.shape)} do not match: need (B, L, V), (B, L), (B, L - 1)")


def check_loss_curve(steps, losses, window) -> tuple[torch.Tensor, torch.Tensor]:
    """A loss curve: ``steps`` and ``losses`` 1-D of one length, more than ``window + 1`` points
    (``window`` an integer >= 1). Returns both as float64 tensors."""
    steps, losses = torch.as_tensor(steps, dtype=torch.float64), torch.as_tensor(losses, dtype=torch.float64)
    if steps.dim() != 1 or steps.shape != losses.shape or len(steps) < window + 2:
        raise ValueError(f"steps and losses must be 1-D of the same length > window + 1 = {window + 1}, "
                         f"got {tuple(steps.shape)} and {tuple(losses.shape)}")
    check_int("window", window, 1)
    return steps, losses


def check_context(context, table) -> int:
    """The training context: ``context`` (None: the position table's length ``table``) an integer
    in [4, table]; a model without a table (rotary, ALiBi) must be given one. Returns it."""
    if context is None and table is None:
        raise ValueError("context must be given for a model without a position table (rotary, ALiBi)")
    return check_int("context", table if context is None else context, 4, table)


def check_score_table(scores, k) -> None:
    """A (layers, H) table of head scores and ``k`` in [1, layers * H] heads to pick from it."""
    if scores.dim() != 2:
        raise ValueError(f"scores must be (layers, H), got shape {tuple(scores.shape)}")
    check_int("k", k, 1, scores.numel())


def check_patch_value(name: str, new, output: torch.Tensor) -> None:
    """What a patch puts in place of a module's output (known only when the module runs): a
    tensor of the output's shape."""
    if not isinstance(new, torch.Tensor) or new.shape != output.shape:
        raise ValueError(f"the patch for {name!r} must be a tensor of shape {tuple(output.shape)}, "
                         f"got {tuple(getattr(new, 'shape', ())) or type(new).__name__}")


def check_has_attention(model, modules) -> None:
    """``model`` must be an ``nn.Module`` and contain attention modules (``modules``, those found)
    for a recorder to hook."""
    check_module(model)
    if not modules:
        raise ValueError(f"{type(model).__name__} contains no attention module to record")


def check_one_sequence(x) -> None:
    """One sequence without a batch axis: a tensor (L, D)."""
    if x.dim() != 2:
        raise ValueError(f"x must be one sequence (L_in, D), got shape {tuple(x.shape)}")


def check_sequence_map(jac) -> None:
    """``fn`` of a dependency map must take (L_in, D) to (L_out, D_out): its Jacobian is 4-D."""
    if jac.dim() != 4:
        raise ValueError(f"fn must return (L_out, D_out), got a Jacobian of shape {tuple(jac.shape)}")


def check_classifier_batch(model, tokens, labels) -> None:
    """A classifier with an ``embed`` module (whose output is differentiated), tokens (B, L) and
    one label per row (B,)."""
    if not isinstance(getattr(model, "embed", None), nn.Module):
        raise ValueError("model must have an `embed` module whose output is the token embeddings")
    if tokens.dim() != 2 or labels.shape != tokens.shape[:1]:
        raise ValueError(f"need tokens (B, L) and labels (B,), got {tuple(tokens.shape)} and {tuple(labels.shape)}")


def check_lookup_maps(weights, tokens) -> None:
    """Attention maps (B, H, L, L) of the lookup task's tokens (B, L)."""
    if weights.dim() != 4:
        raise ValueError(f"weights must be (B, H, L, L), got shape {tuple(weights.shape)}")
    B, H, L, L_k = weights.shape
    if tokens.shape != (B, L) or L_k != L:
        raise ValueError(f"weights {tuple(weights.shape)} and tokens {tuple(tokens.shape)} do not match")
