"""Where the compute goes: a cost model of one Transformer block, work and depth, parameter counts.

Counting multiply-accumulates (MACs) per block for n tokens of width d and FFN width e*d
(:func:`block_macs`; chapter 10):

* attention projections Q, K, V, O:  4 n d^2
* scores Q K^T and mixing A V:       2 n^2 d
* feed-forward (two matrices):       2 n d (e d)

Attention = projections + scores/mixing. With e = 4 the attention share passes the FFN's exactly
at n = 2d, where 2 n^2 d = 4 n d^2 (for d = 512: n = 1024, a 50/50 split). Multiply by 2 for
FLOPs (one multiply and one add); shares do not change. Like Kaplan et al. (2020, Table 1) this
ignores softmax, norms and biases, which are O(n d) or O(n^2 h).

Work and depth (chapter 9). A computation is a list of levels; the products inside one level
are independent, a level cannot start before the previous one is done. :func:`rnn_levels` and
:func:`encoder_levels` list the matrix products (in MACs) of one recurrent layer and one encoder
layer; :func:`schedule_time` is how long a machine with ``lanes`` multiply-add units needs to run
them level by level (Brent's bound), optionally with a fixed overhead per level. With few lanes
the total work decides (the RNN does less of it); with many lanes the number of levels decides
(the RNN has n of them, the Transformer a handful).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch.nn as nn

from ._checks import (check_bool, check_choice, check_heads_divide, check_int, check_lengths, check_levels, check_module,
                      check_number, check_sizes)

__all__ = ["BlockCost", "block_macs", "cost_table", "count_parameters", "transformer_parameters",
           "attention_ffn_crossover", "Level", "rnn_levels", "encoder_levels", "schedule_time",
           "sequential_steps"]


@dataclass(frozen=True)
class BlockCost:
    """Multiply-accumulate counts of one block (multiply by 2 for FLOPs)."""
    n: int
    d: int
    expansion: float
    projections: float  # 4 n d^2
    scores: float  # 2 n^2 d  (QK^T and AV)
    ffn: float  # 2 n d (expansion d)

    @property
    def attention(self) -> float:
        return self.projections + self.scores

    @property
    def total(self) -> float:
        return self.attention + self.ffn

    def shares(self) -> dict[str, float]:
        """Percentages of the block: attention (projections + scores) vs FFN, and the parts."""
        t = self.total
        return {"attention": 100 * self.attention / t, "ffn": 100 * self.ffn / t,
                "projections": 100 * self.projections / t, "scores": 100 * self.scores / t}


def block_macs(n: int, d: int, expansion: float = 4) -> BlockCost:
    """The cost model of one block at sequence length n and width d, in multiply-accumulates.

    One MAC is one multiply and one add: 2 FLOPs. The shares are the same either way.
    """
    check_sizes(n, d, expansion)
    return BlockCost(n, d, expansion, projections=4 * n * d * d, scores=2 * n * n * d,
                     ffn=2 * n * d * (expansion * d))


def cost_table(ns, d: int = 512, expansion: float = 4) -> list[dict]:
    """Rows {n, attention %, ffn %, ...} for each n (chapter 10's table at d = 512)."""
    check_lengths(ns)
    rows = []
    for n in ns:
        c = block_macs(n, d, expansion)
        rows.append({"n": n, **{k: round(v, 2) for k, v in c.shares().items()}})
    return rows


def attention_ffn_crossover(d: int, expansion: float = 4) -> float:
    """The n at which attention and FFN cost the same: 4nd^2 + 2n^2 d = 2 e n d^2  =>  n = (e - 2) d.

    A result <= 0 (expansion <= 2) means there is no crossover: attention costs more at every n."""
    check_int("d", d)
    check_number("expansion", expansion, 0.0, low_open=True)
    return (expansion - 2) * d


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of (distinct) parameters in ``module``."""
    check_module(module, "module")
    check_bool("trainable_only", trainable_only)
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def transformer_parameters(d_model: int = 512, num_heads: int = 8, d_ff: int = 2048,
                           num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                           vocab_size: int = 0, shared_embeddings: bool = True) -> dict[str, int]:
    """Analytic parameter count of the encoder-decoder (biases and LayerNorms included).

    With ``vocab_size`` = 37000 and shared embeddings (the paper's base model) the total is ~63M;
    the paper reports 65M.
    """
    check_heads_divide(d_model, num_heads)
    check_int("d_ff", d_ff)
    check_int("num_encoder_layers", num_encoder_layers, 0)
    check_int("num_decoder_layers", num_decoder_layers, 0)
    check_int("vocab_size", vocab_size, 0)
    check_bool("shared_embeddings", shared_embeddings)
    attn = 4 * (d_model * d_model + d_model)
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    ln = 2 * d_model
    enc_layer = attn + ffn + 2 * ln
    dec_layer = 2 * attn + ffn + 3 * ln
    emb = vocab_size * d_model * (1 if shared_embeddings else 3)
    counts = {"encoder_layer": enc_layer, "decoder_layer": dec_layer,
              "encoder": num_encoder_layers * enc_layer, "decoder": num_decoder_layers * dec_layer,
              "embeddings": emb}
    counts["total"] = counts["encoder"] + counts["decoder"] + emb
    return counts


# -- work and depth (chapter 9) ------------------------------------------------------------------

@dataclass(frozen=True)
class Level:
    """One level of a computation: ``macs`` multiply-accumulates that may all run at once."""
    name: str
    macs: int


def rnn_levels(n: int, d: int, batch: int = 1) -> list[Level]:
    """Levels of one Elman RNN layer (input and hidden width d) over n tokens.

    The input projection x_t W_ih of all n tokens has no dependency between steps: one level.
    Then come n levels of h_{t-1} W_hh, each waiting for the one before. (Adds and tanh are
    element-wise, cheap next to the products, and left out as in :func:`block_macs`.)
    """
    check_sizes(n, d, batch=batch)
    return [Level("input projection (all steps)", n * batch * d * d)] + \
        [Level(f"step {t + 1}: h W_hh", batch * d * d) for t in range(n)]


def encoder_levels(n: int, d: int, batch: int = 1, expansion: float = 4) -> list[Level]:
    """Levels of one Transformer encoder layer over n tokens (the products of :func:`block_macs`).

    Q, K and V are independent of each other, so their projections form one level.
    """
    check_sizes(n, d, expansion, batch)
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
    check_levels(levels, Level)
    check_number("lanes", lanes, 1.0)
    check_number("overhead", overhead, 0.0)
    return sum(math.ceil(level.macs / lanes) + overhead for level in levels)


def sequential_steps(model: str, n: int, num_layers: int = 1) -> int:
    """Dependent matrix-product levels to process n tokens with ``num_layers`` layers.

    * Transformer: 6 levels per layer (:func:`encoder_levels`), whatever n is.
    * RNN: one level for the first layer's input projection, then a wavefront: cell (layer l,
      step t) needs (l - 1, t) and (l, t - 1), so it can run at wave l + t - 1, and the last cell
      finishes at wave n + num_layers - 1. Stacking RNN layers adds to n; it does not multiply it.
    """
    check_choice("model", model, ("rnn", "transformer"))
    check_int("n", n)
    check_int("num_layers", num_layers)
    if model == "rnn":
        return 1 + n + num_layers - 1
    return num_layers * len(encoder_levels(n, 1))  # "transformer"
