"""Mixture of experts and latent attention: compute per token and KV-cache bytes (chapter 25).

    nice -n 10 .venv/bin/python benchmarks/moe.py        # about 20 CPU-seconds

Compute: one MixtureOfExperts layer (d_model 256, expert d_ff 512, 8 experts, top-2) against a
dense SwiGLU FFN of the same *active* size (d_ff = 2 * 512: the FLOPs one token sees) and of the
same *total* size (d_ff = 8 * 512: the parameters the MoE holds), on 1024 tokens, one thread.
FLOPs counted by ``profiling.count_flops``; time by ``profiling.time_call`` (minimum of 5). The
MoE's time includes the routing and the gather/scatter of tokens per expert.

Cache: bytes per token a layer for MHA, GQA, MQA and MLA, computed by
``latent_attention.cache_bytes_per_token`` and measured on a ``KVCache`` filled by a real
``LatentAttention``, at a small model's shapes and at SmolLM2-135M's (30 layers, 9 heads, 3 KV
heads, head_dim 64, bf16), with an MLA of DeepSeek-V3's proportions (latent 4 x head_dim, RoPE
key head_dim / 2). Prints a table, asserts nothing, writes benchmarks/results/moe.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import describe, machine, write_results  # noqa: E402

from transformer_lib.device import cpu_threads  # noqa: E402
from transformer_lib.feedforward import FeedForward  # noqa: E402
from transformer_lib import KVCache  # noqa: E402
from transformer_lib.latent_attention import LatentAttention, cache_bytes_per_token  # noqa: E402
from transformer_lib.moe import MixtureOfExperts  # noqa: E402
from transformer_lib.profiling import count_flops, time_call  # noqa: E402

D, F, E, K, N = 256, 512, 8, 2, 1024


def three_layers() -> dict:
    """The mixture and the two dense SwiGLU FFNs it is compared with, by label (freshly initialised)."""
    return {"MoE 8 experts, top-2": MixtureOfExperts(D, F, E, K),
            "dense, same active size (d_ff 1024)": FeedForward(D, K * F, activation="swiglu", bias=False),
            "dense, same total size (d_ff 4096)": FeedForward(D, E * F, activation="swiglu", bias=False)}


def compute_rows():
    torch.manual_seed(0)
    layers = three_layers()
    x = torch.randn(N, D)
    rows = []
    with cpu_threads(1), torch.no_grad():
        for name, layer in layers.items():
            layer.eval()
            flops = count_flops(layer, x).total
            seconds = time_call(layer, x, repeats=5, warmup=2)
            params = sum(p.numel() for p in layer.parameters())
            rows.append({"layer": name, "params": params, "flops_per_token": flops / N,
                         "us_per_token": seconds / N * 1e6})
    return rows


def cache_rows():
    rows = []
    shapes = {"small (4 layers, 8 heads of 32)": dict(L=4, H=8, Hkv=2, hd=32, bpe=4),
              "SmolLM2-135M (30 layers, 9 heads of 64, bf16)": dict(L=30, H=9, Hkv=3, hd=64, bpe=2)}
    for name, s in shapes.items():
        r, dr = 4 * s["hd"], s["hd"] // 2
        row = {"model": name}
        row["mha"] = cache_bytes_per_token("mha", num_heads=s["H"], head_dim=s["hd"], num_layers=s["L"],
                                           bytes_per_element=s["bpe"])
        row["gqa"] = cache_bytes_per_token("gqa", num_heads=s["H"], num_kv_heads=s["Hkv"], head_dim=s["hd"],
                                           num_layers=s["L"], bytes_per_element=s["bpe"])
        row["mqa"] = cache_bytes_per_token("mqa", head_dim=s["hd"], num_layers=s["L"], bytes_per_element=s["bpe"])
        row["mla"] = cache_bytes_per_token("mla", kv_lora_rank=r, qk_rope_head_dim=dr, num_layers=s["L"],
                                           bytes_per_element=s["bpe"])
        # measured: a real LatentAttention fills a KVCache with 64 tokens in every layer
        torch.manual_seed(0)
        dtype = torch.bfloat16 if s["bpe"] == 2 else torch.float32
        d_model = s["H"] * s["hd"]
        attn = LatentAttention(d_model, s["H"], r, s["hd"] - dr, dr, s["hd"]).to(dtype).eval()
        cache = KVCache(s["L"])
        with torch.no_grad(), cpu_threads(1):
            for layer in range(s["L"]):
                attn(torch.randn(1, 64, d_model, dtype=dtype), cache=cache, layer=layer)
        row["mla_measured"] = cache.nbytes() / 64
        row["kv_lora_rank"], row["qk_rope_head_dim"] = r, dr
        rows.append(row)
    return rows


def main():
    compute = compute_rows()
    cache = cache_rows()
    print(f"{'layer':40s} {'params':>10s} {'FLOPs/token':>12s} {'us/token':>9s}")
    for r in compute:
        print(f"{r['layer']:40s} {r['params']:10,d} {r['flops_per_token']:12,.0f} {r['us_per_token']:9.2f}")
    print(f"\n{'KV cache, bytes per token':48s} {'MHA':>8s} {'GQA':>8s} {'MQA':>8s} {'MLA':>8s} {'measured':>9s}")
    for r in cache:
        print(f"{r['model']:48s} {r['mha']:8,d} {r['gqa']:8,d} {r['mqa']:8,d} {r['mla']:8,d} {r['mla_measured']:9,.0f}")
    info = machine()
    print(describe(info))
    write_results("moe", {"settings": {"d_model": D, "d_ff": F, "num_experts": E, "top_k": K, "tokens": N},
                          "compute": compute, "cache": cache})


if __name__ == "__main__":
    main()
