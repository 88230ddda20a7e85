"""Answers for the checkers of transformer_lib/exercises/ch14_heads.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch
import torch.nn.functional as F

from transformer_lib.multihead import split_heads
from transformer_lib.pretrained import cosine_matrix, mean_pool
from transformer_lib.probes import diagonal_score


def _reference_head_weights(layer, x, head):
    _, w = layer.self_attn(x[None], need_weights=True)  # (1, H, L, L)
    return w[0, head]


def _no_scale(layer, x, head):
    a = layer.self_attn
    q = a.q_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    k = a.k_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    return torch.softmax(q @ k.T, dim=-1)


def _wrong_slice(layer, x, head):
    a = layer.self_attn
    q = a.q_proj(x).view(-1, a.head_dim, a.num_heads)[:, :, head]  # interleaved, not contiguous, slices
    k = a.k_proj(x).view(-1, a.head_dim, a.num_heads)[:, :, head]
    return torch.softmax(q @ k.T / a.head_dim ** 0.5, dim=-1)


def _scaled_by_d_model(layer, x, head):  # 1/sqrt(d_model), not 1/sqrt(d_k)
    a = layer.self_attn
    q = a.q_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    k = a.k_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    return torch.softmax(q @ k.T / a.d_model ** 0.5, dim=-1)


def _naive_exp(layer, x, head):  # exp / sum without the row max: overflows on large scores
    a = layer.self_attn
    q = a.q_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    k = a.k_proj(x)[:, head * a.head_dim:(head + 1) * a.head_dim]
    e = torch.exp(q @ k.T / a.head_dim ** 0.5)
    return e / e.sum(-1, keepdim=True)


def _head_weights_split(layer, x, head):
    """A right answer: split all heads with split_heads, then pick one."""
    a = layer.self_attn
    q = split_heads(a.q_proj(x[None]), a.num_heads)[0, head]  # (L, d_k)
    k = split_heads(a.k_proj(x[None]), a.num_heads)[0, head]
    return torch.softmax(q @ k.T / a.head_dim ** 0.5, dim=-1)


def _head_weights_einsum(layer, x, head):
    """A right answer: the head's rows of the weight matrices, einsum for every product."""
    a = layer.self_attn
    rows = slice(head * a.head_dim, (head + 1) * a.head_dim)
    q = torch.einsum("ld,kd->lk", x, a.q_proj.weight[rows]) + a.q_proj.bias[rows]  # (L, d_k)
    k = torch.einsum("ld,kd->lk", x, a.k_proj.weight[rows]) + a.k_proj.bias[rows]
    return torch.einsum("ik,jk->ij", q, k).div(a.head_dim ** 0.5).softmax(dim=-1).numpy()


ANSWERS = {
    'heads.mean_pool': {
        'solution': lambda: mean_pool,
        'alternatives': lambda: [
            lambda h, m: torch.stack([h[b, m[b].bool()].mean(0) for b in range(h.shape[0])]),  # row by row
            lambda h, m: np.einsum("bld,bl->bd", h.numpy(), m.numpy()) / m.numpy().sum(1, keepdims=True),  # NumPy
        ],
        'wrong': lambda: [lambda h, m: h.mean(dim=1),  # counts the padding
                          lambda h, m: (h * m.unsqueeze(-1)).sum(dim=1),  # a sum, not a mean
                          lambda h, m: (h * m.unsqueeze(-1)).sum(dim=1) / m.shape[1],
                          lambda h, m: (h * m.unsqueeze(-1)).amax(dim=1),  # max-pooling
                          lambda h, m: (h * (1 - m).unsqueeze(-1)).sum(1) / (1 - m).sum(1, keepdim=True).clamp(min=1),  # pads
                          ],
    },
    'heads.cosine_matrix': {
        'solution': lambda: cosine_matrix,
        'alternatives': lambda: [
            lambda e: F.cosine_similarity(e[:, None, :], e[None, :, :], dim=-1),  # every pair by broadcasting
            lambda e: (lambda a: a @ a.T / np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(a, axis=1)))(
                e.double().numpy()),  # NumPy: dot products over the outer product of the norms
        ],
        'wrong': lambda: [lambda e: e @ e.T,  # dot products, not cosines
                          lambda e: torch.nn.functional.normalize(e, dim=0) @ torch.nn.functional.normalize(e, dim=0).T,
                          lambda e: 1 - cosine_matrix(e),  # the cosine distance
                          lambda e: F.normalize(e, dim=-1).T @ F.normalize(e, dim=-1)],  # (D, D), not (N, N)
    },
    'heads.previous_token_score': {
        'solution': lambda: lambda A: diagonal_score(A, -1),
        'alternatives': lambda: [
            lambda A: torch.stack([A[..., i, i - 1] for i in range(1, A.shape[-1])], dim=-1).mean(-1),  # a loop
            lambda A: (A * torch.ones(A.shape[-1], A.shape[-1]).tril(-1).triu(-1)).sum((-2, -1)) / (A.shape[-1] - 1),
        ],
        'wrong': lambda: [lambda A: torch.diagonal(A, offset=1, dim1=-2, dim2=-1).mean(-1),  # next token
                          lambda A: torch.diagonal(A, offset=0, dim1=-2, dim2=-1).mean(-1),  # itself
                          lambda A: torch.diagonal(A, offset=-1, dim1=-2, dim2=-1).sum(-1) / A.shape[-1],
                          lambda A: torch.diagonal(A, offset=-1).mean(-1),  # diagonal of the first two axes
                          lambda A: A[..., 1:, 0].mean(-1)],  # the first token's column
    },
    'heads.head_weights': {
        'solution': lambda: _reference_head_weights,
        'alternatives': lambda: [_head_weights_split, _head_weights_einsum],
        'wrong': lambda: [_no_scale, _wrong_slice,
                          lambda layer, x, head: _reference_head_weights(layer, x, head).T,
                          _scaled_by_d_model,
                          lambda layer, x, head: _reference_head_weights(layer, x, (head + 1) % 4),  # next head
                          _naive_exp],
    },
}
