"""Where the compute goes: a FLOP model of one Transformer block, and parameter counts.

Counting multiply-accumulates per block for n tokens of width d and FFN width e*d:

* attention projections Q, K, V, O:  4 n d^2
* scores Q K^T and mixing A V:       2 n^2 d
* feed-forward (two matrices):       2 n d (e d)

Attention = projections + scores/mixing. With e = 4 the attention share passes the FFN's exactly
at n = 2d, where 2 n^2 d = 4 n d^2 (for d = 512: n = 1024, a 50/50 split). Multiply by 2 for
FLOPs (one multiply and one add); shares do not change. Like Kaplan et al. (2020, Table 1) this
ignores softmax, norms and biases, which are O(n d) or O(n^2 h).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

__all__ = ["BlockCost", "block_flops", "cost_table", "count_parameters", "transformer_parameters",
           "attention_ffn_crossover"]


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


def block_flops(n: int, d: int, expansion: float = 4) -> BlockCost:
    """The cost model of one block at sequence length n and width d."""
    if n < 1 or d < 1 or expansion <= 0:
        raise ValueError(f"need n >= 1, d >= 1 and expansion > 0, got n={n}, d={d}, expansion={expansion}")
    return BlockCost(n, d, expansion, projections=4 * n * d * d, scores=2 * n * n * d,
                     ffn=2 * n * d * (expansion * d))


def cost_table(ns, d: int = 512, expansion: float = 4) -> list[dict]:
    """Rows {n, attention %, ffn %, ...} for each n: the seed's table at d = 512."""
    rows = []
    for n in ns:
        c = block_flops(n, d, expansion)
        rows.append({"n": n, **{k: round(v, 2) for k, v in c.shares().items()}})
    return rows


def attention_ffn_crossover(d: int, expansion: float = 4) -> float:
    """The n at which attention and FFN cost the same: 4nd^2 + 2n^2 d = 2 e n d^2  =>  n = (e - 2) d."""
    return (expansion - 2) * d


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of (distinct) parameters in ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def transformer_parameters(d_model: int = 512, num_heads: int = 8, d_ff: int = 2048,
                           num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                           vocab_size: int = 0, shared_embeddings: bool = True) -> dict[str, int]:
    """Analytic parameter count of the encoder-decoder (biases and LayerNorms included).

    With ``vocab_size`` = 37000 and shared embeddings (the paper's base model) the total is ~63M;
    the paper reports 65M.
    """
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
