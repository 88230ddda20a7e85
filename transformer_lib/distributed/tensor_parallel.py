"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): one layer's matrices split over ranks.

The MLP ``Y = act(X W1^T + b1) W2^T + b2`` is split so that it needs **one** all-reduce:

* ``W1`` by its output units (*column-parallel*): rank r holds rows ``[r f/N, (r + 1) f/N)`` of
  W1 (d_ff, d) and of b1, and computes its slice of the hidden layer with no communication --
  the activation is element-wise, so each rank can apply it to its own slice;
* ``W2`` by its input units (*row-parallel*): rank r holds the matching columns of W2 (d, d_ff)
  and computes a partial output ``h_r W2_r^T``; the sum over ranks (one all-reduce) is the full
  output, and b2 is added once, after the sum.

Attention splits the same way by **heads**: W^Q, W^K, W^V column-parallel (rank r computes its
H/N heads completely, since heads never mix), W^O row-parallel, one all-reduce.

Megatron writes the two communication points as a pair of autograd functions: ``f`` is the
identity going forward and an all-reduce of the input's gradient going backward (every rank used
the whole input); ``g`` is an all-reduce going forward and the identity going backward.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_choice, check_parallel_split
from ..attention import attention_fast
from ..feedforward import FeedForward
from ..multihead import MultiHeadAttention, merge_heads, repeat_kv, split_heads

__all__ = ["copy_to_parallel", "reduce_from_parallel", "ColumnRowParallelMLP", "HeadParallelAttention"]


class _CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce (sum) forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def copy_to_parallel(x: torch.Tensor) -> torch.Tensor:
    """Enter a tensor-parallel region: ``x`` unchanged, but its gradient summed over the ranks
    (each rank's slice of the layer contributes a part of dL/dx)."""
    return _CopyToParallel.apply(x)


def reduce_from_parallel(x: torch.Tensor) -> torch.Tensor:
    """Leave a tensor-parallel region: the sum of the ranks' partial outputs (the one
    all-reduce); the gradient passes through unchanged, since every rank needs all of it."""
    return _ReduceFromParallel.apply(x)


def _shard(t: torch.Tensor | None, dim: int, rank: int, world_size: int) -> torch.Tensor | None:
    if t is None:
        return None
    return t.detach().chunk(world_size, dim=dim)[rank].clone()


class ColumnRowParallelMLP(nn.Module):
    """Rank ``rank``'s 1/N share of a :class:`~transformer_lib.feedforward.FeedForward`
    (ReLU or GELU): W1 split by output units, W2 by input units, one all-reduce per forward."""

    def __init__(self, dense: FeedForward, rank: int, world_size: int):
        super().__init__()
        check_choice("dense.activation", dense.activation, ("relu", "gelu"))  # elementwise: splits by unit
        check_parallel_split("d_ff", dense.d_ff, world_size)
        self.activation, self.rank = dense.activation, rank
        self.w1 = nn.Parameter(_shard(dense.linear1.weight, 0, rank, world_size))  # (d_ff/N, d)
        self.b1 = nn.Parameter(_shard(dense.linear1.bias, 0, rank, world_size)) if dense.linear1.bias is not None else None
        self.w2 = nn.Parameter(_shard(dense.linear2.weight, 1, rank, world_size))  # (d, d_ff/N)
        self.b2 = nn.Parameter(dense.linear2.bias.detach().clone()) if dense.linear2.bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_parallel(x)  # (B, L, d) on every rank
        h = F.linear(x, self.w1, self.b1)  # (B, L, d_ff/N): this rank's hidden units, no communication
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        partial = F.linear(h, self.w2)  # (B, L, d): this rank's share of the sum over hidden units
        out = reduce_from_parallel(partial)  # (B, L, d): the one all-reduce
        return out if self.b2 is None else out + self.b2  # the bias once, after the sum


class HeadParallelAttention(nn.Module):
    """Rank ``rank``'s H/N heads of a :class:`~transformer_lib.multihead.MultiHeadAttention`:
    Q, K, V column-parallel (whole heads per rank), W^O row-parallel, one all-reduce. With
    grouped-query attention each rank keeps its query heads' key/value heads (H_kv/N of them)."""

    def __init__(self, dense: MultiHeadAttention, rank: int, world_size: int):
        super().__init__()
        check_parallel_split("num_heads", dense.num_heads, world_size)
        check_parallel_split("num_kv_heads", dense.num_kv_heads, world_size)
        self.local_heads, self.local_kv_heads = dense.num_heads // world_size, dense.num_kv_heads // world_size
        for name in ("q", "k", "v"):  # rows [r D/N, (r + 1) D/N) of W (D, D): heads r H/N .. (r + 1) H/N - 1
            proj = getattr(dense, f"{name}_proj")
            setattr(self, f"w{name}", nn.Parameter(_shard(proj.weight, 0, rank, world_size)))  # (D/N, D)
            setattr(self, f"b{name}", nn.Parameter(_shard(proj.bias, 0, rank, world_size))
                    if proj.bias is not None else None)
        self.wo = nn.Parameter(_shard(dense.out_proj.weight, 1, rank, world_size))  # (D, D/N)
        self.bo = nn.Parameter(dense.out_proj.bias.detach().clone()) if dense.out_proj.bias is not None else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = copy_to_parallel(x)  # (B, L, D)
        q = split_heads(F.linear(x, self.wq, self.bq), self.local_heads)  # (B, H/N, L, d_k)
        k = split_heads(F.linear(x, self.wk, self.bk), self.local_kv_heads)  # (B, H_kv/N, L, d_k)
        v = split_heads(F.linear(x, self.wv, self.bv), self.local_kv_heads)  # (B, H_kv/N, L, d_k)
        k, v = repeat_kv(k, self.local_heads // self.local_kv_heads), repeat_kv(v, self.local_heads // self.local_kv_heads)
        heads = merge_heads(attention_fast(q, k, v, mask))  # (B, L, D/N): this rank's heads, concatenated
        out = reduce_from_parallel(F.linear(heads, self.wo))  # (B, L, D): the one all-reduce
        return out if self.bo is None else out + self.bo


def compare_with_dense(rank: int, world_size: int, d_model: int = 32, num_heads: int = 4, length: int = 7,
                       seed: int = 0) -> dict:
    """Run on every rank of a group: build the dense MLP and attention (seeded, so identical on
    every rank), split them with this module, and return, for each, the largest difference between
    the dense and the tensor-parallel outputs, the all-reduces one forward made (counted by
    wrapping ``dist.all_reduce`` for the call) and the parameters this rank holds."""
    from ..masks import causal_mask
    torch.manual_seed(seed)
    ffn, mha = FeedForward(d_model, 4 * d_model, activation="gelu"), MultiHeadAttention(d_model, num_heads)
    x = torch.randn(2, length, d_model)  # (B, L, D), the same on every rank
    mask = causal_mask(length)
    cases = {"mlp": (ffn, ColumnRowParallelMLP(ffn, rank, world_size), lambda m: m(x)),
             "attention": (mha, HeadParallelAttention(mha, rank, world_size), lambda m: m(x, mask))}
    real_all_reduce, out = dist.all_reduce, {}
    for name, (dense, shard, call) in cases.items():
        count = [0]

        def counting(*args, **kwargs):
            count[0] += 1
            return real_all_reduce(*args, **kwargs)

        with torch.no_grad():
            expected = ffn(x) if name == "mlp" else mha(x, mask=mask)[0]  # (B, L, D)
            dist.all_reduce = counting
            try:
                got = call(shard)  # (B, L, D)
            finally:
                dist.all_reduce = real_all_reduce
        out[name] = {"max_diff": (expected - got).abs().max().item(), "all_reduces": count[0],
                     "local_params": sum(p.numel() for p in shard.parameters()),
                     "dense_params": sum(p.numel() for p in dense.parameters())}
    return out
