"""What chapters 9-11 say about GPUs, measured on one (this script needs CUDA; CI never runs it).

    python benchmarks/gpu.py          # about a minute on an H200; writes benchmarks/results/gpu.json

* Bytes against FLOPs (chapter 11's "the math"): the copy bandwidth of main memory (a 2 GiB
  device-to-device copy, bytes read plus written) and the rate of an 8192^3 matrix product in
  float32 (CUDA cores), TF32, float16 and bfloat16 (tensor cores); their ratio is how many FLOPs
  the chip does in the time its memory delivers one byte.
* Attention (chapter 11's timing cell, on the GPU): the readable path, the tiled PyTorch loop
  (64 x 64 and 128 x 256 tiles), torch SDPA in float32 (default and math backends) and SDPA's
  FlashAttention backend in float16; batch 1, 8 heads x 64, n = 1024..8192; each kernel's peak
  extra GPU memory and its largest error against a float64 reference.
* The FLOP counter (chapter 10): ``count_flops`` on chapter 10's encoder layer on the GPU, fused
  (SDPA) against explicit products: CUDA's attention kernels have formulas, so both count the
  same, where on the CPU the fused count misses Q K^T and A V.

Times are medians after warm-up (``profiling.median_time``, the device synchronized around each
call); peak memory is ``profiling.peak_memory`` (torch.cuda's peak-allocation statistics).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import transformer_lib as tl
from _results import write_results
from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.cost import block_macs
from transformer_lib.probes import record_attention
from transformer_lib.profiling import count_flops, median_time, peak_memory
from transformer_lib.tiled import tiled_attention


def rates(dev) -> dict:
    x = torch.empty(2 * 2**30 // 4, device=dev)
    y = torch.empty_like(x)
    seconds = median_time(lambda: y.copy_(x), repeat=10, warmup=3, device=dev)
    out = {"copy_GB_per_s": round(2 * x.numel() * 4 / seconds / 1e9)}
    del x, y
    n = 8192
    for name, dtype, tf32 in [("float32", torch.float32, False), ("tf32", torch.float32, True),
                              ("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False)]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
        tflops = 2 * n**3 / median_time(lambda: a @ b, repeat=10, warmup=3, device=dev) / 1e12
        out[name] = {"TFLOP_per_s": round(tflops, 1),
                     "flops_per_byte": round(tflops * 1e12 / (out["copy_GB_per_s"] * 1e9), 1)}
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def attention_rows(dev, lengths) -> list[dict]:
    rows = []
    for n in lengths:
        q, k, v = (torch.randn(1, 8, n, 64, device=dev) for _ in range(3))
        qh, kh, vh = q.half(), k.half(), v.half()

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(qh, kh, vh)

        def math_backend():
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(q, k, v)

        kernels = {"readable": lambda: scaled_dot_product_attention(q, k, v)[0],
                   "tiled 64x64": lambda: tiled_attention(q, k, v),
                   "tiled 128x256": lambda: tiled_attention(q, k, v, block_q=128, block_k=256),
                   "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
                   "sdpa math": math_backend,
                   "sdpa flash fp16": flash}
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        row = {"n": n, "ms": {}, "peak_MB": {}, "max_error": {}}
        for name, fn in kernels.items():
            slow = name.startswith("tiled")
            seconds = median_time(fn, repeat=3 if slow else 10, warmup=1 if slow else 3, device=dev)
            row["ms"][name] = round(seconds * 1e3, 4)
            row["peak_MB"][name] = round(peak_memory(fn, device=dev) / 2**20, 2)
            row["max_error"][name] = float(f"{(fn().double() - ref).abs().max().item():.3g}")
        rows.append(row)
    return rows


def flop_counter(dev) -> dict:
    n, d = 256, 512
    tl.seed_everything(0)
    layer = tl.TransformerBlock(d, 8, 4 * d).eval().to(dev)
    x = torch.randn(1, n, d, device=dev)
    fused = count_flops(layer, x)
    with record_attention(layer, weights=True):
        explicit = count_flops(layer, x)
    return {"n": n, "d": d, "model_flops": 2 * block_macs(n, d).total,
            "fused": fused.total, "explicit": explicit.total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py measures a GPU: no CUDA device here")
    dev = torch.device("cuda")
    payload = {"gpu": torch.cuda.get_device_name(dev), "cuda": torch.version.cuda,
               "rates": rates(dev), "attention": attention_rows(dev, args.lengths),
               "flop_counter": flop_counter(dev)}
    r = payload["rates"]
    print(f"{payload['gpu']}: memory {r['copy_GB_per_s']} GB/s")
    for name in ["float32", "tf32", "float16", "bfloat16"]:
        print(f"  {name:<9} {r[name]['TFLOP_per_s']:>7.1f} TFLOP/s  {r[name]['flops_per_byte']:>6.1f} FLOPs per byte")
    for row in payload["attention"]:
        print(f"n = {row['n']}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row["ms"].items()))
    print("FLOP counter:", payload["flop_counter"])
    write_results("gpu", payload)


if __name__ == "__main__":
    main()
