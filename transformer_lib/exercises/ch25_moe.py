"""Chapter 25 (Mixture of experts and latent attention) exercises: Mixtral's top-k routing, the
load-balancing loss, and the KV-cache bytes of latent attention. Each checker compares with the
library's public functions (:mod:`transformer_lib.moe`, :mod:`transformer_lib.latent_attention`)."""
import numpy as np
import torch

from ..latent_attention import cache_bytes_per_token
from ..moe import load_balancing_loss, route
from ._core import NotYet, compare_arrays, compare_number_cases, exercise, seed_cpu


def _logit_cases():
    seed_cpu(25)
    return [(torch.randn(N, E) * s, k) for N, E, k, s in [(5, 4, 1, 1.0), (9, 8, 2, 3.0), (7, 6, 3, 0.5), (4, 3, 3, 2.0)]]


@exercise("moe.route", call="route_answer(router_logits, top_k)",
          hint="softmax over the experts (last dim), torch.topk of the probabilities, then divide the k kept "
               "probabilities by their sum so each row sums to one; return (weights, indices), both (N, k)")
def _check_route(answer):
    cases = _logit_cases()
    for n, (logits, k) in enumerate(cases, 1):
        got = answer(logits.clone(), k)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet("return two things: (weights, indices)")
        want_w, want_i = route(logits, k)
        got_w, got_i = (torch.as_tensor(np.asarray(g)) if not isinstance(g, torch.Tensor) else g for g in got)
        if tuple(got_i.shape) != tuple(want_i.shape):
            raise NotYet(f"case #{n}: indices should have shape {tuple(want_i.shape)}, got {tuple(got_i.shape)}")
        order = torch.argsort(got_i.long(), -1)  # the order of the k experts in a row does not matter
        w_order = torch.argsort(want_i, -1)
        if not torch.equal(got_i.long().gather(-1, order), want_i.gather(-1, w_order)):
            raise NotYet(f"case #{n} (top_k = {k}): you chose different experts")
        compare_arrays(got_w.double().gather(-1, order), want_w.double().gather(-1, w_order),
                       what=f"your weights for case #{n} (top_k = {k})", atol=1e-5)
    return f"right on all {len(cases)} cases, top_k = num_experts included."


@exercise("moe.load_balancing_loss", call="balance_answer(router_logits, top_k)",
          hint="probabilities p = softmax(logits); the top-k experts of each token; f = one-hot of the choices "
               "averaged over tokens, shape (k, E); P = mean of p over tokens, (E,); the loss is E * sum(f * P)")
def _check_balance(answer):
    return compare_number_cases(
        answer, _logit_cases(), load_balancing_loss, what="your loss", rtol=1e-4, atol=1e-5,
        wrong=lambda n, got, want, logits, k: f"case #{n} ({logits.shape[0]} tokens, {logits.shape[1]} experts, "
                                             f"top_k = {k}): your loss is too {'high' if got > want else 'low'}",
        summary="cases.")


_CACHE_CASES = [dict(num_layers=30, kv_lora_rank=256, qk_rope_head_dim=32, bytes_per_element=2),
                dict(num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64, bytes_per_element=2),
                dict(num_layers=4, kv_lora_rank=40, qk_rope_head_dim=8, bytes_per_element=4)]


@exercise("moe.mla_cache_bytes", call="mla_bytes(num_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element)",
          hint="latent attention caches, per token and per layer, the latent c_KV (kv_lora_rank numbers) and the "
               "one RoPE key shared by all heads (qk_rope_head_dim numbers)")
def _check_cache(answer):
    return compare_number_cases(  # exactly: a count of bytes
        answer, _CACHE_CASES, lambda **case: cache_bytes_per_token("mla", **case), what="your byte count",
        wrong=lambda n, got, want, num_layers, **_: f"case #{n} ({num_layers} layers): your count is too "
                                                   f"{'high' if got > want else 'low'}",
        summary="shapes.")
