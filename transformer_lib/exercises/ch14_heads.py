"""Chapter 14 (attention heads in a real model): exercise checkers.

The checkers use small random tensors and a small random encoder layer, never the pretrained
weights, so they run in milliseconds and do not need the weights package.
"""
import torch

from ..layers import TransformerBlock
from ..pretrained import cosine_matrix, mean_pool
from ..probes import diagonal_score
from ._core import compare_arrays, compare_function, exercise, seed_cpu


def _pool_inputs():
    g = torch.Generator().manual_seed(13)
    out = []
    for B, L, D, lengths in ((1, 4, 3, [4]), (3, 6, 5, [6, 2, 4]), (2, 9, 8, [1, 7])):
        hidden = torch.randn(B, L, D, generator=g)
        mask = (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, L) 1 = real token
        out.append((hidden, mask))
    return out


@exercise("heads.mean_pool",
          hint="multiply by the mask (unsqueezed to (B, L, 1)), sum over L, divide by "
          "the number of real tokens in each row")
def _check_mean_pool(answer):
    return compare_function(answer, mean_pool, _pool_inputs(), what="pooled embeddings")


def _embedding_inputs():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(2, 3, generator=g),), (3.0 * torch.randn(5, 16, generator=g),),
            (torch.randn(4, 384, generator=g) + 2.0,)]


@exercise("heads.cosine_matrix",
          hint="divide each row by its L2 norm first; then one matrix product gives "
          "every pair")
def _check_cosine(answer):
    msg = compare_function(answer, cosine_matrix, _embedding_inputs(), what="similarity matrix")
    got = answer(torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]))
    compare_arrays(torch.as_tensor(got).diagonal(), torch.ones(3), what="the diagonal (each sentence with itself)")
    return msg


def _weight_inputs():
    g = torch.Generator().manual_seed(3)
    out = []
    for shape in ((5, 5), (12, 7, 7), (6, 12, 10, 10)):
        out.append((torch.softmax(torch.randn(*shape, generator=g) * 3, dim=-1),))
    return out


@exercise("heads.previous_token_score",
          hint="the key just before query i sits at column i - 1: "
          "torch.diagonal with offset=-1 over the last two dims, then the mean")
def _check_prev(answer):
    return compare_function(answer, lambda A: diagonal_score(A, -1), _weight_inputs(), what="previous-token score")


def _layer_inputs():
    g = torch.Generator().manual_seed(11)
    seed_cpu(11)  # a fixed layer (the global CPU generator is restored after every check)
    layer = TransformerBlock(24, 4, 48).eval()  # d_k = 6
    scale = {5: 1.0, 7: 1.0, 3: 40.0}  # the last input: scores in the hundreds, exp / sum overflows
    return [(layer, scale[L] * torch.randn(L, 24, generator=g), h) for L, h in ((5, 0), (7, 3), (3, 1))]


@exercise("heads.head_weights",
          hint="head h owns the contiguous columns h*d_k:(h+1)*d_k of q_proj(x) and "
          "k_proj(x); divide the scores by sqrt(d_k) before the softmax over keys")
def _check_head_weights(answer):
    with torch.no_grad():
        module_weights = lambda layer, x, head: layer.self_attn(x[None], need_weights=True)[1][0, head]  # (L, L)
        return compare_function(answer, module_weights, _layer_inputs(),
                                what="attention weights", describe=lambda a: f"L = {a[1].shape[0]}, head {a[2]}")
