"""Answers for the checkers of transformer_lib/exercises/ch25_moe.py (test data only)."""
import numpy as np
import torch
import torch.nn.functional as F


def route_reference(logits, k):
    p = F.softmax(logits.float(), -1)
    w, i = p.topk(k, -1)
    return w / w.sum(-1, keepdim=True), i


def _route_numpy(logits, k):
    x = logits.numpy().astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    i = np.argsort(-p, -1)[:, :k]
    w = np.take_along_axis(p, i, -1)
    return w / w.sum(-1, keepdims=True), i


def _route_topk_of_logits(logits, k):  # top-k of the logits, softmax over the k kept: the same weights
    v, i = logits.topk(k, -1)
    return F.softmax(v, -1), i


def _route_not_renormalised(logits, k):
    return F.softmax(logits, -1).topk(k, -1)


def _route_bottom_k(logits, k):
    w, i = (-logits).topk(k, -1)
    return F.softmax(-w, -1), i


def balance_reference(logits, k):
    E = logits.shape[-1]
    p = F.softmax(logits, -1)
    f = F.one_hot(p.topk(k, -1).indices, E).float().mean(0)
    return E * (f * p.mean(0)).sum()


def _balance_counts(logits, k):
    N, E = logits.shape
    p = F.softmax(logits, -1)
    counts = torch.bincount(p.topk(k, -1).indices.reshape(-1), minlength=E).float() / N
    return float(E * (counts * p.mean(0)).sum())


def _balance_no_E(logits, k):
    return balance_reference(logits, k) / logits.shape[-1]


def _balance_logits_not_probs(logits, k):
    E = logits.shape[-1]
    f = F.one_hot(logits.topk(k, -1).indices, E).float().mean(0)
    return E * (f * logits.mean(0)).sum()


def _balance_per_slot_mean(logits, k):  # divides by k as well
    return balance_reference(logits, k) / k


def _route_argmax_only(logits, k):  # the first choice k times
    i = logits.argmax(-1, keepdim=True).expand(-1, k)
    return torch.full(i.shape, 1.0 / k), i


def _route_uniform_weights(logits, k):
    i = logits.topk(k, -1).indices
    return torch.full(i.shape, 1.0 / k), i


def _balance_fraction_of_tokens(logits, k):  # counts top-1 only
    return balance_reference(logits, 1)


def _mla_k_and_v(num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return 2 * num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element


def _mla_no_rope(num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return num_layers * kv_lora_rank * bytes_per_element


def _mla_one_layer(num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return (kv_lora_rank + qk_rope_head_dim) * bytes_per_element


def _mla_elements(num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return num_layers * (kv_lora_rank + qk_rope_head_dim)


ANSWERS = {
    "moe.route": {
        "solution": lambda: route_reference,
        "alternatives": lambda: [_route_numpy, _route_topk_of_logits],
        "wrong": lambda: [_route_not_renormalised, _route_bottom_k, _route_argmax_only, _route_uniform_weights],
    },
    "moe.load_balancing_loss": {
        "solution": lambda: balance_reference,
        "alternatives": lambda: [_balance_counts],
        "wrong": lambda: [_balance_no_E, _balance_logits_not_probs, _balance_per_slot_mean,
                          _balance_fraction_of_tokens],
    },
    "moe.mla_cache_bytes": {
        "solution": lambda: (lambda num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element:
                             num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element),
        "alternatives": lambda: [lambda **c: int(np.prod([c["num_layers"], c["bytes_per_element"]]))
                                 * (c["kv_lora_rank"] + c["qk_rope_head_dim"])],
        "wrong": lambda: [_mla_k_and_v, _mla_no_rope, _mla_one_layer, _mla_elements],
    },
}
