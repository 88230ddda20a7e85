"""Chapter 10 (Where the compute goes) exercises."""
import torch

from ..cost import attention_ffn_crossover, block_macs
from ..layers import EncoderLayer
from ..probes import record_attention
from ..profiling import count_flops
from ._core import NotYet, compare_value, exercise


def _number(answer, what):
    try:
        return float(answer)
    except (TypeError, ValueError):
        raise NotYet(f"{what} should be a number, got {type(answer).__name__}") from None


def _share_without_output_projection(n, d, expansion):
    attn = 3 * n * d * d + 2 * n * n * d
    return 100 * attn / (attn + 2 * n * d * expansion * d)


def _share_scores_only(n, d, expansion):
    attn = 2 * n * n * d
    return 100 * attn / (attn + 2 * n * d * expansion * d)


def _share_one_ffn_matrix(n, d, expansion):
    attn = 4 * n * d * d + 2 * n * n * d
    return 100 * attn / (attn + n * d * expansion * d)


@exercise("compute.attention_share",
          hint="attention = 4 n d^2 (Q, K, V and output projections) + 2 n^2 d (Q K^T and A V); "
               "FFN = 2 n d (expansion d); return 100 * attention / (attention + FFN)",
          wrong_answers=lambda: [_share_without_output_projection, _share_scores_only, _share_one_ffn_matrix,
                                 lambda n, d, e: block_macs(n, d, e).shares()["ffn"]])  # the FFN's share
def _check_share(answer):
    cases = [(64, 512, 4), (1024, 512, 4), (4096, 512, 4), (300, 768, 4), (256, 512, 1), (100, 64, 8)]
    for n, d, e in cases:
        got = _number(answer(n, d, e), "the share")
        expected = block_macs(n, d, e).shares()["attention"]
        if abs(got - expected) > 1e-6 * max(1.0, abs(expected)):
            raise NotYet(f"the attention share for n={n}, d={d}, expansion={e} is too "
                         f"{'high' if got > expected else 'low'} (answer in percent, 0 to 100)")
    return f"right for all {len(cases)} (n, d, expansion) settings."


@exercise("compute.crossover",
          hint="set 4 n d^2 + 2 n^2 d equal to 2 e n d^2, divide by 2 n d and solve for n",
          wrong_answers=lambda: [lambda d, e: 2 * d, lambda d, e: e * d / 2, lambda d, e: e * d])
def _check_crossover(answer):
    cases = [(512, 4), (768, 4), (512, 8), (64, 3), (1024, 6)]
    for d, e in cases:
        got = _number(answer(d, e), "the crossover length")
        expected = attention_ffn_crossover(d, e)
        if abs(got - expected) > 1e-6 * expected:
            raise NotYet(f"the crossover for d={d}, expansion={e} is too {'high' if got > expected else 'low'}")
    return f"right for all {len(cases)} (d, expansion) settings."


def _measured_layer_flops(batch, n, d, d_ff, heads=4):
    torch.manual_seed(0)
    layer = EncoderLayer(d, heads, d_ff).eval()
    x = torch.randn(batch, n, d)
    with record_attention(layer, weights=True):  # the readable path: explicit QK^T and AV the counter sees
        return count_flops(layer, x).total


@exercise("compute.layer_flops",
          hint="FlopCounterMode counts 2 FLOPs per multiply-add, for every sequence in the batch: "
               "2 * batch * (4 n d^2 + 2 n^2 d + 2 n d d_ff)",
          wrong_answers=lambda: [lambda B, n, d, f: B * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # MACs
                                 lambda B, n, d, f: 2 * (4 * n * d * d + 2 * n * n * d + 2 * n * d * f),  # one sequence
                                 lambda B, n, d, f: 2 * B * (4 * n * d * d + 2 * n * d * f)])  # no scores
def _check_layer_flops(answer):
    cases = [(1, 8, 16, 64), (2, 12, 32, 80), (3, 40, 16, 16)]
    for B, n, d, f in cases:
        got = _number(answer(B, n, d, f), "the FLOP count")
        compare_value(got, _measured_layer_flops(B, n, d, f), what=f"the FLOPs for batch={B}, n={n}, d={d}, d_ff={f}",
                      rtol=1e-9)
    return f"matches FlopCounterMode on the library's EncoderLayer for all {len(cases)} shapes."
