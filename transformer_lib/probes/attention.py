"""Recording what every attention module did (chapters 2-4, 10, 12-14, 17).

:func:`record_attention` hooks every attention module (:class:`~transformer_lib.multihead.MultiHeadAttention`, multi-head or grouped-query) inside a
model and records, per call, the query, key and value it received, its mask and, with
``weights=True``, its attention weights. This is the library's one way to look at attention
weights of every call: no layer or model keeps a copy of its own. :func:`mask_kind` names a
recorded mask.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn

from .._checks import check_bool_mask, check_has_attention
from ..masks import causal_mask, prefix_lm_mask
from ..latent_attention import LatentAttention
from ..multihead import MultiHeadAttention

__all__ = ["AttentionCall", "record_attention", "mask_kind"]


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
    return [(name, m) for name, m in model.named_modules() if isinstance(m, (MultiHeadAttention, LatentAttention))]


def _call_inputs(bound: inspect.BoundArguments):
    """(query, key, value, mask, cached length, causal) of one attention call. ``causal=True`` is
    part of the mask the module applies, so the recorded mask includes it."""
    args = bound.arguments
    cache, layer = args.get("cache"), args.get("layer", 0)
    past = cache.lengths[layer] if cache is not None else 0
    q, k, v = args["query"], args.get("key"), args.get("value")
    k = q if k is None else k
    v = k if v is None else v
    return q, k, v, args.get("mask"), past, bool(args.get("causal"))


@contextlib.contextmanager
def record_attention(model: nn.Module, weights: bool = False) -> Iterator[list[AttentionCall]]:
    """Record every attention call inside the ``with`` block: every
    :class:`~transformer_lib.multihead.MultiHeadAttention` of any model of the library
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
    modules = _attention_modules(model) if isinstance(model, nn.Module) else []
    check_has_attention(model, modules)
    calls: list[AttentionCall] = []
    pending: dict[int, tuple] = {}  # id(module) -> its call's inputs, read before the cache grows

    def before(module, args, kwargs):
        bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs)  # one interface, two classes
        bound.apply_defaults()
        pending[id(module)] = _call_inputs(bound)
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


def mask_kind(mask: torch.Tensor | None) -> str:
    """Name a 2-D boolean mask: 'full', 'causal', 'prefix LM (k)', 'padding', 'causal + padding'
    or 'custom'. ``None`` is 'full' (nothing blocked)."""
    if mask is None:
        return "full"
    check_bool_mask("mask", mask, dims=2)
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
