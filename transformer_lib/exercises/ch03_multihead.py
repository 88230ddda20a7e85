"""Chapter 3 exercises: multi-head attention (split, merge, count, forward)."""
import math

import numpy as np
import torch

from ..cost import count_parameters
from ..multihead import MultiHeadAttention, merge_heads, split_heads
from ._core import NotYet, compare_function, compare_value, exercise, to_int


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- split_heads -------------------------------------------------------------------------------

def _split_inputs():
    g = _generator(3)
    return [(torch.randn(2, 5, 12, generator=g), 3), (torch.randn(1, 4, 8, generator=g), 1),
            (torch.randn(3, 7, 16, generator=g), 4), (torch.randn(2, 3, 6, generator=g), 6)]


@exercise("multihead.split_heads",
          hint="view the last axis as (num_heads, d_k), then move the head axis in front of the "
               "token axis; a bare view to (B, H, L, d_k) mixes features of different tokens",
          wrong_answers=lambda: [
              lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),  # mixes tokens
              lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] // h),  # head axis not moved
              lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2),  # strided
              lambda x, h: x.transpose(1, 2).reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),  # transposed first
              lambda x, h: torch.stack(x.chunk(h, dim=1), dim=1) if x.shape[1] % h == 0 else x,  # split the tokens
          ],
          solution=lambda: split_heads,
          alternative_answers=lambda: [
              lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1),  # H blocks of d_k, stacked on a new axis 1
              lambda x, h: np.transpose(x.numpy().reshape(x.shape[0], x.shape[1], h, -1), (0, 2, 1, 3)),  # NumPy
          ])
def _check_split(answer):
    return compare_function(answer, split_heads, _split_inputs(), what="split heads",
                            describe=lambda a: f"x of shape {tuple(a[0].shape)} with {a[1]} heads")


# -- merge_heads -------------------------------------------------------------------------------

def _merge_inputs():
    g = _generator(4)
    return [(torch.randn(2, 3, 5, 4, generator=g),), (torch.randn(1, 1, 4, 8, generator=g),),
            (torch.randn(3, 4, 7, 2, generator=g),)]


@exercise("multihead.merge_heads",
          hint="undo split_heads in reverse order: bring the token axis back before the head axis, "
               "then flatten (heads, d_k) into one feature axis",
          wrong_answers=lambda: [
              lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),  # no transpose
              lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),  # features interleaved
              lambda x: x.sum(dim=1),  # adds the heads instead of concatenating them
              lambda x: torch.cat(x.unbind(1), dim=1),  # concatenates along the tokens
          ],
          solution=lambda: merge_heads,
          alternative_answers=lambda: [
              lambda x: torch.cat(x.unbind(1), dim=-1),  # head 0's d_k features, then head 1's, ...
              lambda x: torch.einsum("bhld->blhd", x).flatten(2),  # einsum for the transpose
          ])
def _check_merge(answer):
    return compare_function(answer, merge_heads, _merge_inputs(), what="merged heads",
                            describe=lambda a: f"input of shape {tuple(a[0].shape)}")


# -- parameter count ---------------------------------------------------------------------------

def _mha_parameters(d_model: int, num_heads: int, bias: bool = True) -> int:
    return count_parameters(MultiHeadAttention(d_model, num_heads, bias=bias))


@exercise("multihead.parameter_count",
          hint="count the weights and biases of W^Q, W^K, W^V and W^O; ask yourself what the "
               "number of heads changes about those four matrices",
          wrong_answers=lambda: [
              lambda d, h, bias=True: 4 * d * d,  # forgets the biases
              lambda d, h, bias=True: 4 * h * (d * d + d) if bias else 4 * h * d * d,  # one full set per head
              lambda d, h, bias=True: 4 * (d * (d // h) + (d // h)) if bias else 4 * d * (d // h),  # one head only
              lambda d, h, bias=True: 3 * (d * d + d) if bias else 3 * d * d,  # forgets W^O
              lambda d, h, bias=True: 4 * (d * d + d),  # ignores the bias flag
          ],
          solution=lambda: _mha_parameters,
          alternative_answers=lambda: [
              lambda d, h, bias=True: np.int64(4 * d * d + (4 * d if bias else 0)),  # a NumPy integer
              lambda d, h, bias=True: float(sum(d * d + (d if bias else 0) for _ in "QKVO")),  # a float, by loop
          ])
def _check_count(answer):
    if not callable(answer):
        raise NotYet(f"expected a function parameter_count(d_model, num_heads, bias), got {type(answer).__name__}")
    cases = [(512, 8, True), (512, 1, True), (512, 64, True), (64, 4, False), (96, 3, True), (8, 2, False)]
    for d, h, bias in cases:
        what = f"for d_model={d}, num_heads={h}, bias={bias} your count"
        compare_value(to_int(answer(d, h, bias), what), _mha_parameters(d, h, bias), what, rtol=0)
    return f"right for all {len(cases)} settings."


# -- multi-head forward from the projection matrices --------------------------------------------

def _reference_forward(x, w_q, w_k, w_v, w_o, num_heads):
    D = x.shape[-1]
    mha = MultiHeadAttention(D, num_heads, bias=False)
    with torch.no_grad():  # nn.Linear stores W transposed: y = x @ weight.T
        for proj, w in ((mha.q_proj, w_q), (mha.k_proj, w_k), (mha.v_proj, w_v), (mha.out_proj, w_o)):
            proj.weight.copy_(w.T)
        return mha(x)[0]


def _forward_inputs():
    g = _generator(5)
    cases = []
    for B, L, D, h in ((2, 5, 8, 2), (1, 6, 12, 3), (2, 4, 16, 4), (1, 3, 6, 1)):
        ws = [torch.randn(D, D, generator=g) / math.sqrt(D) for _ in range(4)]
        cases.append((torch.randn(B, L, D, generator=g), *ws, h))
    return cases


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


@exercise("multihead.forward",
          hint="project with x @ W, split into heads, attend in every head with the scale "
               "1/sqrt(d_k) of the head's own width, merge, then apply W^O",
          wrong_answers=lambda: [_single_head_forward, _unscaled_forward,
                                 lambda x, w_q, w_k, w_v, w_o, h: _reference_forward(x, w_q, w_k, w_v, w_o, h) @ w_o,
                                 _forward_scaled_by_d_model, _forward_transposed_weights,
                                 lambda x, w_q, w_k, w_v, w_o, h: _reference_forward(x, w_q, w_k, w_v, torch.eye(
                                     x.shape[-1]), h)],  # forgets W^O
          solution=lambda: _reference_forward,
          alternative_answers=lambda: [_forward_head_by_head, _forward_einsum])
def _check_forward(answer):
    return compare_function(answer, _reference_forward, _forward_inputs(), what="multi-head output", atol=1e-4,
                            describe=lambda a: f"x of shape {tuple(a[0].shape)} with {a[-1]} heads")
