"""RNN vs Transformer: work, depth and path length.

Three ideas from the chapter "RNN vs Transformer", each as a small tool:

* **Work and depth.** A computation is a set of levels; the operations inside one level are
  independent, a level cannot start before the previous one is done. :func:`rnn_levels` and
  :func:`encoder_levels` list the matrix products (in multiply-accumulates, MACs) of one
  recurrent layer and one Transformer encoder layer; :func:`schedule_time` is how long a machine
  with ``lanes`` multiply-add units needs to run them level by level (Brent's bound, in units of
  one multiply-add), optionally with a fixed overhead per level. With few lanes the total work
  decides (the RNN does less of it); with many lanes the number of levels decides (the RNN has
  n of them, the Transformer a handful).
* **A Transformer classifier** with the interface of :class:`~transformer_lib.rnn.RNNClassifier`
  (embedding ``embed``, head on the last position), so the two can be trained on the same task.
* **Path length.** :func:`input_gradient_norms` measures how much of the loss's gradient reaches
  each input position. In an RNN the signal from token 1 to the last state passes through every
  step in between; in attention it is one hop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import EncoderLayer
from .positional import LearnedPositionalEmbedding

__all__ = ["Level", "rnn_levels", "encoder_levels", "schedule_time", "sequential_steps",
           "TransformerClassifier", "input_gradient_norms"]


@dataclass(frozen=True)
class Level:
    """One level of a computation: ``macs`` multiply-accumulates that may all run at once."""
    name: str
    macs: int


def _check_sizes(n: int, d: int, batch: int) -> None:
    if n < 1 or d < 1 or batch < 1:
        raise ValueError(f"need n >= 1, d >= 1 and batch >= 1, got n={n}, d={d}, batch={batch}")


def rnn_levels(n: int, d: int, batch: int = 1) -> list[Level]:
    """Levels of one Elman RNN layer (input and hidden width d) over n tokens.

    The input projection x_t W_ih of all n tokens has no dependency between steps: one level.
    Then come n levels of h_{t-1} W_hh, each waiting for the one before. (Adds and tanh are
    element-wise, cheap next to the products, and left out like in :mod:`transformer_lib.cost`.)
    """
    _check_sizes(n, d, batch)
    return [Level("input projection (all steps)", n * batch * d * d)] + \
        [Level(f"step {t + 1}: h W_hh", batch * d * d) for t in range(n)]


def encoder_levels(n: int, d: int, batch: int = 1, expansion: float = 4) -> list[Level]:
    """Levels of one Transformer encoder layer over n tokens (the products of :func:`cost.block_flops`).

    Q, K and V are independent of each other, so their projections form one level.
    """
    _check_sizes(n, d, batch)
    if expansion <= 0:
        raise ValueError(f"expansion must be > 0, got {expansion}")
    e = int(round(expansion * d))
    return [Level("Q, K, V projections", 3 * batch * n * d * d),
            Level("scores Q K^T", batch * n * n * d),
            Level("mixing A V", batch * n * n * d),
            Level("output projection", batch * n * d * d),
            Level("FFN expand", batch * n * d * e),
            Level("FFN contract", batch * n * e * d)]


def schedule_time(levels: list[Level], lanes: float, overhead: float = 0) -> float:
    """Time to run ``levels`` one after another on ``lanes`` multiply-add units, in ticks.

    A tick is the time one lane takes for one multiply-add. Each level takes
    ceil(macs / lanes) ticks plus ``overhead``: the fixed cost of starting a dependent step
    (launching a kernel, synchronizing, waiting for the previous result), which does not shrink
    with more lanes. With 1 lane and no overhead the time is the total work; with unlimited lanes
    it is the number of levels times (1 + overhead), the depth.
    """
    if not lanes >= 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    if not overhead >= 0:
        raise ValueError(f"overhead must be >= 0, got {overhead}")
    return sum(math.ceil(level.macs / lanes) + overhead for level in levels)


def sequential_steps(model: str, n: int, num_layers: int = 1) -> int:
    """Dependent matrix-product levels to process n tokens with ``num_layers`` layers.

    * Transformer: 6 levels per layer (:func:`encoder_levels`), whatever n is.
    * RNN: one level for the first layer's input projection, then a wavefront: cell (layer l,
      step t) needs (l - 1, t) and (l, t - 1), so it can run at wave l + t - 1, and the last cell
      finishes at wave n + num_layers - 1. Stacking RNN layers adds to n; it does not multiply it.
    """
    if n < 1 or num_layers < 1:
        raise ValueError(f"need n >= 1 and num_layers >= 1, got n={n}, num_layers={num_layers}")
    if model == "rnn":
        return 1 + n + num_layers - 1
    if model == "transformer":
        return num_layers * len(encoder_levels(n, 1))
    raise ValueError(f"model must be 'rnn' or 'transformer', got {model!r}")


class TransformerClassifier(nn.Module):
    """Embedding + learned positions -> encoder layers -> linear head on the last position.

    Same interface as :class:`~transformer_lib.rnn.RNNClassifier`: ``forward(tokens (B, L))``
    returns logits (B, num_classes), and the token embedding is ``self.embed``. Reading the last
    position (rather than pooling) keeps the comparison fair: both models must move the first
    token's information to position L; the RNN needs L - 1 steps for that, attention one hop.
    """

    def __init__(self, vocab_size: int, d_model: int, num_classes: int, num_heads: int = 4,
                 num_layers: int = 1, max_len: int = 512, d_ff: int | None = None,
                 norm_first: bool = True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(max_len, d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff or 4 * d_model, norm_first=norm_first)
            for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, L), got shape {tuple(tokens.shape)}")
        x = self.pos(self.embed(tokens))  # (B, L, D)
        for layer in self.layers:
            x = layer(x)  # (B, L, D), no mask: every position sees every other
        return self.head(self.norm(x[:, -1]))  # (B, num_classes)


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
