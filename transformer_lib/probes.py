"""Probes: measure what a model does, from the outside, without changing it.

Every probe works on any model built from the library's modules, so each chapter reads its
tables and figures from what the modules did rather than from numbers typed by hand.

* :func:`record_attention` (chapters 2-4, 10, 12-14, 17): a context manager that hooks every
  attention module (multi-head or grouped-query) inside a model and records, per call,
  the query, key and value it received, its mask and, with ``weights=True``, its attention
  weights. This is the library's one way to look at attention weights: no layer or model keeps
  a copy of its own. :func:`mask_kind` names a recorded mask. :func:`record_activations` and
  :func:`patch_activations` read and replace any module's output by its path (``"blocks.3"``).
* Head scores: :func:`head_scores` (chapter 3: how much weight each head puts on the answer of
  each of the three lookups), :func:`diagonal_score`, :func:`column_score` and
  :func:`head_pattern_scores` (chapters 2, 14: previous / next / same token, [CLS], [SEP]).
* :func:`dependency_map` (chapter 13): the largest Jacobian entry between every output and
  input position, the dependencies a model *actually* has, to compare with its mask.
* :func:`input_gradient_norms` (chapter 9): how much of the loss's gradient reaches each input
  position, the path-length argument for attention over recurrence.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_int, check_square_maps
from .masks import causal_mask, prefix_lm_mask
from .grouped_query import GroupedQueryAttention
from .multihead import MultiHeadAttention
from .tasks import LOOKUP_TASKS, answer_keys

__all__ = ["AttentionCall", "record_attention", "record_activations", "patch_activations", "mask_kind",
           "head_scores", "diagonal_score", "column_score", "head_pattern_scores", "dependency_map",
           "input_gradient_norms"]


# -- recording what every attention module did ------------------------------------------------------

def _as_3d_mask(mask: torch.Tensor | None, B: int, L_q: int, L_k: int) -> torch.Tensor:
    """The (B, L_q, L_k) mask of every sequence (first head); ``None`` means all True."""
    if mask is None:
        return torch.ones(B, L_q, L_k, dtype=torch.bool)
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (B|1, H|1, L_q|1, L_k)
    return m.expand(B, m.shape[1], L_q, L_k)[:, 0].detach().cpu().clone()  # (B, L_q, L_k)


@dataclass
class AttentionCall:
    """One call of an attention module during a recorded forward pass.

    ``query`` (B, L_q, D), ``key`` and ``value`` (B, L_k, D) are the tensors the module received
    (detached); ``masks`` (B, L_q, L_k) is the boolean mask each sequence got (``None`` is
    recorded as all True, with ``mask_given = False``) and ``mask`` the first sequence's.
    ``output`` (B, L_q, D) is what the module returned; ``weights`` (B, H, L_q, L_k) are the
    attention weights, when recorded with ``weights=True``.
    """
    name: str
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    masks: torch.Tensor
    mask_given: bool
    is_self: bool
    output: torch.Tensor
    weights: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        """(L_q, L_k): the mask of the first sequence of the batch."""
        return self.masks[0]

    @property
    def kind(self) -> str:
        """'self' when keys and values are the query tensor itself, else 'cross'."""
        return "self" if self.is_self else "cross"

    @property
    def mask_kind(self) -> str:
        """The kind of mask (see :func:`mask_kind`); padding in any sequence of the batch counts."""
        kinds = {mask_kind(m) for m in self.masks}
        if len(kinds) > 1:
            kinds.discard("full")
        if {"causal", "causal + padding"} <= kinds:
            kinds.discard("causal")
        return " / ".join(sorted(kinds))

    @property
    def shapes(self) -> str:
        L_q, L_k = self.mask.shape
        return f"{L_q} x {L_k}"


def _attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, (MultiHeadAttention, GroupedQueryAttention))]


def _call_inputs(module: nn.Module, bound: inspect.BoundArguments):
    """(query, key, value, mask, cached length, causal) of one attention call, whatever the module.

    A :class:`GroupedQueryAttention` attends from ``x`` to ``x`` (plus its cache), and its
    ``causal=True`` is part of the mask it applies, so the recorded mask includes it."""
    args = bound.arguments
    cache, layer = args.get("cache"), args.get("layer", 0)
    past = cache.lengths[layer] if cache is not None else 0
    if isinstance(module, GroupedQueryAttention):
        x = args["x"]
        return x, x, x, args.get("mask"), past, bool(args.get("causal"))
    q, k, v = args["query"], args.get("key"), args.get("value")
    k = q if k is None else k
    v = k if v is None else v
    return q, k, v, args.get("mask"), past, False


@contextlib.contextmanager
def record_attention(model: nn.Module, weights: bool = False) -> Iterator[list[AttentionCall]]:
    """Record every attention call inside the ``with`` block: every
    :class:`~transformer_lib.multihead.MultiHeadAttention` and
    :class:`~transformer_lib.grouped_query.GroupedQueryAttention` of any model of the library
    (encoder-decoders, GPTs, the toy models, MiniLM's encoder, SmolLM2's blocks), as the same
    :class:`AttentionCall` records.

    Usage::

        with record_attention(model, weights=True) as calls:
            model(src, tgt_in)
        [(c.name, c.kind, c.mask_kind, c.shapes, c.weights.shape) for c in calls]

    A call counts as self-attention when its key and value are the query tensor itself (the
    module was called with one sequence), as cross-attention when they are another tensor.
    ``weights=True`` makes every call return and record its weights (B, H, L_q, L_k): it
    switches the modules to the readable path, which materializes them (the fused fast path
    never does); the outputs agree to float rounding (tested). With ``weights=False`` the model
    computes exactly what it computes unrecorded. With a KV cache, ``key``/``value`` are the new
    states only, while ``masks`` and ``weights`` span every cached key too.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    modules = _attention_modules(model)
    if not modules:
        raise ValueError(f"{type(model).__name__} contains no attention module to record")
    calls: list[AttentionCall] = []
    signatures = {cls: inspect.signature(cls.forward) for cls in (MultiHeadAttention, GroupedQueryAttention)}
    pending: dict[int, tuple] = {}  # id(module) -> its call's inputs, read before the cache grows

    def before(module, args, kwargs):
        cls = GroupedQueryAttention if isinstance(module, GroupedQueryAttention) else MultiHeadAttention
        bound = signatures[cls].bind(module, *args, **kwargs)
        bound.apply_defaults()
        pending[id(module)] = _call_inputs(module, bound)
        if weights:
            bound.arguments["need_weights"] = True
            return bound.args[1:], bound.kwargs  # without ``self``
        return None

    def hook_for(name: str) -> Callable:
        def after(module, args, kwargs, output):
            q, k, v, mask, past, causal = pending.pop(id(module))
            L_q, L_k = q.shape[1], past + k.shape[1]
            masks = _as_3d_mask(mask, q.shape[0], L_q, L_k)
            if causal:
                masks = masks & causal_mask(L_q, L_k)
            w = output[1].detach() if weights else None  # (B, H, L_q, L_k)
            calls.append(AttentionCall(name, q.detach(), k.detach(), v.detach(), masks, mask is not None or causal,
                                       is_self=(k is q and v is q), output=output[0].detach(), weights=w))
        return after

    handles = [m.register_forward_pre_hook(before, with_kwargs=True) for _, m in modules]
    handles += [m.register_forward_hook(hook_for(name), with_kwargs=True) for name, m in modules]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _modules_named(model: nn.Module, names) -> dict[str, nn.Module]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(names, str) or not all(isinstance(n, str) for n in names) or not names:
        raise ValueError(f"names must be a non-empty list of module paths such as 'blocks.0', got {names!r}")
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise ValueError(f"{type(model).__name__} has no module {missing[0]!r}; its blocks are "
                         f"{[n for n in modules if n.count('.') == 1 and n.startswith('blocks.')][:4]} ...")
    return {n: modules[n] for n in names}


@contextlib.contextmanager
def record_activations(model: nn.Module, names) -> Iterator[dict[str, torch.Tensor]]:
    """Record the output of the modules at ``names`` (paths of ``model.named_modules()``) during
    the ``with`` block: ``{name: tensor}``, the last call's output, detached.

    Every block of the library returns one tensor, the residual stream after it, so
    ``"blocks.{i}"`` is the state after block i in the reader's GPT and in SmolLM2 alike."""
    modules = _modules_named(model, names)
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
    patching): each value is a tensor of the output's shape, or a function ``output -> new output``."""
    if not isinstance(patches, dict):
        raise TypeError(f"patches must be a dict {{module path: tensor or function}}, got {type(patches).__name__}")
    modules = _modules_named(model, list(patches))

    def hook_for(name: str) -> Callable:
        def hook(module, args, output):
            new = patches[name](output) if callable(patches[name]) else patches[name]
            if not isinstance(new, torch.Tensor) or new.shape != output.shape:
                raise ValueError(f"the patch for {name!r} must be a tensor of shape {tuple(output.shape)}, "
                                 f"got {tuple(getattr(new, 'shape', ())) or type(new).__name__}")
            return new.to(output.dtype)
        return hook

    handles = [m.register_forward_hook(hook_for(n)) for n, m in modules.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def mask_kind(mask: torch.Tensor | None) -> str:
    """Name a 2-D boolean mask: 'full', 'causal', 'prefix LM (k)', 'padding', 'causal + padding'
    or 'custom'. ``None`` is 'full' (nothing blocked)."""
    if mask is None:
        return "full"
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"expected a 2-D boolean mask (L_q, L_k), got shape {tuple(mask.shape)}, "
                         f"dtype {mask.dtype}")
    mask = mask.cpu()
    L_q, L_k = mask.shape
    if mask.all():
        return "full"
    causal = causal_mask(L_q, L_k)
    if torch.equal(mask, causal):
        return "causal"
    same_rows = bool((mask == mask[:1]).all())  # every query sees the same keys: padding only
    if same_rows:
        return "padding"
    columns = mask.any(dim=0, keepdim=True)  # (1, L_k) keys that anyone may see
    if torch.equal(mask, causal & columns):
        return "causal + padding"
    if L_q == L_k:
        for k in range(1, L_q):
            if torch.equal(mask, prefix_lm_mask(k, L_q)):
                return f"prefix LM ({k})"
    return "custom"


# -- head scores ------------------------------------------------------------------------------------
# Scores that turn a head's (L, L) weight map into one number, so that all heads can be ranked
# instead of hand-picked. A head that spreads its weight evenly scores about 1/L on each.

def head_scores(weights: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """How much each head looks at each lookup task's answer (chapter 3): ``{task: (H,)}``.

    The score is the attention weight a head puts on the answer keys of :func:`answer_keys`,
    averaged over queries ``t >= 1`` and the batch (at t = 0 a causal head can only look at key 0,
    which would flatter every head). A head that does one lookup perfectly scores 1.0 on it.
    """
    if weights.dim() != 4:
        raise ValueError(f"weights must be (B, H, L, L), got shape {tuple(weights.shape)}")
    B, H, L, L_k = weights.shape
    if tokens.shape != (B, L) or L_k != L:
        raise ValueError(f"weights {tuple(weights.shape)} and tokens {tuple(tokens.shape)} do not match")
    keys = answer_keys(tokens)
    return {task: (weights * keys[task][:, None].to(weights.dtype)).sum(-1)[:, :, 1:].mean(dim=(0, 2))
            for task in LOOKUP_TASKS}  # (B, H, L_q) -> (H,)


def diagonal_score(weights: torch.Tensor, offset: int = -1) -> torch.Tensor:
    """Mean weight on the diagonal ``j = i + offset``: (..., L, L) -> (...).

    ``offset=-1`` scores a previous-token head (query i looks at key i-1), ``+1`` a next-token
    head, ``0`` a head that looks at itself. The mean runs over the L - |offset| queries that
    have such a key.
    """
    L = check_square_maps(weights)
    check_int("offset", offset, 1 - L, L - 1)
    return torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1).mean(dim=-1)  # (..., L - |offset|) -> (...)


def column_score(weights: torch.Tensor, key: int) -> torch.Tensor:
    """Mean weight that all queries put on one key position: (..., L, L) -> (...).

    ``key=0`` measures attention to [CLS], ``key=-1`` to the final [SEP].
    """
    L = check_square_maps(weights)
    check_int("key", key, -L, L - 1)
    return weights[..., :, key].mean(dim=-1)  # (..., L_q) -> (...)


def head_pattern_scores(weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every named score of :func:`diagonal_score` / :func:`column_score` for (..., L, L) maps."""
    return {"previous token": diagonal_score(weights, -1), "next token": diagonal_score(weights, 1),
            "same token": diagonal_score(weights, 0), "[CLS]": column_score(weights, 0),
            "[SEP]": column_score(weights, -1)}


# -- measured dependencies and gradients --------------------------------------------------------------

def dependency_map(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """(L_out, L_in) largest |d fn(x)[t, :] / d x[s, :]| over all feature pairs, for one sequence.

    ``x`` is (L_in, D) (one sequence, no batch axis); ``fn`` maps it to (L_out, D_out). An entry
    is exactly 0 when output position t cannot depend on input position s: for a causal model
    that is every s > t. Computed from the exact Jacobian (``torch.autograd.functional``), so a
    LayerNorm whose outputs sum to a constant cannot hide a dependency. ``vectorize=True`` computes
    all rows of the Jacobian in one batched backward pass (about 40x faster than a loop).
    """
    if x.dim() != 2:
        raise ValueError(f"x must be one sequence (L_in, D), got shape {tuple(x.shape)}")
    jac = torch.autograd.functional.jacobian(fn, x.detach(), vectorize=True)  # (L_out, D_out, L_in, D)
    if jac.dim() != 4:
        raise ValueError(f"fn must return (L_out, D_out), got a Jacobian of shape {tuple(jac.shape)}")
    return jac.abs().amax(dim=(1, 3))  # (L_out, L_in)


def input_gradient_norms(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(L,) mean over the batch of ||d loss / d e_t||, e_t the token embedding at position t.

    ``model`` needs an ``embed`` module (as both classifiers have); the loss is the
    cross-entropy of ``model(tokens)`` against ``labels``. Parameter gradients are left untouched.
    """
    if not isinstance(getattr(model, "embed", None), nn.Module):
        raise ValueError("model must have an `embed` module whose output is the token embeddings")
    if tokens.dim() != 2 or labels.shape != tokens.shape[:1]:
        raise ValueError(f"need tokens (B, L) and labels (B,), got {tuple(tokens.shape)} and {tuple(labels.shape)}")
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
