"""Answers for the checkers of transformer_lib/exercises/ch17_generation.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np
import torch

from transformer_lib.kv_cache import cache_bytes_per_token
from transformer_lib.logit_filters import top_p_filter


def cache_bytes_reference(num_layers, num_kv_heads, head_dim, bytes_per_element, num_tokens, batch=1):
    return batch * num_tokens * cache_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_element)


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


def _step_naive_exp(q, k_new, v_new, K_cache, V_cache):  # exp / sum without the max: overflows on large scores
    K, V = torch.cat([K_cache, k_new[None]]), torch.cat([V_cache, v_new[None]])  # (L + 1, d)
    e = torch.exp(K @ q / math.sqrt(q.shape[-1]))
    return (e / e.sum()) @ V, K, V


def _step_cache_unchanged(q, k_new, v_new, K_cache, V_cache):
    out, _, _ = cached_step_reference(q, k_new, v_new, K_cache, V_cache)
    return out, K_cache, V_cache


ANSWERS = {
    'generation.top_p': {
        'solution': lambda: top_p_filter,
        'alternatives': lambda: [_top_p_loop, lambda logits, p: top_p_filter(logits, p).numpy()],
        'wrong': lambda: [_top_p_strictly_below, _top_p_unsorted, _top_p_threshold, _top_p_zeros,
                          lambda logits, p: logits],
    },
    'generation.cached_step': {
        'solution': lambda: cached_step_reference,
        'alternatives': lambda: [
            lambda q, k, v, K, V: (torch.nn.functional.scaled_dot_product_attention(
                q[None, None], torch.cat([K, k[None]])[None], torch.cat([V, v[None]])[None])[0, 0],
                torch.cat([K, k[None]]), torch.cat([V, v[None]]))],
        'wrong': lambda: [_step_without_new_key, _step_unscaled, _step_prepended, _step_cache_unchanged,
                          _step_naive_exp],
    },
    'generation.cache_bytes': {
        'solution': lambda: cache_bytes_reference,
        'alternatives': lambda: [
            lambda nl, kv, hd, b, n, batch=1: np.int64(2 * nl * kv * hd * b * n * batch),
            lambda nl, kv, hd, b, n, batch=1: float(2 * nl * kv * hd * b * n * batch)],
        'wrong': lambda: [
            lambda nl, kv, hd, b, n, batch=1: batch * n * nl * kv * hd * b,  # forgets V
            lambda nl, kv, hd, b, n, batch=1: batch * n * nl * 2 * kv * hd,  # counts numbers, not bytes
            lambda nl, kv, hd, b, n, batch=1: n * nl * 2 * kv * hd * b,  # ignores the batch
            lambda nl, kv, hd, b, n, batch=1: batch * n * n * nl * 2 * kv * hd * b,  # quadratic
            lambda nl, kv, hd, b, n, batch=1: batch * n * nl * 2 * kv * hd * b * 8],  # bits
    },
}
