"""Answers for the checkers of transformer_lib/exercises/ch02_self_cross.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
from __future__ import annotations

import math

import numpy as np
import torch

from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.masks import causal_mask, padding_mask
from transformer_lib.multihead import MultiHeadAttention, split_heads


def _single_head_module(w_q, w_k, w_v) -> MultiHeadAttention:
    """A one-head, bias-free MultiHeadAttention whose projections are x @ w (and W^O = I)."""
    d_model = w_q.shape[0]
    with torch.random.fork_rng(devices=[]):  # the init draws random numbers: keep the reader's RNG as it was
        mha = MultiHeadAttention(d_model, 1, bias=False)
    with torch.no_grad():
        for proj, w in ((mha.q_proj, w_q), (mha.k_proj, w_k), (mha.v_proj, w_v)):
            proj.weight.copy_(w.T)  # nn.Linear computes x @ weight.T
        mha.out_proj.weight.copy_(torch.eye(d_model))
    return mha


def _cross_reference(x_dec, x_enc, w_q, w_k, w_v):
    if w_q.shape[0] != w_q.shape[1]:  # d_k != d_model: one head of the library's attention function
        return scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v)  # (B, n_dec, d_k), (B, n_dec, n_enc)
    with torch.no_grad():
        out, weights = _single_head_module(w_q, w_k, w_v)(x_dec, x_enc, x_enc, need_weights=True)
    return out, weights[:, 0]  # (B, n_dec, d), (B, n_dec, n_enc): drop the single head axis


def _qkv_reference(mha, x_q, x_kv):
    H = mha.num_heads
    return (split_heads(mha.q_proj(x_q), H), split_heads(mha.k_proj(x_kv), H),
            split_heads(mha.v_proj(x_kv), H))  # each (B, H, L, d_k)


def _cross_mask_reference(n_dec, enc_lengths, n_enc):
    keep = padding_mask(enc_lengths, n_enc)  # (B, 1, 1, n_enc)
    return keep.expand(-1, -1, n_dec, -1)  # (B, 1, n_dec, n_enc)


def _cross_scaled_by_d_model(x_dec, x_enc, w_q, w_k, w_v):  # sqrt(d_model) instead of sqrt(d_k)
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x_dec.shape[-1]), dim=-1)
    return w @ v, w


def _cross_wrong_axis(x_dec, x_enc, w_q, w_k, w_v):  # normalizes over the decoder queries
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2)
    return w @ v, w


def _cross_values_from_decoder(x_dec, x_enc, w_q, w_k, w_v):  # V from the decoder: breaks on n_dec != n_enc
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_dec @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w


def _cross_naive_exp(x_dec, x_enc, w_q, w_k, w_v):  # exp / sum without the row max: overflows on large scores
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w


def _cross_einsum(x_dec, x_enc, w_q, w_k, w_v):
    """A right answer with einsum for every product."""
    q = torch.einsum("bnd,dk->bnk", x_dec, w_q)  # (B, n_dec, d_k)
    k = torch.einsum("bmd,dk->bmk", x_enc, w_k)  # (B, n_enc, d_k)
    v = torch.einsum("bmd,dk->bmk", x_enc, w_v)  # (B, n_enc, d_k)
    w = torch.softmax(torch.einsum("bnk,bmk->bnm", q, k) / q.shape[-1] ** 0.5, dim=-1)  # (B, n_dec, n_enc)
    return torch.einsum("bnm,bmk->bnk", w, v), w


def _cross_numpy(x_dec, x_enc, w_q, w_k, w_v):
    """A right answer in NumPy, returned as NumPy arrays."""
    x_dec, x_enc, w_q, w_k, w_v = (t.numpy() for t in (x_dec, x_enc, w_q, w_k, w_v))
    q, k, v = x_dec @ w_q, x_enc @ w_k, x_enc @ w_v
    s = q @ k.transpose(0, 2, 1) / np.sqrt(w_q.shape[1])  # (B, n_dec, n_enc)
    e = np.exp(s - s.max(-1, keepdims=True))
    w = e / e.sum(-1, keepdims=True)
    return w @ v, w


def _wrong_cross(source_of_keys: str, scale: bool = True):
    def wrong_cross_attention(x_dec, x_enc, w_q, w_k, w_v):
        kv = x_dec if source_of_keys == "decoder" else x_enc
        q_src = x_enc if source_of_keys == "swapped" else x_dec
        kv = x_dec if source_of_keys == "swapped" else kv
        q, k, v = q_src @ w_q, kv @ w_k, kv @ w_v
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1.0)
        w = torch.softmax(s, dim=-1)
        return w @ v, w
    return wrong_cross_attention


def _qkv_no_transpose(mha, x_q, x_kv):
    """A wrong answer: view straight to (B, H, L, d_k) without the transpose scrambles tokens."""
    def heads(t):
        B, L, D = t.shape
        return t.reshape(B, mha.num_heads, L, D // mha.num_heads)
    return heads(mha.q_proj(x_q)), heads(mha.k_proj(x_kv)), heads(mha.v_proj(x_kv))


def _qkv_interleaved(mha, x_q, x_kv):
    """A wrong answer: (B, L, d_k, H) then permute: head h gets every H-th feature, not a block."""
    def heads(t):
        B, L, D = t.shape
        return t.view(B, L, D // mha.num_heads, mha.num_heads).permute(0, 3, 1, 2)
    return heads(mha.q_proj(x_q)), heads(mha.k_proj(x_kv)), heads(mha.v_proj(x_kv))


def _qkv_by_hand(mha, x_q, x_kv):
    """A right answer: the projections written out as x @ W^T + b, and the split with chunk."""
    def project(lin, x):
        return x @ lin.weight.T + lin.bias  # (B, L, D)

    def heads(t):
        return torch.stack(t.chunk(mha.num_heads, dim=-1), dim=1)  # H blocks of d_k -> (B, H, L, d_k)
    return (heads(project(mha.q_proj, x_q)), heads(project(mha.k_proj, x_kv)),
            heads(project(mha.v_proj, x_kv)))


def _qkv_einsum(mha, x_q, x_kv):
    """A right answer with einsum over the weights viewed as (H, d_k, D)."""
    H = mha.num_heads

    def project(lin, x):
        w = lin.weight.view(H, -1, lin.weight.shape[1])  # (H, d_k, D)
        return torch.einsum("bld,hkd->bhlk", x, w) + lin.bias.view(H, 1, -1)  # (B, H, L, d_k)
    return project(mha.q_proj, x_q), project(mha.k_proj, x_kv), project(mha.v_proj, x_kv)


def _cross_mask_with_causal(n_dec, enc_lengths, n_enc):
    return _cross_mask_reference(n_dec, enc_lengths, n_enc) & causal_mask(n_dec, n_enc)


def _cross_mask_loops(n_dec, enc_lengths, n_enc):
    """A right answer with Python loops, returned as nested lists of booleans."""
    return [[[[j < int(length) for j in range(n_enc)] for _ in range(n_dec)]] for length in enc_lengths]


def _cross_mask_numpy(n_dec, enc_lengths, n_enc):
    """A right answer in NumPy: broadcast (B, 1, 1, n_enc) to (B, 1, n_dec, n_enc)."""
    real = np.arange(n_enc)[None, :] < np.asarray(enc_lengths)[:, None]  # (B, n_enc)
    return np.broadcast_to(real[:, None, None, :], (len(real), 1, n_dec, n_enc))


def _cross_mask_off_by_one(n_dec, enc_lengths, n_enc):
    j = torch.arange(n_enc)
    keep = j[None, :] <= torch.as_tensor(enc_lengths)[:, None]  # (B, n_enc): one pad too many
    return keep[:, None, None, :].expand(-1, 1, n_dec, -1)


ANSWERS = {
    'self_cross.cross_attention': {
        'solution': lambda: _cross_reference,
        'alternatives': lambda: [_cross_einsum, _cross_numpy],
        'wrong': lambda: [_wrong_cross("decoder"), _wrong_cross("swapped"),
                          _wrong_cross("encoder", scale=False), _cross_scaled_by_d_model,
                          _cross_wrong_axis, _cross_values_from_decoder,
                          _cross_naive_exp],
    },
    'self_cross.project_qkv': {
        'solution': lambda: _qkv_reference,
        'alternatives': lambda: [_qkv_by_hand, _qkv_einsum],
        'wrong': lambda: [
            lambda mha, x_q, x_kv: _qkv_reference(mha, x_q, x_q),  # self-attention's K, V
            lambda mha, x_q, x_kv: (mha.q_proj(x_q), mha.k_proj(x_kv), mha.v_proj(x_kv)),  # no split
            _qkv_no_transpose,
            lambda mha, x_q, x_kv: _qkv_reference(mha, x_q, x_kv)[::-1],  # (v, k, q): the order swapped
            lambda mha, x_q, x_kv: (lambda q, k, v: (q, v, k))(*_qkv_reference(mha, x_q, x_kv)),  # K and V swapped
            _qkv_interleaved,
            lambda mha, x_q, x_kv: tuple(split_heads(x @ lin.weight, mha.num_heads)  # W, not W^T
                                         for lin, x in ((mha.q_proj, x_q), (mha.k_proj, x_kv), (mha.v_proj, x_kv))),
        ],
    },
    'self_cross.cross_mask': {
        'solution': lambda: _cross_mask_reference,
        'alternatives': lambda: [
            lambda n_dec, lengths, n_enc: (torch.arange(n_enc)[None, :] < lengths[:, None])  # chapter 4's style
            [:, None, None, :].expand(-1, 1, n_dec, -1),
            _cross_mask_loops, _cross_mask_numpy,
        ],
        'wrong': lambda: [
            _cross_mask_with_causal,
            _cross_mask_off_by_one,
            lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc).transpose(-2, -1),
            lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc).float(),
            lambda n_dec, lengths, n_enc: ~_cross_mask_reference(n_dec, lengths, n_enc),  # True = blocked
            lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc)[:, 0],  # no head axis
        ],
    },
}
