"""Chapter 17 (Generating text) exercises: top-p filtering, one cached decoding step, the cache size."""
import math

import numpy as np
import torch

from ..kv_cache import cache_bytes_per_token
from ..logit_filters import top_p_filter
from ._core import NotYet, compare_value, exercise, preserved_rng, seed_cpu, to_int, to_numpy


# -- top-p ---------------------------------------------------------------------------------------


def _top_p_cases():
    with preserved_rng():
        seed_cpu(17)
        rows = [torch.randn(12) * s for s in (0.5, 2.0, 4.0)] + [torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])]
    return [(row, p) for row in rows for p in (0.3, 0.75, 0.9, 0.999)]


@exercise("generation.top_p",
          hint="softmax, sort the probabilities in decreasing order, keep a token while the mass of the "
               "tokens before it is < p (so the first one is always kept), set the others to -inf")
def _check_top_p(answer):
    cases = _top_p_cases()
    for n, (logits, p) in enumerate(cases, 1):
        got = to_numpy(answer(logits.clone(), p), "your filtered logits")
        expected = top_p_filter(logits, p).numpy()
        if got.shape != expected.shape:
            raise NotYet(f"expected logits of shape {expected.shape}, got {got.shape}")
        kept, want = np.isfinite(got), np.isfinite(expected)
        if (kept & ~want).any():
            raise NotYet(f"case #{n} (p = {p}): you keep a token outside the smallest set with mass >= p")
        if (~kept & want).any():
            raise NotYet(f"case #{n} (p = {p}): you remove a token the smallest set with mass >= p needs")
        if (np.isneginf(got) != ~want).any() or not np.allclose(got[kept], expected[kept], atol=1e-6):
            raise NotYet(f"case #{n}: removed tokens must be -inf and kept logits unchanged")
    return f"right on all {len(cases)} (logits, p) cases."


# -- one cached decoding step ---------------------------------------------------------------------


def _full_causal_last_row(q_all, K_all, V_all):
    """Independent check: the last row of causal attention recomputed over the whole sequence."""
    d = q_all.shape[-1]
    scores = q_all @ K_all.transpose(-2, -1) / math.sqrt(d)  # (L, d) @ (d, L) -> (L, L)
    scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, -1)[-1] @ V_all


@exercise("generation.cached_step",
          hint="K = cat(K_cache, k_new) and V likewise (new row last); weights = softmax(K q / sqrt(d)); "
               "return (weights @ V, K, V)")
def _check_cached_step(answer):
    with preserved_rng():
        seed_cpu(3)
        n_cases = 0
        for L, d in ((1, 4), (5, 8), (16, 16)):
            q_all, K_all, V_all = torch.randn(L + 1, d), torch.randn(L + 1, d), torch.randn(L + 1, d)
            if L == 16:  # scores in the hundreds: a softmax written as exp / sum overflows
                q_all = 100.0 * q_all
            result = answer(q_all[-1], K_all[-1], V_all[-1], K_all[:-1].clone(), V_all[:-1].clone())
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                raise NotYet("return three things: (output, K, V)")
            out, K, V = (to_numpy(r, name) for r, name in zip(result, ("the output", "K", "V")))
            if K.shape != (L + 1, d) or V.shape != (L + 1, d):
                raise NotYet(f"with {L} cached tokens, K and V should be ({L + 1}, {d}) after the step")
            if not (np.allclose(K, K_all.numpy(), atol=1e-6) and np.allclose(V, V_all.numpy(), atol=1e-6)):
                raise NotYet("K and V should be the cache with the new key/value appended as the last row")
            if out.shape != (d,) or not np.allclose(out, _full_causal_last_row(q_all, K_all, V_all).numpy(),
                                                    atol=1e-5):
                raise NotYet(f"with {L} cached tokens the output differs from attention recomputed over the "
                             "whole sequence")
            n_cases += 1
    return f"equals full causal attention recomputed from scratch in all {n_cases} cases."


# -- the cache size -------------------------------------------------------------------------------

@exercise("generation.cache_bytes",
          hint="per token and sequence: layers x 2 (K and V) x kv_heads x head_dim x bytes; times tokens and batch")
def _check_cache_bytes(answer):
    cases = [(30, 3, 64, 4, 512, 1), (30, 9, 64, 4, 512, 1), (30, 3, 64, 2, 8192, 1), (32, 8, 128, 2, 4096, 4),
             (1, 1, 1, 1, 1, 1), (12, 12, 64, 4, 1024, 2)]
    for nl, kv, hd, b, n, batch in cases:
        got = to_int(answer(nl, kv, hd, b, n, batch), "your byte count")
        expected = batch * n * cache_bytes_per_token(nl, kv, hd, b)
        compare_value(got, expected, f"for {nl} layers, {kv} KV heads of {hd}, {b} bytes, {n} tokens, batch {batch} "
                                     "your count", rtol=0)
    return f"right for all {len(cases)} configurations."
