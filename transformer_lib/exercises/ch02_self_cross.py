"""Chapter 2 exercises: where queries, keys and values come from in self- and cross-attention.

The checkers compute what they expect with :class:`transformer_lib.MultiHeadAttention` itself (run
with ``key = value = memory`` for cross-attention, and its own projections and
:func:`~transformer_lib.multihead.split_heads` for Q, K, V),
:func:`transformer_lib.scaled_dot_product_attention` where the projections are not square
(``d_k != d_model``, so a scale of ``1/sqrt(d_model)`` shows) and :func:`transformer_lib.padding_mask`. Every test input has ``n_dec != n_enc``, so taking keys from
the wrong sequence changes a shape and cannot pass.
"""
from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention

from ..masks import padding_mask
from ..multihead import MultiHeadAttention, split_heads
from ._core import NotYet, compare_arrays, exercise, module_with

__all__ = []


def _cross_inputs() -> list[tuple]:
    """Square projections (d_k = d_model) and rectangular ones (d_k != d_model, both ways); one
    case with large scores."""
    g = torch.Generator().manual_seed(2)
    cases = []
    for B, n_dec, n_enc, d, d_k in ((1, 3, 5, 4, 4), (2, 6, 4, 8, 8), (3, 1, 7, 6, 6),
                                    (2, 4, 6, 16, 4), (1, 5, 3, 6, 24)):
        x_dec = torch.randn(B, n_dec, d, generator=g)
        x_enc = torch.randn(B, n_enc, d, generator=g)
        w_q, w_k, w_v = (torch.randn(d, d_k, generator=g) / d ** 0.5 for _ in range(3))
        if n_dec == 1:  # scores in the hundreds: a softmax written as exp / sum overflows
            x_dec = 150.0 * x_dec
        cases.append((x_dec, x_enc, w_q, w_k, w_v))
    return cases


@exercise("self_cross.cross_attention",
          hint="queries come from the decoder (x_dec @ w_q); keys and values both come from the "
               "encoder (x_enc @ w_k, x_enc @ w_v); then softmax(Q K^T / sqrt(d_k)) V")
def _check_cross(answer):
    cases = _cross_inputs()
    for x_dec, x_enc, w_q, w_k, w_v in cases:
        label = f"x_dec {tuple(x_dec.shape)} and x_enc {tuple(x_enc.shape)}"
        got = answer(x_dec, x_enc, w_q, w_k, w_v)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return a pair (output, weights)")
        d_model, d_k = w_q.shape
        if d_k == d_model:  # the library's module with one head, W^Q = w_q, ..., W^O = I
            mha = module_with(MultiHeadAttention, d_model, 1, bias=False,
                              weights={"q_proj.weight": w_q.T, "k_proj.weight": w_k.T,  # nn.Linear: x @ weight.T
                                       "v_proj.weight": w_v.T, "out_proj.weight": torch.eye(d_model)})
            with torch.no_grad():
                out, weights = mha(x_dec, x_enc, x_enc, need_weights=True)
            weights = weights[:, 0]  # (B, H=1, n_dec, n_enc) -> (B, n_dec, n_enc)
        else:  # d_k != d_model: one head of the library's attention function on the projections
            out, weights = scaled_dot_product_attention(x_dec @ w_q, x_enc @ w_k, x_enc @ w_v)
        compare_arrays(got[1], weights, what=f"weights for {label}")
        compare_arrays(got[0], out, what=f"output for {label}")
    return (f"output and weights match transformer_lib.MultiHeadAttention (one head) on all "
            f"{len(cases)} inputs, with d_k = d_model and d_k != d_model.")


# -- 2. Q, K, V as the module computes them ------------------------------------------------------------

@exercise("self_cross.project_qkv",
          hint="Q = q_proj(x_q), K = k_proj(x_kv), V = v_proj(x_kv); then split the last axis into "
               "heads: view (B, L, H, d_k), transpose to (B, H, L, d_k)")
def _check_qkv(answer):
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
            expected = [split_heads(proj(x), H) for proj, x in  # each (B, H, L, d_k)
                        ((mha.q_proj, x_q), (mha.k_proj, x_kv), (mha.v_proj, x_kv))]
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise NotYet("return a triple (q, k, v)")
        for name, a, e in zip("qkv", got, expected):
            compare_arrays(a, e, what=f"{name} for {kind} with d_model={d_model}, {H} heads, "
                                      f"{n_q} queries and {n_kv} keys")
        n += 1
    return f"q, k and v match the module's own on all {n} inputs (self- and cross-attention)."


# -- 3. the cross-attention mask ------------------------------------------------------------------------

@exercise("self_cross.cross_mask",
          hint="encoder position j is real when j < that sequence's length; every decoder query sees "
               "every real encoder token (no causal part); shape (B, 1, n_dec, n_enc), True = may attend")
def _check_cross_mask(answer):
    cases = [(3, [5, 2], 5), (4, [1, 3, 3], 6), (2, [4], 4), (5, [0, 2], 3)]
    for n_dec, lengths, n_enc in cases:
        got = answer(n_dec, torch.tensor(lengths), n_enc)  # (B,) int64, like tl.padding_mask's lengths
        expected = padding_mask(lengths, n_enc).expand(-1, -1, n_dec, -1)  # (B, 1, 1, n_enc) -> (B, 1, n_dec, n_enc)
        compare_arrays(got, expected,
                       what=f"mask for n_dec={n_dec}, encoder lengths {lengths}, n_enc={n_enc}")
    return f"matches on all {len(cases)} inputs."
