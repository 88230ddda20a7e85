"""Encoder, decoder and the three model families built from them.

The encoder and the decoder of the original Transformer use the same parts; what differs is the
wiring: which mask each self-attention uses, whether there is a cross-attention, and what goes
in and comes out. The three families of models keep one or both stacks:

* encoder-only (BERT, MiniLM): bidirectional self-attention, one output vector per input token;
* decoder-only (GPT, Llama): the *same* block with a causal mask, next-token logits;
* encoder-decoder (the original, T5, BART): an encoder, and a decoder with cross-attention.

This module holds what the encoder-vs-decoder chapter needs beyond the core models:

* :class:`TokenClassifier`, a small encoder-only model (embeddings, learned positions, a
  :class:`~transformer_lib.model.Encoder`, a per-token head). ``causal=True`` gives the same
  parameters a causal mask, which turns it into a GPT-style tagger: one switch, two families.
* :func:`record_attention`, which hooks every :class:`~transformer_lib.multihead.MultiHeadAttention`
  of any model and records, for one forward pass, the query and key tensors and the mask each
  call received, so tables and figures are built from what the modules did, not typed by hand.
* :func:`mask_kind`, which names a recorded mask; :func:`prefix_lm_mask`, the mask of a
  prefix language model (bidirectional over the prompt, causal after it);
* :func:`dependency_map`, the largest Jacobian entry between every output and input position:
  the dependencies a model *actually* has, to compare with the mask it was given;
* :func:`running_sum_batch` and :func:`prompt_batch`, small data sets for the chapter.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn

from .layers import EncoderLayer
from .masks import causal_mask
from .model import Encoder
from .multihead import MultiHeadAttention
from .norms import LayerNorm
from .positional import LearnedPositionalEmbedding
from .tasks import EOS, FIRST_TOKEN

__all__ = ["TokenClassifier", "AttentionCall", "record_attention", "mask_kind", "prefix_lm_mask",
           "dependency_map", "running_sum_batch", "prompt_batch"]


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# -- an encoder-only model, and the same model made causal ----------------------------------------

class TokenClassifier(nn.Module):
    """Encoder-only (BERT-like) model: one set of logits per input token.

    Token embedding + learned positions -> a :class:`~transformer_lib.model.Encoder` of Pre-LN
    :class:`~transformer_lib.layers.EncoderLayer` blocks with a final LayerNorm -> a linear head.
    ``forward(tokens (B, L))`` returns logits (B, L, num_classes).

    ``causal=False`` (default): no mask, every position sees the whole sequence (bidirectional).
    ``causal=True``: the same modules and the same number of parameters, but every block gets a
    causal mask, so position t sees only tokens 0..t: a decoder-only (GPT-style) tagger. The
    switch is the whole difference between the two families' blocks, which is why the chapter
    trains both on one task.
    """

    def __init__(self, vocab_size: int, num_classes: int | None = None, d_model: int = 32,
                 num_heads: int = 4, num_layers: int = 2, d_ff: int | None = None, max_len: int = 64,
                 causal: bool = False):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_layers", num_layers),
                            ("max_len", max_len)):
            _check_positive(name, value)
        num_classes = vocab_size if num_classes is None else num_classes
        _check_positive("num_classes", num_classes)
        self.causal = bool(causal)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(max_len, d_model)
        block = EncoderLayer(d_model, num_heads, d_ff or 4 * d_model, norm_first=True)
        self.encoder = Encoder(block, num_layers, final_norm=LayerNorm(d_model))  # Pre-LN needs it
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, L), got shape {tuple(tokens.shape)}")
        L = tokens.shape[1]
        mask = causal_mask(L, device=tokens.device) if self.causal else None  # (L, L) or none
        x = self.pos(self.embed(tokens))  # (B, L, D)
        return self.head(self.encoder(x, mask))  # (B, L, num_classes)

    def keep_attention_weights(self, flag: bool = True) -> None:
        for layer in self.encoder.layers:
            layer.keep_weights = flag


# -- recording what every attention module did ------------------------------------------------------

def _as_3d_mask(mask: torch.Tensor | None, B: int, L_q: int, L_k: int) -> torch.Tensor:
    """The (B, L_q, L_k) mask of every sequence (first head); ``None`` means all True."""
    if mask is None:
        return torch.ones(B, L_q, L_k, dtype=torch.bool)
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (B|1, H|1, L_q|1, L_k)
    return m.expand(B, m.shape[1], L_q, L_k)[:, 0].detach().cpu().clone()  # (B, L_q, L_k)


@dataclass
class AttentionCall:
    """One call of a :class:`MultiHeadAttention` during a recorded forward pass.

    ``query`` (B, L_q, D), ``key`` and ``value`` (B, L_k, D) are the tensors the module received
    (detached); ``masks`` (B, L_q, L_k) is the boolean mask each sequence got (``None`` is
    recorded as all True, with ``mask_given = False``) and ``mask`` the first sequence's.
    """
    name: str
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    masks: torch.Tensor
    mask_given: bool
    is_self: bool

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


@contextlib.contextmanager
def record_attention(model: nn.Module) -> Iterator[list[AttentionCall]]:
    """Record every :class:`MultiHeadAttention` call inside the ``with`` block.

    Usage::

        with record_attention(model) as calls:
            model(src, tgt_in)
        [(c.name, c.kind, c.mask_kind, c.shapes) for c in calls]

    A call counts as self-attention when its key and value are the query tensor itself (the
    module was called with one sequence), as cross-attention when they are another tensor.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"expected an nn.Module, got {type(model).__name__}")
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not modules:
        raise ValueError(f"{type(model).__name__} contains no MultiHeadAttention module to record")
    calls: list[AttentionCall] = []
    signature = inspect.signature(MultiHeadAttention.forward)

    def hook_for(name: str) -> Callable:
        def hook(module, args, kwargs, output):
            bound = signature.bind(module, *args, **kwargs)
            bound.apply_defaults()
            q, k, v, mask = (bound.arguments[n] for n in ("query", "key", "value", "mask"))
            k = q if k is None else k
            v = k if v is None else v
            calls.append(AttentionCall(name, q.detach(), k.detach(), v.detach(),
                                       _as_3d_mask(mask, q.shape[0], q.shape[1], k.shape[1]), mask is not None,
                                       is_self=(k is q and v is q)))
        return hook

    handles = [m.register_forward_hook(hook_for(name), with_kwargs=True) for name, m in modules]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def prefix_lm_mask(n_prefix: int, L: int, device=None) -> torch.Tensor:
    """(L, L) mask of a prefix language model: query i sees key j when ``j < n_prefix`` or ``j <= i``.

    The first ``n_prefix`` tokens (the prompt, or the "source") attend to each other in both
    directions, like an encoder; the rest is causal, like a decoder. It is the decoder-only
    family's way of reading its input bidirectionally (UniLM; the "prefix LM" of the T5 paper).
    ``n_prefix = 0`` gives the causal mask, ``n_prefix = L`` the full one.
    """
    _check_positive("L", L)
    if isinstance(n_prefix, bool) or not isinstance(n_prefix, int) or not 0 <= n_prefix <= L:
        raise ValueError(f"n_prefix must be an integer in [0, L={L}], got {n_prefix!r}")
    j = torch.arange(L, device=device).unsqueeze(0)  # (1, L) key index
    return causal_mask(L, device=device) | (j < n_prefix)  # (L, L)


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


# -- measured dependencies ----------------------------------------------------------------------------

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


# -- small data sets ------------------------------------------------------------------------------------

def running_sum_batch(batch_size: int, length: int, generator: torch.Generator | None = None,
                      base: int = 10):
    """(src, target): src is ``length`` random digits, target_t = (src_0 + ... + src_t) mod ``base``.

    Both use the token ids ``FIRST_TOKEN + digit`` (vocabulary ``FIRST_TOKEN + base``). Unlike
    reversal, the natural solution needs the decoder's *own* previous output:
    target_t = target_{t-1} + src_t, so an early mistake carries into every later position when
    the model generates freely.
    """
    _check_positive("batch_size", batch_size)
    _check_positive("length", length)
    if isinstance(base, bool) or not isinstance(base, int) or base < 2:
        raise ValueError(f"base must be an integer >= 2, got {base!r}")
    digits = torch.randint(0, base, (batch_size, length), generator=generator)  # (B, L)
    sums = digits.cumsum(dim=1) % base  # (B, L)
    return digits + FIRST_TOKEN, sums + FIRST_TOKEN


def prompt_batch(src: torch.Tensor, target: torch.Tensor, sep: int = EOS) -> torch.Tensor:
    """One sequence per example for a decoder-only model: ``src, sep, target`` (B, L_s + 1 + L_t).

    A decoder-only model has no second input, so a sequence-to-sequence task is written as a
    prompt (the source and a separator) followed by the answer; the model is trained to predict
    the answer tokens and, at test time, continues the prompt.
    """
    if src.dim() != 2 or target.dim() != 2 or src.shape[0] != target.shape[0]:
        raise ValueError(f"src and target must be (B, L) with the same B, got {tuple(src.shape)} "
                         f"and {tuple(target.shape)}")
    separator = torch.full_like(src[:, :1], sep)  # (B, 1)
    return torch.cat([src, separator, target], dim=1)  # (B, L_s + 1 + L_t)
