"""Chapter 2 exercises: where queries, keys and values come from in self- and cross-attention.

The references are :class:`transformer_lib.MultiHeadAttention` itself (run with ``key = value =
memory`` for cross-attention), :func:`transformer_lib.scaled_dot_product_attention` where the
projections are not square (``d_k != d_model``, so a scale of ``1/sqrt(d_model)`` shows) and
:func:`transformer_lib.padding_mask`. Every test input has ``n_dec != n_enc``, so taking keys from
the wrong sequence changes a shape and cannot pass.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention

from ..masks import causal_mask, padding_mask
from ..multihead import MultiHeadAttention, split_heads
from ._core import NotYet, compare_arrays, exercise

__all__ = []


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


def _cross_inputs() -> list[tuple]:
    """Square projections (d_k = d_model) and rectangular ones (d_k != d_model, both ways)."""
    g = torch.Generator().manual_seed(2)
    cases = []
    for B, n_dec, n_enc, d, d_k in ((1, 3, 5, 4, 4), (2, 6, 4, 8, 8), (3, 1, 7, 6, 6),
                                    (2, 4, 6, 16, 4), (1, 5, 3, 6, 24)):
        x_dec = torch.randn(B, n_dec, d, generator=g)
        x_enc = torch.randn(B, n_enc, d, generator=g)
        w_q, w_k, w_v = (torch.randn(d, d_k, generator=g) / d ** 0.5 for _ in range(3))
        cases.append((x_dec, x_enc, w_q, w_k, w_v))
    return cases


def _cross_reference(x_dec, x_enc, w_q, w_k, w_v):
    if w_q.shape[0] != w_q.shape[1]:  # d_k != d_model: one head of the library's attention function
        return scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v)  # (B, n_dec, d_k), (B, n_dec, n_enc)
    with torch.no_grad():
        out, weights = _single_head_module(w_q, w_k, w_v)(x_dec, x_enc, x_enc, need_weights=True)
    return out, weights[:, 0]  # (B, n_dec, d), (B, n_dec, n_enc): drop the single head axis


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
    def answer(x_dec, x_enc, w_q, w_k, w_v):
        kv = x_dec if source_of_keys == "decoder" else x_enc
        q_src = x_enc if source_of_keys == "swapped" else x_dec
        kv = x_dec if source_of_keys == "swapped" else kv
        q, k, v = q_src @ w_q, kv @ w_k, kv @ w_v
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1.0)
        w = torch.softmax(s, dim=-1)
        return w @ v, w
    return answer


@exercise("self_cross.cross_attention",
          hint="queries come from the decoder (x_dec @ w_q); keys and values both come from the "
               "encoder (x_enc @ w_k, x_enc @ w_v); then softmax(Q K^T / sqrt(d_k)) V",
          wrong_answers=lambda: [_wrong_cross("decoder"), _wrong_cross("swapped"),
                                 _wrong_cross("encoder", scale=False), _cross_scaled_by_d_model,
                                 _cross_wrong_axis, _cross_values_from_decoder],
          solution=lambda: _cross_reference,
          alternative_answers=lambda: [_cross_einsum, _cross_numpy])
def _check_cross(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    cases = _cross_inputs()
    for x_dec, x_enc, w_q, w_k, w_v in cases:
        label = f"x_dec {tuple(x_dec.shape)} and x_enc {tuple(x_enc.shape)}"
        got = answer(x_dec, x_enc, w_q, w_k, w_v)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return a pair (output, weights)")
        out, weights = _cross_reference(x_dec, x_enc, w_q, w_k, w_v)
        compare_arrays(got[1], weights, what=f"weights for {label}")
        compare_arrays(got[0], out, what=f"output for {label}")
    return (f"output and weights match transformer_lib.MultiHeadAttention (one head) on all "
            f"{len(cases)} inputs, with d_k = d_model and d_k != d_model.")


# -- 2. Q, K, V as the module computes them ------------------------------------------------------------

def _qkv_reference(mha, x_q, x_kv):
    H = mha.num_heads
    return (split_heads(mha.q_proj(x_q), H), split_heads(mha.k_proj(x_kv), H),
            split_heads(mha.v_proj(x_kv), H))  # each (B, H, L, d_k)


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


@exercise("self_cross.project_qkv",
          hint="Q = q_proj(x_q), K = k_proj(x_kv), V = v_proj(x_kv); then split the last axis into "
               "heads: view (B, L, H, d_k), transpose to (B, H, L, d_k)",
          wrong_answers=lambda: [
              lambda mha, x_q, x_kv: _qkv_reference(mha, x_q, x_q),  # self-attention's K, V
              lambda mha, x_q, x_kv: (mha.q_proj(x_q), mha.k_proj(x_kv), mha.v_proj(x_kv)),  # no split
              _qkv_no_transpose,
              lambda mha, x_q, x_kv: _qkv_reference(mha, x_q, x_kv)[::-1],  # (v, k, q): the order swapped
              lambda mha, x_q, x_kv: (lambda q, k, v: (q, v, k))(*_qkv_reference(mha, x_q, x_kv)),  # K and V swapped
              _qkv_interleaved,
              lambda mha, x_q, x_kv: tuple(split_heads(x @ lin.weight, mha.num_heads)  # W, not W^T
                                           for lin, x in ((mha.q_proj, x_q), (mha.k_proj, x_kv), (mha.v_proj, x_kv))),
          ],
          solution=lambda: _qkv_reference,
          alternative_answers=lambda: [_qkv_by_hand, _qkv_einsum])
def _check_qkv(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    g = torch.Generator().manual_seed(4)
    n = 0
    for d_model, H, n_q, n_kv in ((8, 2, 3, 5), (12, 3, 4, 2), (16, 4, 6, 6)):
        with torch.random.fork_rng(devices=[]):  # seed the module's init without touching the reader's RNG
            torch.manual_seed(d_model)
            mha = MultiHeadAttention(d_model, H).eval()
        x_q = torch.randn(2, n_q, d_model, generator=g)
        x_kv = x_q if n_q == n_kv else torch.randn(2, n_kv, d_model, generator=g)
        kind = "self-attention" if x_kv is x_q else "cross-attention"
        with torch.no_grad():
            got = answer(mha, x_q, x_kv)
            expected = _qkv_reference(mha, x_q, x_kv)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise NotYet("return a triple (q, k, v)")
        for name, a, e in zip("qkv", got, expected):
            compare_arrays(a, e, what=f"{name} for {kind} with d_model={d_model}, {H} heads, "
                                      f"{n_q} queries and {n_kv} keys")
        n += 1
    return f"q, k and v match the module's own on all {n} inputs (self- and cross-attention)."


# -- 3. the cross-attention mask ------------------------------------------------------------------------

def _cross_mask_reference(n_dec, enc_lengths, n_enc):
    keep = padding_mask(enc_lengths, n_enc)  # (B, 1, 1, n_enc)
    return keep.expand(-1, -1, n_dec, -1)  # (B, 1, n_dec, n_enc)


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


@exercise("self_cross.cross_mask",
          hint="encoder position j is real when j < that sequence's length; every decoder query sees "
               "every real encoder token (no causal part); shape (B, 1, n_dec, n_enc), True = may attend",
          wrong_answers=lambda: [
              _cross_mask_with_causal,
              _cross_mask_off_by_one,
              lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc).transpose(-2, -1),
              lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc).float(),
              lambda n_dec, lengths, n_enc: ~_cross_mask_reference(n_dec, lengths, n_enc),  # True = blocked
              lambda n_dec, lengths, n_enc: _cross_mask_reference(n_dec, lengths, n_enc)[:, 0],  # no head axis
          ],
          solution=lambda: _cross_mask_reference,
          alternative_answers=lambda: [
              lambda n_dec, lengths, n_enc: (torch.arange(n_enc)[None, :] < lengths[:, None])  # chapter 4's style
              [:, None, None, :].expand(-1, 1, n_dec, -1),
              _cross_mask_loops, _cross_mask_numpy,
          ])
def _check_cross_mask(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    cases = [(3, [5, 2], 5), (4, [1, 3, 3], 6), (2, [4], 4), (5, [0, 2], 3)]
    for n_dec, lengths, n_enc in cases:
        got = answer(n_dec, torch.tensor(lengths), n_enc)  # (B,) int64, like tl.padding_mask's lengths
        compare_arrays(got, _cross_mask_reference(n_dec, lengths, n_enc),
                       what=f"mask for n_dec={n_dec}, encoder lengths {lengths}, n_enc={n_enc}")
    return f"matches on all {len(cases)} inputs."
