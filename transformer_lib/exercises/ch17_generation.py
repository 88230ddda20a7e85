"""Chapter 17 (Generating text) exercises: top-p filtering, one cached decoding step, the cache size."""
import math

import numpy as np
import torch

from ..kv_cache import cache_bytes_per_token
from ..sampling import top_p_filter
from ._core import NotYet, exercise, preserved_rng, seed_cpu, to_int, to_numpy


# -- top-p ---------------------------------------------------------------------------------------

def _top_p_loop(logits, p):
    """A right answer written as a loop over the sorted tokens."""
    probs = torch.softmax(logits, -1)
    order = torch.argsort(probs, descending=True)
    out = torch.full_like(logits, float("-inf"))
    mass = 0.0
    for i in order.tolist():
        out[i] = logits[i]
        mass += probs[i].item()
        if mass >= p:
            break
    return out


def _top_p_strictly_below(logits, p):  # keeps only tokens whose cumulative mass stays below p
    probs = torch.softmax(logits, -1)
    sorted_probs, order = probs.sort(descending=True)
    keep_sorted = sorted_probs.cumsum(-1) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_unsorted(logits, p):  # cumulative mass in vocabulary order, not sorted
    probs = torch.softmax(logits, -1)
    keep = probs.cumsum(-1) - probs < p
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_threshold(logits, p):  # keeps tokens with probability >= 1 - p
    probs = torch.softmax(logits, -1)
    return logits.masked_fill(probs < 1 - p, float("-inf"))


def _top_p_zeros(logits, p):  # zeros instead of -inf: the removed tokens keep probability
    out = top_p_filter(logits, p)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def _top_p_cases():
    with preserved_rng():
        seed_cpu(17)
        rows = [torch.randn(12) * s for s in (0.5, 2.0, 4.0)] + [torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])]
    return [(row, p) for row in rows for p in (0.3, 0.75, 0.9, 0.999)]


@exercise("generation.top_p",
          hint="softmax, sort the probabilities in decreasing order, keep a token while the mass of the "
               "tokens before it is < p (so the first one is always kept), set the others to -inf",
          wrong_answers=lambda: [_top_p_strictly_below, _top_p_unsorted, _top_p_threshold, _top_p_zeros,
                                 lambda logits, p: logits],
          solution=lambda: top_p_filter,
          alternative_answers=lambda: [_top_p_loop, lambda logits, p: top_p_filter(logits, p).numpy()])
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

def cached_step_reference(q, k_new, v_new, K_cache, V_cache):
    """Append the new key/value to the cache, then attend from the new query over all of them.

    q, k_new, v_new: (d,); K_cache, V_cache: (L, d). Returns (output (d,), K (L+1, d), V (L+1, d))."""
    K = torch.cat([K_cache, k_new[None]], dim=0)  # (L + 1, d)
    V = torch.cat([V_cache, v_new[None]], dim=0)
    weights = torch.softmax(K @ q / math.sqrt(q.shape[-1]), dim=-1)  # (L + 1,)
    return weights @ V, K, V


def _step_without_new_key(q, k_new, v_new, K_cache, V_cache):
    weights = torch.softmax(K_cache @ q / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ V_cache, K_cache, V_cache


def _step_unscaled(q, k_new, v_new, K_cache, V_cache):
    K, V = torch.cat([K_cache, k_new[None]]), torch.cat([V_cache, v_new[None]])
    return torch.softmax(K @ q, dim=-1) @ V, K, V


def _step_prepended(q, k_new, v_new, K_cache, V_cache):  # right output, cache in the wrong order
    out, K, V = cached_step_reference(q, k_new, v_new, K_cache, V_cache)
    return out, torch.cat([k_new[None], K_cache]), torch.cat([v_new[None], V_cache])


def _step_cache_unchanged(q, k_new, v_new, K_cache, V_cache):
    out, _, _ = cached_step_reference(q, k_new, v_new, K_cache, V_cache)
    return out, K_cache, V_cache


def _full_causal_last_row(q_all, K_all, V_all):
    """Independent check: the last row of causal attention recomputed over the whole sequence."""
    d = q_all.shape[-1]
    scores = q_all @ K_all.T / math.sqrt(d)  # (L, L)
    scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, -1)[-1] @ V_all


@exercise("generation.cached_step",
          hint="K = cat(K_cache, k_new) and V likewise (new row last); weights = softmax(K q / sqrt(d)); "
               "return (weights @ V, K, V)",
          wrong_answers=lambda: [_step_without_new_key, _step_unscaled, _step_prepended, _step_cache_unchanged],
          solution=lambda: cached_step_reference,
          alternative_answers=lambda: [
              lambda q, k, v, K, V: (torch.nn.functional.scaled_dot_product_attention(
                  q[None, None], torch.cat([K, k[None]])[None], torch.cat([V, v[None]])[None])[0, 0],
                  torch.cat([K, k[None]]), torch.cat([V, v[None]]))])
def _check_cached_step(answer):
    with preserved_rng():
        seed_cpu(3)
        n_cases = 0
        for L, d in ((1, 4), (5, 8), (16, 16)):
            q_all, K_all, V_all = torch.randn(L + 1, d), torch.randn(L + 1, d), torch.randn(L + 1, d)
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

def cache_bytes_reference(num_layers, num_kv_heads, head_dim, bytes_per_element, num_tokens, batch=1):
    return batch * num_tokens * cache_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_element)


@exercise("generation.cache_bytes",
          hint="per token and sequence: layers x 2 (K and V) x kv_heads x head_dim x bytes; times tokens and batch",
          wrong_answers=lambda: [
              lambda nl, kv, hd, b, n, batch=1: batch * n * nl * kv * hd * b,  # forgets V
              lambda nl, kv, hd, b, n, batch=1: batch * n * nl * 2 * kv * hd,  # counts numbers, not bytes
              lambda nl, kv, hd, b, n, batch=1: n * nl * 2 * kv * hd * b,  # ignores the batch
              lambda nl, kv, hd, b, n, batch=1: batch * n * n * nl * 2 * kv * hd * b,  # quadratic
              lambda nl, kv, hd, b, n, batch=1: batch * n * nl * 2 * kv * hd * b * 8],  # bits
          solution=lambda: cache_bytes_reference,
          alternative_answers=lambda: [
              lambda nl, kv, hd, b, n, batch=1: np.int64(2 * nl * kv * hd * b * n * batch),
              lambda nl, kv, hd, b, n, batch=1: float(2 * nl * kv * hd * b * n * batch)])
def _check_cache_bytes(answer):
    cases = [(30, 3, 64, 4, 512, 1), (30, 9, 64, 4, 512, 1), (30, 3, 64, 2, 8192, 1), (32, 8, 128, 2, 4096, 4),
             (1, 1, 1, 1, 1, 1), (12, 12, 64, 4, 1024, 2)]
    for nl, kv, hd, b, n, batch in cases:
        got = to_int(answer(nl, kv, hd, b, n, batch), "your byte count")
        expected = cache_bytes_reference(nl, kv, hd, b, n, batch)
        if got != expected:
            raise NotYet(f"for {nl} layers, {kv} KV heads of {hd}, {b} bytes, {n} tokens, batch {batch} "
                         f"your count is too {'high' if got > expected else 'low'}")
    return f"right for all {len(cases)} configurations."
