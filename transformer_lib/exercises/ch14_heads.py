"""Chapter 14 (attention heads in a real model): exercise checkers.

The checkers use small random tensors and a small random encoder layer, never the pretrained
weights, so they run in milliseconds and do not need the weights package.
"""
import numpy as np
import torch
import torch.nn.functional as F

from ..layers import EncoderLayer
from ..multihead import split_heads
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


@exercise("heads.mean_pool", hint="multiply by the mask (unsqueezed to (B, L, 1)), sum over L, divide by "
          "the number of real tokens in each row",
          wrong_answers=lambda: [lambda h, m: h.mean(dim=1),  # counts the padding
                                 lambda h, m: (h * m.unsqueeze(-1)).sum(dim=1),  # a sum, not a mean
                                 lambda h, m: (h * m.unsqueeze(-1)).sum(dim=1) / m.shape[1],
                                 lambda h, m: (h * m.unsqueeze(-1)).amax(dim=1),  # max-pooling
                                 lambda h, m: (h * (1 - m).unsqueeze(-1)).sum(1) / (1 - m).sum(1, keepdim=True).clamp(min=1),  # pads
                                 ],
          solution=lambda: mean_pool,
          alternative_answers=lambda: [
              lambda h, m: torch.stack([h[b, m[b].bool()].mean(0) for b in range(h.shape[0])]),  # row by row
              lambda h, m: np.einsum("bld,bl->bd", h.numpy(), m.numpy()) / m.numpy().sum(1, keepdims=True),  # NumPy
          ])
def _check_mean_pool(answer):
    return compare_function(answer, mean_pool, _pool_inputs(), what="pooled embeddings")


def _embedding_inputs():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(2, 3, generator=g),), (3.0 * torch.randn(5, 16, generator=g),),
            (torch.randn(4, 384, generator=g) + 2.0,)]


@exercise("heads.cosine_matrix", hint="divide each row by its L2 norm first; then one matrix product gives "
          "every pair",
          wrong_answers=lambda: [lambda e: e @ e.T,  # dot products, not cosines
                                 lambda e: torch.nn.functional.normalize(e, dim=0) @ torch.nn.functional.normalize(e, dim=0).T,
                                 lambda e: 1 - cosine_matrix(e),  # the cosine distance
                                 lambda e: F.normalize(e, dim=-1).T @ F.normalize(e, dim=-1)],  # (D, D), not (N, N)
          solution=lambda: cosine_matrix,
          alternative_answers=lambda: [
              lambda e: F.cosine_similarity(e[:, None, :], e[None, :, :], dim=-1),  # every pair by broadcasting
              lambda e: (lambda a: a @ a.T / np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(a, axis=1)))(
                  e.double().numpy()),  # NumPy: dot products over the outer product of the norms
          ])
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


@exercise("heads.previous_token_score", hint="the key just before query i sits at column i - 1: "
          "torch.diagonal with offset=-1 over the last two dims, then the mean",
          wrong_answers=lambda: [lambda A: torch.diagonal(A, offset=1, dim1=-2, dim2=-1).mean(-1),  # next token
                                 lambda A: torch.diagonal(A, offset=0, dim1=-2, dim2=-1).mean(-1),  # itself
                                 lambda A: torch.diagonal(A, offset=-1, dim1=-2, dim2=-1).sum(-1) / A.shape[-1],
                                 lambda A: torch.diagonal(A, offset=-1).mean(-1),  # diagonal of the first two axes
                                 lambda A: A[..., 1:, 0].mean(-1)],  # the first token's column
          solution=lambda: lambda A: diagonal_score(A, -1),
          alternative_answers=lambda: [
              lambda A: torch.stack([A[..., i, i - 1] for i in range(1, A.shape[-1])], dim=-1).mean(-1),  # a loop
              lambda A: (A * torch.ones(A.shape[-1], A.shape[-1]).tril(-1).triu(-1)).sum((-2, -1)) / (A.shape[-1] - 1),
          ])
def _check_prev(answer):
    return compare_function(answer, lambda A: diagonal_score(A, -1), _weight_inputs(), what="previous-token score")


def _reference_head_weights(layer, x, head):
    _, w = layer.self_attn(x[None], need_weights=True)  # (1, H, L, L)
    return w[0, head]


def _layer_inputs():
    g = torch.Generator().manual_seed(11)
    seed_cpu(11)  # a fixed layer (the global CPU generator is restored after every check)
    layer = EncoderLayer(24, 4, 48).eval()  # d_k = 6
    return [(layer, torch.randn(L, 24, generator=g), h) for L, h in ((5, 0), (7, 3), (3, 1))]


def _no_scale(layer, x, head):
    a = layer.self_attn
    q = a.q_proj(x)[:, head * a.d_k:(head + 1) * a.d_k]
    k = a.k_proj(x)[:, head * a.d_k:(head + 1) * a.d_k]
    return torch.softmax(q @ k.T, dim=-1)


def _wrong_slice(layer, x, head):
    a = layer.self_attn
    q = a.q_proj(x).view(-1, a.d_k, a.num_heads)[:, :, head]  # interleaved, not contiguous, slices
    k = a.k_proj(x).view(-1, a.d_k, a.num_heads)[:, :, head]
    return torch.softmax(q @ k.T / a.d_k ** 0.5, dim=-1)


def _scaled_by_d_model(layer, x, head):  # 1/sqrt(d_model), not 1/sqrt(d_k)
    a = layer.self_attn
    q = a.q_proj(x)[:, head * a.d_k:(head + 1) * a.d_k]
    k = a.k_proj(x)[:, head * a.d_k:(head + 1) * a.d_k]
    return torch.softmax(q @ k.T / a.d_model ** 0.5, dim=-1)


def _head_weights_split(layer, x, head):
    """A right answer: split all heads with split_heads, then pick one."""
    a = layer.self_attn
    q = split_heads(a.q_proj(x[None]), a.num_heads)[0, head]  # (L, d_k)
    k = split_heads(a.k_proj(x[None]), a.num_heads)[0, head]
    return torch.softmax(q @ k.T / a.d_k ** 0.5, dim=-1)


def _head_weights_einsum(layer, x, head):
    """A right answer: the head's rows of the weight matrices, einsum for every product."""
    a = layer.self_attn
    rows = slice(head * a.d_k, (head + 1) * a.d_k)
    q = torch.einsum("ld,kd->lk", x, a.q_proj.weight[rows]) + a.q_proj.bias[rows]  # (L, d_k)
    k = torch.einsum("ld,kd->lk", x, a.k_proj.weight[rows]) + a.k_proj.bias[rows]
    return torch.einsum("ik,jk->ij", q, k).div(a.d_k ** 0.5).softmax(dim=-1).numpy()


@exercise("heads.head_weights", hint="head h owns the contiguous columns h*d_k:(h+1)*d_k of q_proj(x) and "
          "k_proj(x); divide the scores by sqrt(d_k) before the softmax over keys",
          wrong_answers=lambda: [_no_scale, _wrong_slice,
                                 lambda layer, x, head: _reference_head_weights(layer, x, head).T,
                                 _scaled_by_d_model,
                                 lambda layer, x, head: _reference_head_weights(layer, x, (head + 1) % 4)],  # next head
          solution=lambda: _reference_head_weights,
          alternative_answers=lambda: [_head_weights_split, _head_weights_einsum])
def _check_head_weights(answer):
    with torch.no_grad():
        return compare_function(answer, _reference_head_weights, _layer_inputs(),
                                what="attention weights", describe=lambda a: f"L = {a[1].shape[0]}, head {a[2]}")
