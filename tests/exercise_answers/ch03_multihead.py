"""Answers for the checkers of transformer_lib/exercises/ch03_multihead.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np
import torch

from transformer_lib.cost import count_parameters
from transformer_lib.multihead import MultiHeadAttention, merge_heads, split_heads


def _mha_parameters(d_model: int, num_heads: int, bias: bool = True) -> int:
    return count_parameters(MultiHeadAttention(d_model, num_heads, bias=bias))


def _reference_forward(x, w_q, w_k, w_v, w_o, num_heads):
    D = x.shape[-1]
    mha = MultiHeadAttention(D, num_heads, bias=False)
    with torch.no_grad():  # nn.Linear stores W transposed: y = x @ weight.T
        for proj, w in ((mha.q_proj, w_q), (mha.k_proj, w_k), (mha.v_proj, w_v), (mha.out_proj, w_o)):
            proj.weight.copy_(w.T)
        return mha(x)[0]


def _single_head_forward(x, w_q, w_k, w_v, w_o, num_heads):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
    return (weights @ v) @ w_o


def _forward_scaled_by_d_model(x, w_q, w_k, w_v, w_o, num_heads):  # 1/sqrt(d_model), not 1/sqrt(d_k)
    q, k, v = (split_heads(x @ w, num_heads) for w in (w_q, w_k, w_v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
    return merge_heads(weights @ v) @ w_o


def _forward_transposed_weights(x, w_q, w_k, w_v, w_o, num_heads):  # x @ W^T: nn.Linear's storage
    return _reference_forward(x, w_q.T, w_k.T, w_v.T, w_o.T, num_heads)


def _forward_naive_exp(x, w_q, w_k, w_v, w_o, num_heads):  # exp / sum without the row max: overflows
    q, k, v = (split_heads(x @ w, num_heads) for w in (w_q, w_k, w_v))  # (B, H, L, d_k)
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return merge_heads((e / e.sum(-1, keepdim=True)) @ v) @ w_o


def _forward_head_by_head(x, w_q, w_k, w_v, w_o, num_heads):
    """A right answer: one head at a time on its own column block of W, concatenated, then W^O."""
    d_k = x.shape[-1] // num_heads
    heads = []
    for h in range(num_heads):
        cols = slice(h * d_k, (h + 1) * d_k)
        q, k, v = x @ w_q[:, cols], x @ w_k[:, cols], x @ w_v[:, cols]  # (B, L, d_k) each
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)  # (B, L, L)
        heads.append(weights @ v)
    return torch.cat(heads, dim=-1) @ w_o  # (B, L, D)


def _forward_einsum(x, w_q, w_k, w_v, w_o, num_heads):
    """A right answer with einsum and the weights viewed as (D, H, d_k)."""
    D = x.shape[-1]
    q, k, v = (torch.einsum("bld,dhk->bhlk", x, w.view(D, num_heads, -1)) for w in (w_q, w_k, w_v))
    weights = torch.softmax(torch.einsum("bhqk,bhmk->bhqm", q, k) / q.shape[-1] ** 0.5, dim=-1)
    heads = torch.einsum("bhqm,bhmk->bqhk", weights, v).flatten(2)  # (B, L, H * d_k)
    return heads @ w_o


def _unscaled_forward(x, w_q, w_k, w_v, w_o, num_heads):
    B, L, D = x.shape
    q, k, v = (split_heads(x @ w, num_heads) for w in (w_q, w_k, w_v))
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return merge_heads(weights @ v) @ w_o


ANSWERS = {
    'multihead.split_heads': {
        'solution': lambda: split_heads,
        'alternatives': lambda: [
            lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1),  # H blocks of d_k, stacked on a new axis 1
            lambda x, h: np.transpose(x.numpy().reshape(x.shape[0], x.shape[1], h, -1), (0, 2, 1, 3)),  # NumPy
        ],
        'wrong': lambda: [
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),  # mixes tokens
            lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] // h),  # head axis not moved
            lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2),  # strided
            lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),  # transposed first
            lambda x, h: torch.stack(x.chunk(h, dim=1), dim=1) if x.shape[1] % h == 0 else x,  # split the tokens
        ],
    },
    'multihead.merge_heads': {
        'solution': lambda: merge_heads,
        'alternatives': lambda: [
            lambda x: torch.cat(x.unbind(1), dim=-1),  # head 0's d_k features, then head 1's, ...
            lambda x: torch.einsum("bhld->blhd", x).flatten(2),  # einsum for the transpose
        ],
        'wrong': lambda: [
            lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),  # no transpose
            lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),  # features interleaved
            lambda x: x.sum(dim=1),  # adds the heads instead of concatenating them
            lambda x: torch.cat(x.unbind(1), dim=1),  # concatenates along the tokens
        ],
    },
    'multihead.parameter_count': {
        'solution': lambda: _mha_parameters,
        'alternatives': lambda: [
            lambda d, h, bias=True: np.int64(4 * d * d + (4 * d if bias else 0)),  # a NumPy integer
            lambda d, h, bias=True: float(sum(d * d + (d if bias else 0) for _ in "QKVO")),  # a float, by loop
        ],
        'wrong': lambda: [
            lambda d, h, bias=True: 4 * d * d,  # forgets the biases
            lambda d, h, bias=True: 4 * h * (d * d + d) if bias else 4 * h * d * d,  # one full set per head
            lambda d, h, bias=True: 4 * (d * (d // h) + (d // h)) if bias else 4 * d * (d // h),  # one head only
            lambda d, h, bias=True: 3 * (d * d + d) if bias else 3 * d * d,  # forgets W^O
            lambda d, h, bias=True: 4 * (d * d + d),  # ignores the bias flag
        ],
    },
    'multihead.forward': {
        'solution': lambda: _reference_forward,
        'alternatives': lambda: [_forward_head_by_head, _forward_einsum],
        'wrong': lambda: [_single_head_forward, _unscaled_forward,
                          lambda x, w_q, w_k, w_v, w_o, h: _reference_forward(x, w_q, w_k, w_v, w_o, h) @ w_o,
                          _forward_scaled_by_d_model, _forward_transposed_weights,
                          lambda x, w_q, w_k, w_v, w_o, h: _reference_forward(x, w_q, w_k, w_v, torch.eye(
                              x.shape[-1]), h),  # forgets W^O
                          _forward_naive_exp]
    },
}
