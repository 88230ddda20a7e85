"""Chapter 10 (Where the compute goes) exercises."""
import torch

from ..cost import attention_ffn_crossover, block_macs
from ..layers import TransformerBlock
from ..probes import record_attention
from ..profiling import count_flops
from ._core import compare_value, exercise, seed_cpu, to_number


@exercise("compute.attention_share",
          hint="attention = 4 n d^2 (Q, K, V and output projections) + 2 n^2 d (Q K^T and A V); "
               "FFN = 2 n d (expansion d); return 100 * attention / (attention + FFN)")
def _check_share(answer):
    cases = [(64, 512, 4), (1024, 512, 4), (4096, 512, 4), (300, 768, 4), (256, 512, 1), (100, 64, 8)]
    for n, d, e in cases:
        got = to_number(answer(n, d, e), "the share")
        expected = block_macs(n, d, e).shares()["attention"]
        compare_value(got, expected, f"the attention share (in percent, 0 to 100) for n={n}, d={d}, expansion={e}",
                      rtol=1e-6, atol=1e-6)
    return f"right for all {len(cases)} (n, d, expansion) settings."


@exercise("compute.crossover",
          hint="set 4 n d^2 + 2 n^2 d equal to 2 e n d^2, divide by 2 n d and solve for n")
def _check_crossover(answer):
    cases = [(512, 4), (768, 4), (512, 8), (64, 3), (1024, 6)]
    for d, e in cases:
        got = to_number(answer(d, e), "the crossover length")
        expected = attention_ffn_crossover(d, e)
        compare_value(got, expected, f"the crossover for d={d}, expansion={e}", rtol=1e-6)
    return f"right for all {len(cases)} (d, expansion) settings."


def _measured_flops(layer, x) -> int:
    """FlopCounterMode's count of one forward pass of ``layer`` on ``x``."""
    with record_attention(layer, weights=True):  # the readable path: explicit QK^T and AV the counter sees
        return count_flops(layer, x).total


@exercise("compute.layer_flops",
          hint="FlopCounterMode counts 2 FLOPs per multiply-add, for every sequence in the batch: "
               "2 * batch * (4 n d^2 + 2 n^2 d + 2 n d d_ff)")
def _check_layer_flops(answer):
    cases = [(1, 8, 16, 64), (2, 12, 32, 80), (3, 40, 16, 16)]
    for B, n, d, f in cases:
        got = to_number(answer(B, n, d, f), "the FLOP count")
        seed_cpu(0)  # the layer's init and x draw from the global CPU generator (restored after every check)
        layer = TransformerBlock(d, 4, f).eval()
        expected = _measured_flops(layer, torch.randn(B, n, d))
        compare_value(got, expected, what=f"the FLOPs for batch={B}, n={n}, d={d}, d_ff={f}", rtol=1e-9)
    return f"matches FlopCounterMode on the library's TransformerBlock for all {len(cases)} shapes."
